"""``replay(options) -> ReplayResult``: the one function every replay renderer calls.

Steps (docs/replay.md §3): load and migrate the snapshot; load the event; import the
agent, its registry and the HITL policy; scan the traces for the key; plan the
re-run (target, clock, trigger, pre-state — ``reconstruct``); re-run it through
the pipeline's own ``run_activation`` with a provider that serves nothing,
under the network guard; judge it (``judge``) and gather what is reported.

``replay`` never raises for bad input: every failure is a ``ReplayResult``
with ``USAGE_ERROR`` (exit 2) or ``IRREPRODUCIBLE`` (exit 3) and a one-paragraph
message. A bug of ours is a ``USAGE_ERROR`` result too, marked as internal
(exit 2, never 0). Nothing is written: replay reads.
"""

from __future__ import annotations

import contextvars
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from beam_agents import _running
from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.activation import ActivationCommit, ReplayHooks, run_activation
from beam_agents.agent import Agent
from beam_agents.blobs import unwrap_blob
from beam_agents.capture import ValueCapture
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import KeyState
from beam_agents.provider import UnservableProvider
from beam_agents.replay.inputs.agent_code import import_object, no_bytecode
from beam_agents.replay.inputs.envelopes import load_event_source
from beam_agents.replay.inputs.snapshot import load_snapshot_source
from beam_agents.replay.inputs.traces import TracedKey, scan_traces
from beam_agents.replay.isolation.guard import NetworkAttempt, block_network, keep_blocked
from beam_agents.replay.isolation.watchdog import Armed
from beam_agents.replay.judging.compare import EventComparison, compare_events
from beam_agents.replay.judging.end_check import EndCheck, check_end, end_divergence_detail
from beam_agents.replay.judging.judge import Judgement, judge
from beam_agents.replay.judging.state_view import intent_ledger, state_view
from beam_agents.replay.judging.values import collect_values, freeze_errors
from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.options import RAN_PAST, ReplayOptions, Source
from beam_agents.replay.reconstruct.plan import plan_replay
from beam_agents.replay.refusal import CannotReproduce, InputError, ReplayRefused, internal_error
from beam_agents.replay.result import (
    Divergence,
    ReplayHeader,
    ReplayResult,
    TargetFacts,
    Value,
    Verdict,
)
from beam_agents.tools import ToolRegistry
from beam_agents.trace_events import ATTR_OUTPUTS_SHA256, kind_name
from beam_agents.trace_view import ActivationKind, ActivationStart

__all__ = ["UNKNOWN_PROVIDER", "replay"]

UNKNOWN_PROVIDER = "unknown"
"""The provider name used when neither the trace nor the cache names one (no model call traced)."""


def replay(options: ReplayOptions) -> ReplayResult:
    """Reconstruct, re-run and judge one activation.

    The command line's adapter: it reads the files and imports the ``module:ATTR``
    paths of ``options``, then replays exactly as ``Replayer`` does with objects.

    Args:
        options: The inputs (files are read here, never before).

    Returns:
        The result; ``result.exit_code`` is the CLI's exit code. Never raises for
        bad input, and never for a bug of ours either (see the module docstring).
    """
    facts = HeaderSoFar(
        ReplayHeader(
            version=__version__,
            agent_path=options.agent,
            registry_path=options.registry,
            hitl_source=options.hitl or "default",
        )
    )
    return _guarded(facts, lambda: _load_options(options, facts))


class HeaderSoFar:
    """The header as one replay learns it: a typed ``ReplayHeader`` replaced field by field,
    so a refusal or an internal error reports everything known up to that point."""

    def __init__(self, header: ReplayHeader) -> None:
        self.header = header


def _guarded(facts: HeaderSoFar, load: Callable[[], _Inputs]) -> ReplayResult:
    """Load (``load``) and replay under the network guard; every failure becomes a result."""
    # Importing agent code must not write bytecode: the guard reports file writes in
    # the activation's context, and replay writes nothing.
    try:
        with no_bytecode(), block_network() as attempts:
            return _replay(load(), facts, attempts)
    except ReplayRefused as refused:
        return ReplayResult(
            verdict=refused.verdict,
            reason=refused.reason,
            header=facts.header.with_target(refused.target),
            error=refused.message,
        )
    except Exception as exc:  # a bug of ours: say so, exit 2, never 0, never a traceback
        return _internal_error(exc, facts)


