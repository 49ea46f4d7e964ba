"""``replay(options) -> ReplayResult``: one replay, as a few named steps.

    load_options     the command line's inputs: files read, agent code imported (limited)
    plan_rerun       the traces scanned, the activation and its pre-state reconstructed
    rerun_isolated   the pipeline's own ``run_activation`` re-run under the guard and the
                     time limit, with a provider that serves nothing
    judge_rerun      outputs and memory checked, the verdict decided (``judging``)
    assemble         the ``ReplayResult``: the verdict, and what explains it

``run`` performs them (``Replayer`` hands it its own loading) and maps every refusal
to a result: ``replay`` never raises for bad input; every failure is a
``ReplayResult`` with ``USAGE_ERROR`` (exit 2) or ``IRREPRODUCIBLE`` (exit 3) and a
one-paragraph message. A bug of ours is a ``USAGE_ERROR`` result too, marked as
internal (exit 2, never 0). Nothing is written: replay reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from beam_agents import _running, canonical_json
from beam_agents._protos import AgentEnvelope, LlmRequest, LlmResponse, StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.activation import ActivationCommit, ActivationResult, ReplayHooks, run_activation
from beam_agents.agent import Agent
from beam_agents.agent_build import agent_build, build_differences
from beam_agents.capture import ValueCapture
from beam_agents.errors import CacheMissError
from beam_agents.fork_answer import ForkAnswer
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import KeyState, waiting_text
from beam_agents.provider import Provider, UnservableProvider
from beam_agents.replay.inputs.agent_code import (
    ImportFailed,
    import_object,
    imported_already,
    no_bytecode,
)
from beam_agents.replay.inputs.envelopes import load_envelopes, load_event_source
from beam_agents.replay.inputs.replay_inputs import LoadedFork, ReplayInputs
from beam_agents.replay.inputs.snapshot import load_snapshot_source
from beam_agents.replay.inputs.sources import read_source
from beam_agents.replay.inputs.traces import TracedKey, scan_traces
from beam_agents.replay.isolation.guard import (
    ExitRefused,
    NetworkAttempt,
    block_network,
    provider_network,
)
from beam_agents.replay.isolation.process_exit import run_exit, watch_agent_modules
from beam_agents.replay.isolation.time_limit import (
    ExitRanPast,
    ImportRanPast,
    RerunRanPast,
    within_limit,
)
from beam_agents.replay.judging.compare import compare_events
from beam_agents.replay.judging.end_check import EndCheck, check_end
from beam_agents.replay.judging.judge import Judgement, fork_outcome, judge, judge_fork
from beam_agents.replay.judging.state_view import intent_ledger, served_recordings, state_view
from beam_agents.replay.judging.values import collect_values, freeze_errors
from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.options import ForkOptions, ReplayOptions, Source
from beam_agents.replay.reconstruct.plan import Plan, plan_replay
from beam_agents.replay.refusal import CannotReproduce, InputError, InternalError, ReplayRefused
from beam_agents.replay.result import (
    ForkRun,
    ReplayHeader,
    ReplayResult,
    StopCause,
    TargetFacts,
    Value,
)
from beam_agents.tools import ToolRegistry
from beam_agents.trace_events import kind_name
from beam_agents.trace_view import ActivationKind, ActivationStart

__all__ = [
    "UNKNOWN_PROVIDER",
    "AgentExited",
    "HeaderSoFar",
    "Planned",
    "refused_result",
    "replay",
    "run",
]

UNKNOWN_PROVIDER = "unknown"
"""The provider name used when neither the trace nor the cache names one (no model call traced)."""


Planned = Callable[[ReplayHeader, Sequence[TraceEvent]], None]
"""Told, once the activation is planned and before it is re-run, the header known then and
the traced activation's events (what the TUI paints while the re-run runs). Nothing of a
verdict is known yet: the events are the trace's, unjudged."""