def _internal_error(exc: Exception, facts: HeaderSoFar) -> ReplayResult:
    reason, message = internal_error(exc)
    return ReplayResult(
        verdict=Verdict.USAGE_ERROR,
        reason=reason,
        header=facts.header,
        error=message,
    )


@dataclass(frozen=True, kw_only=True)
class _Inputs:
    """One replay's inputs as objects: what both the CLI adapter and ``Replayer`` hand over."""

    snapshot: StateSnapshot
    state: KeyState
    blob_versions: dict[str, int]
    event: AgentEnvelope | None
    events: tuple[Source, ...]
    traces: tuple[Source, ...]
    agent: Agent
    registry: ToolRegistry
    hitl: HitlPolicy
    seq: int | None
    what_if: bool
    time_limit: float | None
    naming: Naming
    """How the caller named the inputs: the words refusals use for them."""


def _snapshot_facts(facts: HeaderSoFar, snapshot: StateSnapshot, state: KeyState) -> None:
    facts.header = replace(
        facts.header,
        entity_key=snapshot.entity_key,
        snapshot_seq=snapshot.seq,
        snapshot_at_ms=snapshot.snapshot_at_ms,
        snapshot_request_id=snapshot.request_id,
        state_schema_version=snapshot.state_schema_version,
        migrations_applied=tuple(state.migrations_applied),
    )


def _load_options(options: ReplayOptions, facts: HeaderSoFar) -> _Inputs:
    """The CLI's inputs: files read, ``module:ATTR`` paths imported (under the guard)."""
    naming = options.naming
    loaded = options.loaded_snapshot
    snapshot, state, blob_versions = (
        loaded if loaded is not None else load_snapshot_source(options.snapshot, naming)
    )
    _snapshot_facts(facts, snapshot, state)
    event = load_event_source(options.event, naming) if options.event is not None else None

    def import_code() -> tuple[Agent, ToolRegistry, HitlPolicy | None]:
        agent = import_object(options.agent, Input.AGENT, Agent, naming)
        registry = import_object(options.registry, Input.REGISTRY, ToolRegistry, naming)
        hitl = None
        if options.hitl_policy is None and options.hitl is not None:
            hitl = import_object(options.hitl, Input.HITL, HitlPolicy, naming)
        return agent, registry, hitl

    # Importing agent code runs it (module bodies): limited like the re-run, unless every
    # module is imported already (check replays many bundles of one agent: no thread then).
    paths = (options.agent, options.registry, options.hitl if options.hitl_policy is None else None)
    imported = all(p is None or p.partition(":")[0] in sys.modules for p in paths)
    agent, registry, imported_hitl = _within_limit(
        import_code,
        None if imported else options.time_limit,
        lambda _: _ImportRanPast(options.time_limit or 0, naming),
    )
    if options.hitl_policy is not None:
        hitl = options.hitl_policy
        facts.header = replace(facts.header, hitl_source=options.hitl_label or "given")
    else:
        hitl = imported_hitl or DEFAULT_HITL_POLICY
    if options.event is not None and options.events:
        event_name, events_name = naming.name(Input.EVENT), naming.name(Input.EVENTS)
        raise InputError(
            f"both {event_name} and {events_name} were given",
            f"pass the triggering envelope with {event_name}, or a dump to pick it from with "
            f"{events_name}",
        )
    return _Inputs(
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
    )