def replay(options: ReplayOptions, *, on_planned: Planned | None = None) -> ReplayResult:
    """Reconstruct, re-run and judge one activation.

    The command line's adapter: it reads the files and imports the ``module:ATTR``
    paths of ``options``, then replays exactly as ``Replayer`` does with objects.

    Args:
        options: The inputs (files are read here, never before).
        on_planned: Called (in this thread) with the header and the traced events once
            the activation is planned, before the re-run; not for a what-if (nothing
            traced) or a replay refused before its plan.

    Returns:
        The result; ``result.exit_code`` is the CLI's exit code. Never raises for
        bad input, and never for a bug of ours either (see the module docstring).
    """
    header = HeaderSoFar(
        ReplayHeader(
            version=__version__,
            agent_path=options.agent,
            registry_path=options.registry,
            hitl_source=options.hitl or "default",
        )
    )
    return run(header, lambda: load_options(options, header), on_planned)


class HeaderSoFar:
    """The header as one replay learns it: a typed ``ReplayHeader`` replaced field by field,
    so a refusal or an internal error reports everything known up to that point."""

    def __init__(self, header: ReplayHeader) -> None:
        self.header = header

    def note(self, **facts: Any) -> None:
        """These fields of the header are known now."""
        self.header = replace(self.header, **facts)

    def note_snapshot(self, snapshot: StateSnapshot, state: KeyState) -> None:
        """What the loaded snapshot says (before anything else can be refused)."""
        self.note(
            entity_key=snapshot.entity_key,
            snapshot_seq=snapshot.seq,
            snapshot_at_ms=snapshot.snapshot_at_ms,
            snapshot_request_id=snapshot.request_id,
            snapshot_waiting=waiting_text(snapshot),
            state_schema_version=snapshot.state_schema_version,
            migrations_applied=tuple(state.migrations_applied),
        )


def run(
    header: HeaderSoFar, load: Callable[[], ReplayInputs], on_planned: Planned | None = None
) -> ReplayResult:
    """``load()`` the inputs and replay them under the guard; every failure is a result
    (``on_planned``: see ``replay``).

    Importing agent code (in ``load``) is guarded as the re-run is, and writes no
    bytecode: the guard reports file writes in the activation's context, and replay
    writes nothing.
    """
    try:
        with no_bytecode(), block_network() as attempts:
            with watch_agent_modules():
                try:
                    inputs = load()
                except ImportFailed as failed:
                    if attempts:  # the guard refused what the module body tried
                        raise ImportBlocked(failed, attempts[0]) from None
                    raise
                plan = plan_rerun(inputs, header)
                if on_planned is not None and plan.traced is not None:
                    on_planned(header.header, plan.traced)
                answer = plan_fork(inputs.fork, plan, inputs.naming) if inputs.fork else None
                rerun = rerun_isolated(inputs, plan, header.header.provider, answer)
            if inputs.process_ends:
                exit_isolated(inputs, len(rerun.result.trace), attempts)
            # Every attempt counts, also one the agent's module made (and caught) at
            # import: module state built from the network is not the state the pipeline had.
            blocked = list(attempts)
            judged = judge_rerun(inputs, plan, rerun, blocked)
            replayed = rerun.replayed()
            # Only the trace and what replayed() keeps are read below: the committed cells
            # and post-state (a large cache's parsed copy) go before the values are
            # collected (issue 14: peak memory ~ the snapshot's size).
            del rerun
            return assemble(inputs, plan, replayed, judged, header, blocked)
    except RerunRanPast as ran_past:
        return _ran_past_result(ran_past, header.header)
    except ReplayRefused as refused:
        return refused_result(refused, header.header)
    except Exception as exc:  # a bug of ours: say so, exit 2, never 0, never a traceback
        return refused_result(InternalError(exc), header.header)


def refused_result(refused: ReplayRefused, header: ReplayHeader) -> ReplayResult:
    """The result of a replay that stopped at ``refused``: its verdict, its one paragraph,
    and what was known of the target (the one mapping of a refusal to a result)."""
    return ReplayResult(
        verdict=refused.verdict,
        reason=refused.reason,
        header=header.with_target(refused.target),
        error=refused.message,
        stop=refused.stop,
        redacted_reason=None if refused.redacted is None else refused.redacted[0],
        redacted_error=refused.redacted_message,
    )