def _replay(inputs: _Inputs, facts: HeaderSoFar, attempts: list[NetworkAttempt]) -> ReplayResult:
    snapshot, state, blob_versions = inputs.snapshot, inputs.state, inputs.blob_versions
    event, agent, registry, hitl = inputs.event, inputs.agent, inputs.registry, inputs.hitl
    facts.header = replace(facts.header, hitl_policy=hitl.describe())

    naming = inputs.naming
    traced = scan_traces(inputs.traces, snapshot.entity_key, seq=inputs.seq, naming=naming)
    if inputs.events:
        event = _event_from_dump(inputs.events, inputs.seq, traced, snapshot.entity_key, naming)
    plan = plan_replay(snapshot, state, traced, event, inputs.seq, naming)
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
    facts.header = replace(
        facts.header,
        seq=plan.seq,
        now_ms=plan.now_ms,
        kind=plan.kind,
        trigger=plan.trigger_name,
        continuation_source=plan.continuation_source,
        envelope_id=plan.envelope_id,
    )
    provider_name = traced.provider_of_kept() if plan.traced is not None else traced.provider
    if not provider_name:
        newest = state.cache.entries_by_recency()
        provider_name = newest[0].provider if newest else UNKNOWN_PROVIDER
    facts.header = replace(facts.header, provider=provider_name)

    provider = UnservableProvider(provider_name)
    capture = ValueCapture()

    ended: list[Sequence[Any]] = []  # the re-run's trace, once run_activation returned

    def rerun() -> Any:
        ran = run_activation(
            agent,
            registry,
            provider,
            plan.state,
            plan.trigger,
            now_ms=plan.now_ms,
            seq=plan.seq,
            entity_key=snapshot.entity_key,
            hitl=hitl,
            replay=ReplayHooks(
                visible_through_seq=plan.seq,
                serve_recorded_tools=True,
                capture=capture,
                encode_cache_cells=False,  # only the memory cell is read (issue 14: memory)
                compact_trace=True,  # the trace as bytes (issue 14: memory)
            ),
        )
        ended.append(ran.trace)
        # Exceptions' text (their __str__ is agent code) taken here: within the time limit.
        freeze_errors(capture)
        return ran

    try:
        result = _within_limit(
            rerun,
            inputs.time_limit,
            lambda ctx: _RerunRanPast(
                inputs.time_limit or 0,
                ctx,
                plan.traced,
                naming,
                ended=ended[0] if ended else None,
            ),
        )
    except _RerunRanPast as ran_past:
        return _ran_past_result(ran_past, plan.traced, facts)
    except (SystemExit, GeneratorExit) as exc:
        # run_activation turns every Exception into a failure; these are not Exceptions.
        detail = str(exc) if isinstance(exc, SystemExit) and exc.code is not None else ""
        raise _AgentExited(type(exc).__name__ + (f" ({detail})" if detail else "")) from None
    # Every attempt counts, also one the agent's module made (and caught) at import:
    # module state built from the network is not the state the pipeline had.
    run_attempts = list(attempts)

    judgement = judge(
        plan,
        result,
        provider_calls=provider.calls,
        attempts=run_attempts,
        cache=plan.state.cache,
        tool_cache=plan.state.tool_cache,
        naming=naming,
    )
    commit_cells = getattr(result, "cells", None)
    committed = result.state.memory if isinstance(result, ActivationCommit) else None
    end = check_end(
        plan.traced,
        outputs=getattr(result, "outputs", ()),
        memory_body=unwrap_blob("memory", commit_cells.memory)[1] if commit_cells else None,
        before=plan.state.memory,
        after=committed if committed is not None else {},
        snapshot_seq=snapshot.seq,
        capture=capture,
    )
    judgement = _with_end_check(judgement, end, plan.state.memory, committed, snapshot.seq)
    # Only the trace and the served tool events are read below: drop the committed
    # cells and post-state (a large cache's encoded blob and parsed body) before the
    # values are collected (issue 14: peak memory ~ the snapshot's size).
    trace, served_tool_events = result.trace, result.served_tool_events
    del result, commit_cells
    # Values explain the verdict and never decide it: a value that cannot be decoded
    # must not turn a verdict into an internal error (exit 2).
    values_error = ""
    values: Sequence[Value] = ()
    try:
        values = collect_values(
            plan.traced,
            trace,
            capture=capture,
            trigger=plan.trigger,
            provider=provider_name,
            cache=plan.state.cache,
            outputs=end.outputs,
            memory=end.memory,
        )
    except Exception as exc:  # reported on the result, never swallowed silently
        values_error = f"{type(exc).__name__}: {exc}"
    return ReplayResult(
        verdict=judgement.verdict,
        reason=judgement.reason,
        header=facts.header,
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
        values=values,
        values_error=values_error,
        replayed_memory=committed,
        state=state_view(
            state,
            now_ms=plan.now_ms,
            blob_versions=blob_versions,
            resumed=plan.state.continuation if plan.kind is ActivationKind.RESUME else None,
            replayed=trace,
            served_tool_events=served_tool_events,
            visible_through_seq=plan.seq,
        ),
        provider_calls=provider.calls,
        network_attempts=tuple(a.describe() for a in run_attempts),
    )


def _event_from_dump(
    events: tuple[Source, ...],
    wanted_seq: int | None,
    traced: TracedKey,
    entity_key: bytes,
    naming: Naming,
) -> AgentEnvelope | None:
    """The traced triggering envelope of the target, picked out of the events dump by id
    and sha256."""
    from beam_agents.replay.inputs.envelopes import load_envelopes

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


def _with_end_check(
    judgement: Judgement, end: EndCheck, before: Any, after: Any, snapshot_seq: int
) -> Judgement:
    """The judgement, with the outputs and memory at ACTIVATION_END judged too (``end_check``).

    Only a run the events call reproduced can diverge here: an earlier divergence or
    a cache miss stays the first thing that went wrong.
    """
    pairs = judgement.comparison.pairs
    if judgement.verdict is not Verdict.REPRODUCED or not pairs:
        return judgement
    if end.fields:
        last = pairs[-1]
        comparison = EventComparison(
            pairs=pairs.marked(last.index, [f.path for f in end.fields]),
            first_difference=last.index,
        )
        assert last.traced is not None
        detail = end_divergence_detail(
            [f.path for f in end.fields],
            before=before,
            before_label=f"snapshot memory (post-image at seq {snapshot_seq})",
            after=after,
            traced_memory_sha256=end.memory.traced_sha256 if end.memory else None,
            outputs=end.outputs,
        )
        if end.self_read and any(ATTR_OUTPUTS_SHA256 in f.path for f in end.fields):
            detail.append(f"note: {end.self_read}; an output built from it differs for that reason")
        divergence = Divergence(
            index=last.index,
            kind=kind_name(last.traced.kind),
            name=last.traced.name,
            fields=end.fields,
            detail="\n".join(detail),
        )
        what = " and ".join(
            "outputs" if ATTR_OUTPUTS_SHA256 in f.path else "memory" for f in end.fields
        )
        return Judgement(
            verdict=Verdict.DIVERGED,
            reason=(
                f"event {last.index} (ACTIVATION_END {last.traced.name!r}) differs: every earlier "
                f"event matches, but the re-run's {what} differ from the traced digest"
            ),
            comparison=comparison,
            first_divergence=divergence,
        )
    if end.not_comparable:
        return replace(
            judgement,
            reason=f"{judgement.reason}; memory not judged: {end.not_comparable} (docs/replay.md §4)",
        )
    return judgement


_T = TypeVar("_T")