def load_options(options: ReplayOptions, header: HeaderSoFar) -> ReplayInputs:
    """The command line's inputs: files read, ``module:ATTR`` paths imported (under the
    guard ``run`` holds, and within the time limit unless every module is imported)."""
    naming = options.naming
    loaded = options.loaded_snapshot
    snapshot, state, blob_versions = (
        loaded if loaded is not None else load_snapshot_source(options.snapshot, naming)
    )
    header.note_snapshot(snapshot, state)
    event = load_event_source(options.event, naming) if options.event is not None else None
    hitl_path = options.hitl if options.hitl_policy is None else None

    search = options.code_search

    fork = options.fork
    fork_value = _fork_value(fork, naming) if fork is not None else None
    fork_provider_path = fork.provider if fork is not None else None

    def import_code() -> tuple[Agent, ToolRegistry, HitlPolicy | None, Provider | None]:
        agent = import_object(options.agent, Input.AGENT, Agent, naming, search)
        registry = import_object(options.registry, Input.REGISTRY, ToolRegistry, naming, search)
        hitl = import_object(hitl_path, Input.HITL, HitlPolicy, naming) if hitl_path else None
        provider = (
            _fork_provider(fork_provider_path, naming, search) if fork_provider_path else None
        )
        return agent, registry, hitl, provider

    # Importing agent code runs it (module bodies): limited like the re-run, unless every
    # module is imported already (check replays many bundles of one agent: no thread then).
    imported = all(
        imported_already(p)
        for p in (options.agent, options.registry, hitl_path, fork_provider_path)
    )
    agent, registry, imported_hitl, fork_provider = within_limit(
        import_code,
        None if imported else options.time_limit,
        lambda _: ImportRanPast(options.time_limit or 0, naming),
    )
    if options.hitl_policy is not None:
        hitl = options.hitl_policy
        header.note(hitl_source=options.hitl_label or "given")
    else:
        hitl = imported_hitl or DEFAULT_HITL_POLICY
    if options.event is not None and options.events:
        event_name, events_name = naming.name(Input.EVENT), naming.name(Input.EVENTS)
        raise InputError(
            f"both {event_name} and {events_name} were given",
            f"pass the triggering envelope with {event_name}, or a dump to pick it from with "
            f"{events_name}",
        )
    return ReplayInputs(
        snapshot=snapshot,
        state=state,
        blob_versions=blob_versions,
        event=event,
        events=tuple(options.events),
        traces=tuple(options.traces),
        agent=agent,
        registry=registry,
        hitl=hitl,
        seq=options.seq,
        what_if=options.what_if,
        time_limit=options.time_limit,
        naming=naming,
        fork=None
        if fork is None or fork_value is None
        else LoadedFork(
            at=fork.at,
            value=fork_value[0],
            value_source=fork_value[1],
            provider=fork_provider,
            provider_path=fork_provider_path or "",
        ),
        process_ends=options.process_ends,
        divergence_detail=options.divergence_detail,
    )


def _fork_value(fork: ForkOptions, naming: Naming) -> tuple[str, str]:
    """A fork's value as text, and where it came from (``--set``, ``--set @FILE``).

    Raises:
        InputError: The file cannot be read, is no regular file or over its cap, or the
            value is not UTF-8.
    """
    if fork.value_file is not None:
        data = read_source(fork.value_file, Input.FORK_VALUE, naming)
        source = naming.given(Input.FORK_VALUE, describe_path(fork.value_file))
    else:
        data = fork.value or b""
        source = naming.name(Input.FORK_VALUE)
    try:
        return data.decode("utf-8"), source
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{source}: the value is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})",
            "a model call's value is its response text and a tool call's is JSON, both UTF-8; "
            "save the value to a file in UTF-8 and give it as @FILE",
        ) from None


def describe_path(source: Source) -> str:
    """A file source as a message names it."""
    if isinstance(source, bytes):
        return f"<{len(source)} bytes>"
    return str(source)


def _fork_provider(path: str, naming: Naming, search: Sequence[str]) -> Provider:
    """``--fork-provider module:ATTR``: a provider, or a factory of one (as
    ``AgentConfig.provider_factory``), called once here.

    Raises:
        InputError: It does not import, or is neither a provider nor a factory of one.
    """
    found = import_object(path, Input.FORK_PROVIDER, object, naming, search)
    provider: object = found
    if not isinstance(found, Provider) and callable(found):
        try:
            provider = found()
        except Exception as exc:
            raise InputError(
                f"{naming.given(Input.FORK_PROVIDER, path)}: calling it to make the provider "
                f"raised {type(exc).__name__}: {exc}",
                "give a provider, or a function of no arguments that returns one",
            ) from None
    if not isinstance(provider, Provider):
        raise InputError(
            f"{naming.given(Input.FORK_PROVIDER, path)} is a {type(provider).__name__}, not a "
            "model provider",
            "give an object with a name and complete(request) -> LlmResponse, or a function of "
            "no arguments that returns one (e.g. the pipeline's provider_factory)",
        )
    return provider