class _AgentThread:
    """A daemon thread that runs agent code handed to it, one call at a time.

    Kept for the next replay once a call ends (starting a thread per replay cost more than
    the replay of a small activation); abandoned when a call runs past its limit.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._loop, name="beam-agents-replay agent code", daemon=True
        )
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.tasks.get()()


_IDLE: list[_AgentThread] = []
_IDLE_LOCK = threading.Lock()


def _forget_idle_threads() -> None:
    _IDLE.clear()  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_forget_idle_threads)


def idle_agent_threads() -> frozenset[threading.Thread]:
    """The threads kept for the next replay, waiting (they hold no lock: safe to fork)."""
    with _IDLE_LOCK:
        return frozenset(r.thread for r in _IDLE)


def _agent_thread() -> _AgentThread:
    with _IDLE_LOCK:
        while _IDLE:
            runner = _IDLE.pop()
            if runner.pid == os.getpid() and runner.thread.is_alive():
                return runner
    return _AgentThread()


def _arm_hard_stop(limit: float) -> Armed | None:
    """As the console script: past twice ``limit`` (at least half a second past it), the
    watchdog it started before importing agent code ends the process (``last_resort``).

    Agent code holding the interpreter lock without returning (native code: a catastrophic
    regular expression) keeps the waiting thread from ever noticing the limit, and it could
    cancel anything set up in this interpreter; the watchdog is another process. Returns
    what disarms it, or None where no watchdog runs (the Python API: it must never end its
    caller's process).
    """
    from beam_agents.replay.isolation.watchdog import arm

    return arm(limit)


def _within_limit(
    run: Callable[[], _T],
    limit: float | None,
    stopped: Callable[[Any], ReplayRefused],
) -> _T:
    """``run()`` in a thread of its own, waited for at most ``limit`` seconds (None, 0: forever).

    Python cannot stop a thread: past the limit the thread is abandoned (a daemon, so it
    never holds the interpreter's exit) and ``stopped(ctx)`` is raised, ``ctx`` being the
    ``AgentContext`` it was running (None if it had not started one). Until that thread
    ends, everything the guard refuses stays refused process-wide (``keep_blocked``): the
    agent code in it stays as isolated as during the re-run. What ``run`` raises (a
    ``SystemExit`` too) is raised here. It runs in a copy of this context.
    """
    if not limit:
        return run()
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    lock = threading.Lock()
    finished = threading.Lock()
    finished.acquire()
    held: list[Callable[[], None]] = []

    def task() -> None:
        try:
            outcome["value"] = context.run(run)
        except BaseException as exc:  # handed to the caller, SystemExit included
            outcome["error"] = exc
        finally:
            with lock:
                outcome["done"] = True
            for release in held:  # abandoned, and ended after all
                release()
            if held:  # the thread may serve again
                with _IDLE_LOCK:
                    _IDLE.append(runner)
            finished.release()

    runner = _agent_thread()
    runner.tasks.put(task)
    armed = _arm_hard_stop(limit)
    try:
        finished.acquire(timeout=limit)
    finally:  # also on Ctrl+C while waiting: the agent code runs on, as isolated as before
        with lock:
            if "done" not in outcome:
                held.append(keep_blocked())
                if armed is not None:  # if it then keeps the interpreter: last_resort
                    held.append(armed.abandon())
        if armed is not None and not held:
            armed.disarm()
    if held:
        raise stopped(context.get(_running.ACTIVATION))
    with _IDLE_LOCK:
        _IDLE.append(runner)
    if "error" in outcome:
        raise outcome["error"]
    value: _T = outcome["value"]
    return value


_DOES_NOT_END = (
    "agent code that loops, sleeps or waits on something that never answers does not end; "
    "if the activation is only slow, "
)


class _RerunRanPast(CannotReproduce):
    """The re-run did not end within the time limit: it is not judged (exit 3)."""

    def __init__(
        self,
        limit: float,
        ctx: Any,
        traced: Sequence[Any] | None,
        naming: Naming,
        *,
        ended: Sequence[Any] | None = None,
    ) -> None:
        # The last event only: a re-run looping until the limit may have recorded millions,
        # and parsing them all (an EventLog parses each read) would take GBs at the limit.
        events: Sequence[Any] = ctx.events if ctx is not None else (ended or ())
        of = f" of the {len(traced)} traced" if traced is not None else ""
        # What the re-run had recorded, as far as the trace goes, for the result's events:
        # read once, here, while the abandoned code may still be appending.
        reached = min(len(events), len(traced)) if traced is not None else 0
        self.reached: tuple[TraceEvent, ...] = tuple(events[i] for i in range(reached))
        if len(events):
            last = events[-1]
            event = f"event {last.index} ({kind_name(last.kind)} {last.name!r}){of}"
            where = f"it had reached {event}"
            if ctx is None:  # ended, then str() of an exception it raised did not return
                where = (
                    f"it had ended at {event}, but the text of an exception it raised (its "
                    "__str__, agent code) did not come back"
                )
        else:
            where = f"it had not recorded its first event{of}"
        super().__init__(
            f"{RAN_PAST} {limit:g} s and was not judged: {where}",
            _DOES_NOT_END + naming.raise_time_limit,
        )


def _ran_past_result(
    ran_past: _RerunRanPast,
    traced: Sequence[TraceEvent] | None,
    facts: HeaderSoFar,
) -> ReplayResult:
    """Exit 3 with the events the re-run had reached, paired with the traced ones.

    Only the reached positions are paired: the traced events after them are not
    "missing" (the re-run did not get there), and nothing is judged, so a pair that
    differs is shown marked but the verdict stays irreproducible.
    """
    reached = ran_past.reached
    return ReplayResult(
        verdict=ran_past.verdict,
        reason=ran_past.reason,
        header=facts.header.with_target(ran_past.target),
        error=ran_past.message,
        events=compare_events(traced[: len(reached)], reached).pairs if traced else (),
        events_reached_only=True,
    )


class _ImportRanPast(CannotReproduce):
    """Importing the agent code did not end within the time limit (exit 3)."""

    def __init__(self, limit: float, naming: Naming) -> None:
        code = ", ".join(naming.name(what) for what in (Input.AGENT, Input.REGISTRY, Input.HITL))
        super().__init__(
            f"importing the agent code ({code}) ran past the time limit "
            f"of {limit:g} s, so nothing was re-run or judged",
            _DOES_NOT_END + naming.raise_time_limit,
        )


class _AgentExited(ReplayRefused):
    """Agent code raised SystemExit (or similar) during the re-run: nothing to judge."""

    verdict = Verdict.USAGE_ERROR

    def __init__(self, what: str) -> None:
        super().__init__(
            f"the agent code raised {what} during the re-run",
            "replay cannot judge an activation whose code exits the process; the pipeline "
            "would have lost its worker there",
        )