def plan_fork(fork: LoadedFork, plan: Plan, naming: Naming) -> ForkAnswer:
    """What the forked call receives: the traced event at ``fork.at`` must be a model or tool
    call of the traced activation, and a tool call's value JSON.

    Raises:
        InputError: No traced activation (a what-if), an index out of range or at no call,
            or a tool call's value that is not JSON.
    """
    flag = naming.given(Input.FORK, fork.at)
    traced = plan.traced
    if traced is None:
        raise InputError(
            f"{flag}: seq {plan.seq} (a pending {plan.trigger_name}) was never traced, so there "
            "is no traced call to answer differently",
            "fork a traced activation (a what-if has no trace to fork from)",
        )
    calls = [
        f"{kind_name(e.kind)} {e.name!r} at {e.index}"
        for e in traced
        if e.kind in (TraceEvent.LLM_CALL, TraceEvent.TOOL_CALL)
    ]
    listed = "; its calls: " + ", ".join(calls) if calls else "; it made no model or tool call"
    if fork.at >= len(traced):
        raise InputError(
            f"{flag}: seq {plan.seq}'s trace has events 0 to {len(traced) - 1}{listed}",
            "give the index of a model or tool call, as the headless report numbers events",
        )
    event = traced[fork.at]
    if event.kind not in (TraceEvent.LLM_CALL, TraceEvent.TOOL_CALL):
        raise InputError(
            f"{flag}: event {fork.at} is {kind_name(event.kind)} {event.name!r}, not a model or "
            f"tool call{listed}",
            "a fork answers one call differently: give the index of an LLM_CALL or a TOOL_CALL",
        )
    if event.kind == TraceEvent.LLM_CALL:
        return ForkAnswer(index=fork.at, model=True, text=fork.value)
    try:
        result = canonical_json.loads(fork.value.encode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise InputError(
            f"{fork.value_source}: event {fork.at} is a tool call, whose value is its result "
            f"as JSON, and this is not JSON ({type(exc).__name__}: {str(exc)[:80]})",
            f"give a JSON value: a string is quoted ({naming.name(Input.FORK_VALUE)} "
            "'\"text\"'), an object is {\"key\": ...}",
        ) from None
    return ForkAnswer(index=fork.at, model=False, result=result)


class ForkProvider:
    """The provider a fork's continuation runs with: ``inner`` (``--fork-provider``) under the
    traced provider's name (cache keys stay the trace's), answering only after the fork's
    event, and the only code of the run that may open the network (``provider_network``).
    """

    def __init__(self, name: str, inner: Provider, after: int) -> None:
        self.name = name
        self.inner = inner
        self.after = after
        self.calls = 0
        """Calls it answered (or failed to)."""
        self.refused = 0
        """Calls before the fork point, which only the snapshot may serve (each a miss)."""

    def complete(self, request: LlmRequest) -> LlmResponse:
        ctx = _running.ACTIVATION.get()
        if ctx is None or len(ctx.events) <= self.after:
            # Before the fork, a model call the cache cannot serve is a miss, as in any replay.
            self.refused += 1
            from beam_agents.cache_key import compute_cache_key

            raise CacheMissError(compute_cache_key(request, provider=self.name), request.model)
        self.calls += 1
        with provider_network():
            return self.inner.complete(request)


def plan_rerun(inputs: ReplayInputs, header: HeaderSoFar) -> Plan:
    """The traces scanned for the key, the triggering envelope found, the activation and
    its pre-state reconstructed (``reconstruct``); the header learns each as it is known."""
    snapshot, naming = inputs.snapshot, inputs.naming
    header.note(hitl_policy=inputs.hitl.describe())
    given = agent_build(inputs.agent)  # in no trace: the build is named, never compared there
    header.note(
        agent_build=given,
        snapshot_build=snapshot.agent_build if snapshot.HasField("agent_build") else None,
        build_skew=build_differences(snapshot.agent_build, given),
    )
    traced = scan_traces(inputs.traces, snapshot.entity_key, seq=inputs.seq, naming=naming)
    event = inputs.event
    if inputs.events:
        event = _event_from_dump(inputs.events, inputs.seq, traced, snapshot.entity_key, naming)
    plan = plan_replay(snapshot, inputs.state, traced, event, inputs.seq, naming)
    if plan.what_if and not inputs.what_if:
        refused = InputError(
            f"seq {plan.seq} (a pending {plan.trigger_name}) was never traced: replaying it is a "
            "what-if, not a reproduction",
            f"pass {naming.name(Input.WHAT_IF)} to run it anyway (exit 0 when it runs to its end, "
            "3 when it stops at a model call the snapshot's cache cannot serve); "
            f"{naming.without_switch} a script can never mistake a what-if for a reproduction",
        )
        refused.target = TargetFacts(seq=plan.seq, kind=plan.kind, trigger=plan.trigger_name)
        raise refused
    header.note(
        seq=plan.seq,
        now_ms=plan.now_ms,
        kind=plan.kind,
        trigger=plan.trigger_name,
        continuation_source=plan.continuation_source,
        envelope_id=plan.envelope_id,
    )
    provider = traced.provider_of_kept() if plan.traced is not None else traced.provider
    if not provider:
        newest = inputs.state.cache.entries_by_recency()
        provider = newest[0].provider if newest else UNKNOWN_PROVIDER
    header.note(provider=provider)
    return plan


def _event_from_dump(
    events: tuple[Source, ...],
    wanted_seq: int | None,
    traced: TracedKey,
    entity_key: bytes,
    naming: Naming,
) -> AgentEnvelope | None:
    """The traced triggering envelope of the target, picked out of the events dump by id
    and sha256."""
    seq = wanted_seq if wanted_seq is not None else traced.highest_seq
    start_event = traced.starts.get(seq) if seq is not None else None
    if seq is None or start_event is None:
        return None  # nothing traced to pick by (plan_replay says why)
    start = ActivationStart.of(start_event)
    if start.is_timeout:
        return None  # a HITL timeout has no envelope
    index = load_envelopes(events, entity_key, naming)
    raw = index.find(*start.envelope, seq=seq)
    return load_event_source(raw, naming)


@dataclass(frozen=True)
class Replayed:
    """What the result shows of the re-run, once it is judged."""

    trace: Sequence[TraceEvent]
    served_tool_events: tuple[int, ...]
    """Indices of its TOOL_CALLs served from the tool cache."""
    memory: Any
    """The memory it committed (None: it committed nothing)."""
    capture: ValueCapture
    """The values behind its digests, and the memory keys it read and wrote."""
    provider_calls: int
    """How many times it reached the provider (each one a miss)."""


@dataclass(frozen=True)
class Rerun:
    """What the re-run did."""

    result: ActivationResult
    capture: ValueCapture
    provider_calls: int
    """Calls that reached the provider that serves nothing (each one a miss)."""
    fork_provider_calls: int = 0
    """A fork's: calls its ``--fork-provider`` answered."""

    def replayed(self) -> Replayed:
        """What is read of it after the judgement."""
        result = self.result
        return Replayed(
            trace=result.trace,
            served_tool_events=result.served_tool_events,
            memory=result.state.memory if isinstance(result, ActivationCommit) else None,
            capture=self.capture,
            provider_calls=self.provider_calls,
        )


class ImportBlocked(CannotReproduce):
    """Importing agent code failed on something the guard refused: it cannot be replayed."""

    stop = StopCause.BLOCKED

    def __init__(self, failed: ImportFailed, attempt: NetworkAttempt) -> None:
        def reason(head: str, attempt: NetworkAttempt) -> str:
            return f"{head}: replay refused what the module tried when imported ({attempt.describe()})"

        detail = (
            "replay runs agent code isolated (no network, processes, signals, native code or "
            "file writes), also while importing it; a module that does such things when "
            "imported cannot be replayed: do them in the pipeline's setup (provider_factory, "
            "a DoFn's setup), not at import"
        )
        super().__init__(reason(failed.reason, attempt), detail)
        redacted_head = failed.redacted[0] if failed.redacted is not None else failed.reason
        self.redacted = (reason(redacted_head, attempt.redacted()), detail)


class AgentExited(ReplayRefused):
    """Agent code called ``os._exit`` during the re-run: nothing to judge (exit 2)."""

    stop = StopCause.AGENT_EXITED

    def __init__(self, what: str) -> None:
        super().__init__(
            f"the agent code called {what} during the re-run",
            "replay cannot judge an activation whose code ends the process; the pipeline "
            "would have lost its worker there",
        )


def rerun_isolated(
    inputs: ReplayInputs, plan: Plan, provider_name: str, fork: ForkAnswer | None = None
) -> Rerun:
    """The activation re-run by the pipeline's own ``run_activation``, in a thread of its
    own within the time limit, with a provider that serves nothing (``run`` holds the guard).

    Raises:
        RerunRanPast: It did not end within the time limit.
        AgentExited: Agent code called ``os._exit`` (a ``SystemExit`` it raises fails the
            activation, as in the pipeline).
    """
    provider: UnservableProvider | ForkProvider = UnservableProvider(provider_name)
    if fork is not None and inputs.fork is not None and inputs.fork.provider is not None:
        provider = ForkProvider(provider_name, inputs.fork.provider, fork.index)
    capture = ValueCapture()
    ended: list[Sequence[Any]] = []  # the re-run's trace, once run_activation returned

    def rerun() -> ActivationResult:
        ran = run_activation(
            inputs.agent,
            inputs.registry,
            provider,
            plan.state,
            plan.trigger,
            now_ms=plan.now_ms,
            seq=plan.seq,
            entity_key=inputs.snapshot.entity_key,
            hitl=inputs.hitl,
            replay=ReplayHooks(
                visible_through_seq=plan.seq,
                serve_recorded_tools=True,
                capture=capture,
                encode_cache_cells=False,  # only the memory cell is read (issue 14: memory)
                compact_trace=True,  # the trace as bytes (issue 14: memory)
                fork=fork,
                uncontained=(ExitRefused,),
            ),
        )
        ended.append(ran.trace)
        # Exceptions' text (their __str__ is agent code) taken here: within the time limit.
        freeze_errors(capture)
        return ran

    try:
        result = within_limit(
            rerun,
            inputs.time_limit,
            lambda ctx: RerunRanPast(
                inputs.time_limit or 0,
                ctx,
                plan.traced,
                inputs.naming,
                ended=ended[0] if ended else None,
            ),
        )
    except ExitRefused as exc:
        # run_activation turns everything else agent code raises into a failure.
        raise AgentExited(str(exc)) from None
    calls = provider.calls if isinstance(provider, UnservableProvider) else provider.refused
    return Rerun(
        result=result,
        capture=capture,
        provider_calls=calls,
        fork_provider_calls=provider.calls if isinstance(provider, ForkProvider) else 0,
    )


def exit_isolated(inputs: ReplayInputs, at_index: int, attempts: list[NetworkAttempt]) -> None:
    """What agent code runs at interpreter exit, run now within the time limit (the process
    ends after this replay); what it tries counts after the re-run's last event.

    Raises:
        ExitRanPast: It did not end within the time limit.
    """
    start = len(attempts)
    within_limit(
        run_exit, inputs.time_limit, lambda _: ExitRanPast(inputs.time_limit or 0, inputs.naming)
    )
    attempts[start:] = [
        replace(a, event_index=at_index, at_exit=True) for a in attempts[start:]
    ]


def judge_rerun(
    inputs: ReplayInputs, plan: Plan, rerun: Rerun, attempts: Sequence[NetworkAttempt]
) -> tuple[Judgement, EndCheck, ForkRun | None]:
    """The outputs and memory against the traced ACTIVATION_END, and the verdict (a fork's:
    ``judge_fork``, with the fork's facts)."""
    result = rerun.result
    commit = result if isinstance(result, ActivationCommit) else None
    committed = commit.state.memory if commit is not None else None
    end = check_end(
        plan.traced,
        outputs=commit.outputs if commit is not None else (),
        memory_body=canonical_json.dumps(committed) if committed is not None else None,
        writes=commit.memory_writes if commit is not None else None,
        before=plan.state.memory,
        after=committed if committed is not None else {},
        provenance=plan.state.memory_provenance,
        seq=plan.seq,
        snapshot_seq=inputs.snapshot.seq,
        capture=rerun.capture,
    )
    if inputs.fork is not None:
        judgement, ended_at = judge_fork(
            plan,
            result,
            at=inputs.fork.at,
            provider_path=inputs.fork.provider_path,
            attempts=attempts,
            cache=plan.state.cache,
            tool_cache=plan.state.tool_cache,
            naming=inputs.naming,
        )
        fork = ForkRun(
            index=inputs.fork.at,
            kind=kind_name(plan.traced[inputs.fork.at].kind) if plan.traced else "",
            name=plan.traced[inputs.fork.at].name if plan.traced else "",
            value=inputs.fork.value,
            value_source=inputs.fork.value_source,
            provider_path=inputs.fork.provider_path,
            provider_calls=rerun.fork_provider_calls,
            ended_at=ended_at,
            outcome=fork_outcome(result),
        )
        return judgement, end, fork
    judgement = judge(
        plan,
        result,
        provider_calls=rerun.provider_calls,
        attempts=attempts,
        cache=plan.state.cache,
        tool_cache=plan.state.tool_cache,
        end=end,
        naming=inputs.naming,
        divergence_detail=inputs.divergence_detail,
    )
    return judgement, end, None


def assemble(
    inputs: ReplayInputs,
    plan: Plan,
    replayed: Replayed,
    judged: tuple[Judgement, EndCheck, ForkRun | None],
    header: HeaderSoFar,
    attempts: Sequence[NetworkAttempt],
) -> ReplayResult:
    """The result: the judgement, and what explains it (values, ledger, state), never
    deciding anything."""
    judgement, end, fork = judged
    trace, served_tool_events = replayed.trace, replayed.served_tool_events
    # Values explain the verdict and never decide it: a value that cannot be decoded
    # must not turn a verdict into an internal error (exit 2).
    values_error = ""
    values: Sequence[Value] = ()
    try:
        values = collect_values(
            plan.traced,
            trace,
            capture=replayed.capture,
            trigger=plan.trigger,
            provider=header.header.provider,
            cache=plan.state.cache,
            outputs=end.outputs,
            memory=end.memory,
        )
    except Exception as exc:  # reported on the result, never swallowed silently
        values_error = f"{type(exc).__name__}: {exc}"
    return ReplayResult(
        verdict=judgement.verdict,
        reason=judgement.reason,
        header=header.header,
        events=judgement.comparison.pairs,
        first_divergence=judgement.first_divergence,
        cache_miss=judgement.cache_miss,
        tool_miss=judgement.tool_miss,
        served_tool_events=served_tool_events,
        intents=intent_ledger(plan.traced, trace),
        outputs=end.outputs,
        memory=end.memory,
        end_digests_traced=end.traced,
        memory_not_judged=end.not_comparable,
        memory_writes=end.writes,
        unseen_reads=end.unseen,
        served_recordings=served_recordings(
            plan.state.tool_cache,
            now_ms=plan.now_ms,
            replayed=trace,
            served_tool_events=served_tool_events,
        ),
        values=values,
        values_error=values_error,
        replayed_memory=replayed.memory,
        state=state_view(
            inputs.state,
            now_ms=plan.now_ms,
            blob_versions=inputs.blob_versions,
            resumed=plan.state.continuation if plan.kind is ActivationKind.RESUME else None,
            replayed=trace,
            served_tool_events=served_tool_events,
            visible_through_seq=plan.seq,
        ),
        # A fork's count is every call the re-run made to a provider, its --fork-provider's
        # included (fork.provider_calls says how many were those): "provider calls: 0" above
        # "the others answered by ... (1 call(s))" read as a contradiction.
        provider_calls=replayed.provider_calls + (fork.provider_calls if fork is not None else 0),
        network_attempts=tuple(a.describe() for a in attempts),
        redacted_network_attempts=tuple(a.redacted().describe() for a in attempts),
        redacted_reason=judgement.redacted_reason,
        stop=judgement.stop,
        fork=fork,
    )


def _ran_past_result(ran_past: RerunRanPast, header: ReplayHeader) -> ReplayResult:
    """Exit 3 with the events the re-run had reached, paired with the traced ones.

    Only the reached positions are paired: the traced events after them are not
    "missing" (the re-run did not get there), and nothing is judged, so a pair that
    differs is shown marked but the verdict stays irreproducible.
    """
    reached, traced = ran_past.reached, ran_past.traced
    return replace(
        refused_result(ran_past, header),
        events=compare_events(traced[: len(reached)], reached).pairs if traced else (),
        events_reached_only=True,
    )
