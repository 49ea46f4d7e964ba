"""``run_activation``: one run of agent code for one key — the one implementation.

The Beam DoFn and the replay engine both call this function with a key's loaded
state, a trigger and a clock; it returns either an ``ActivationCommit`` (the new
state and everything to emit) or an ``ActivationFailure`` (the trace, ending in
``ACTIVATION_FAILED``, and nothing else: invariant 1). It never touches Beam,
the network, the wall clock or global randomness.

Triggers, and what the key must look like for each (``classify_trigger``):

    event        key not suspended      -> start: agent.start(ctx, event)
                 key suspended          -> queue in the inbox until it is not
    tool_result  intent awaited, released -> resume: agent.resume(..., ToolResult)
    approval     intent pending approval:
                   approved             -> resume without agent code: release the intent
                   rejected, awaited    -> resume: agent.resume(..., Approval)
                   rejected, not awaited-> resume without agent code: drop the intent
    Timeout      key suspended          -> resume: agent.resume(..., Timeout)
    anything else                       -> rejected with a reason (the DoFn's .errors)
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from beam_agents import _running, canonical_json
from beam_agents import trace_events as te
from beam_agents._protos import (
    AgentEnvelope,
    Approval,
    Continuation,
    ResumeRecord,
    ToolIntent,
    ToolResult,
    TraceEvent,
)
from beam_agents.agent import Agent, Done, Suspend, Timeout
from beam_agents.blobs import encode_memory
from beam_agents.capture import CaptureKind, ValueCapture
from beam_agents.context import AgentContext, ProviderFailure, ToolMiss
from beam_agents.context import error_type_name as _error_type
from beam_agents.errors import AgentResultError, CorruptBlobError
from beam_agents.event_log import EventLog
from beam_agents.fork_answer import ForkAnswer
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import KeyState, StateCells, dump_key_state
from beam_agents.llm_cache import DEFAULT_CACHE_POLICY, CachePolicy
from beam_agents.memory_writes import MemoryWrites
from beam_agents.migrations import CURRENT_VERSIONS
from beam_agents.provider import Provider
from beam_agents.tool_cache import DEFAULT_TOOL_CACHE_POLICY, ToolCachePolicy
from beam_agents.tools import ToolRegistry
from beam_agents.trace_view import ActivationKind, InboundStatus, Outcome, Trigger

MAX_RESUME_HISTORY = 8
"""How many consumed continuations ``StateSnapshot.resumed_from`` keeps (docs/replay.md §1)."""


class TriggerAction(enum.Enum):
    START = "start"
    RESUME = "resume"
    QUEUE = "queue"
    EXPORT = "export"
    REJECT = "reject"


@dataclass(frozen=True)
class TriggerDecision:
    """What a key in a given state does with one trigger."""

    action: TriggerAction
    reason: str = ""
    """For REJECT: why, in one sentence naming the intent or body."""

    @property
    def kind(self) -> ActivationKind | None:
        """The activation this decision runs (START or RESUME), None if it runs none."""
        if self.action is TriggerAction.START:
            return ActivationKind.START
        if self.action is TriggerAction.RESUME:
            return ActivationKind.RESUME
        return None


# The decisions that carry no reason, built once (a frozen dataclass's __init__ is not
# free, and classify_trigger runs for every input of every key).
_START = TriggerDecision(TriggerAction.START)
_RESUME = TriggerDecision(TriggerAction.RESUME)
_QUEUE = TriggerDecision(TriggerAction.QUEUE)
_EXPORT = TriggerDecision(TriggerAction.EXPORT)


# The Trigger of each envelope body, looked up rather than built: an Enum call costs a
# metaclass __call__ and a value lookup, and every activation names its trigger 4 times.
_TRIGGER_OF_BODY: dict[str | None, Trigger] = {
    **{member.value: member for member in Trigger},
    None: Trigger.NONE,
}


def trigger_name(trigger: AgentEnvelope | Timeout) -> Trigger:
    """``event``, ``tool_result``, ``approval``, ``export_request``, ``timeout`` or ``none``."""
    if isinstance(trigger, Timeout):
        return Trigger.TIMEOUT
    body = trigger.WhichOneof("body")
    found = _TRIGGER_OF_BODY.get(body)
    return found if found is not None else Trigger(body or Trigger.NONE)  # unknown: refused


def hitl_timeout(continuation: Continuation, fired_ms: int) -> Timeout:
    """The trigger a suspended key's HITL timer hands ``run_activation`` when it fires.

    The DoFn builds it when the timer fires; replay builds it for a traced timeout
    resume. One function, so the two can never disagree on what a timeout carries.
    """
    return Timeout(
        deadline_ms=fired_ms, awaiting_intent_ids=tuple(continuation.awaiting_intent_ids)
    )


def classify_trigger(state: KeyState, trigger: AgentEnvelope | Timeout) -> TriggerDecision:
    """Decide what a key in ``state`` does with ``trigger`` (see the module docstring)."""
    cont = state.continuation
    body = trigger_name(trigger)
    if body is Trigger.TIMEOUT:
        if cont is None:
            return TriggerDecision(
                TriggerAction.REJECT, "HITL timer fired for a key that is not suspended"
            )
        return _RESUME
    assert isinstance(trigger, AgentEnvelope)
    if body is Trigger.EXPORT_REQUEST:
        return _EXPORT
    if body is Trigger.EVENT:
        return _QUEUE if cont is not None else _START
    pending_ids = {i.intent_id for i in state.pending}
    if body is Trigger.TOOL_RESULT:
        intent_id = trigger.tool_result.intent_id
        if intent_id in pending_ids:
            return TriggerDecision(
                TriggerAction.REJECT,
                f"tool_result for intent {intent_id!r}, which still awaits approval "
                "(an executor must not perform an unapproved intent)",
            )
        if cont is not None and intent_id in cont.awaiting_intent_ids:
            return _RESUME
        return TriggerDecision(
            TriggerAction.REJECT,
            f"tool_result for unknown or already-resolved intent {intent_id!r}",
        )
    if body is Trigger.APPROVAL:
        intent_id = trigger.approval.intent_id
        if intent_id in pending_ids:
            return _RESUME
        return TriggerDecision(
            TriggerAction.REJECT, f"approval for unknown or already-resolved intent {intent_id!r}"
        )
    return TriggerDecision(
        TriggerAction.REJECT,
        "envelope has no body (event, tool_result, approval or export_request)",
    )


@dataclass(frozen=True)
class ActivationCommit:
    """A successful activation: the state to commit and everything to emit."""

    seq: int
    kind: ActivationKind
    state: KeyState
    """The key's state after the activation (in memory)."""
    cells: StateCells
    """The same state as the bytes the state cells hold, at the current blob versions
    (the two cache cells empty when run with ``ReplayHooks(encode_cache_cells=False)``)."""
    trace: Sequence[TraceEvent]
    """A tuple; an ``EventLog`` (the events as bytes) with ``ReplayHooks(compact_trace=True)``."""
    outputs: tuple[bytes, ...] = ()
    released_intents: tuple[ToolIntent, ...] = ()
    """Intents for ``.intents``: executors may perform them now."""
    approval_requests: tuple[ToolIntent, ...] = ()
    """Approval-gated intents for ``.approvals``; released only when approved."""
    timer_deadline_ms: int | None = None
    """Set when the key ended suspended: fire the HITL timer at this event time."""
    provider_failures: tuple[ProviderFailure, ...] = ()
    """Model calls the provider did not answer but agent code caught."""
    tool_misses: tuple[ToolMiss, ...] = ()
    """Replay: recorded tool calls the tool cache could not serve but agent code caught."""
    served_tool_events: tuple[int, ...] = ()
    """Replay: indices of the TOOL_CALL events served from the tool cache."""
    memory_writes: MemoryWrites = field(default_factory=MemoryWrites)
    """What the activation wrote to memory (traced as ``beam_agents.memory_writes_sha256``)."""

    @property
    def suspended(self) -> bool:
        return self.state.continuation is not None


@dataclass(frozen=True)
class ActivationFailure:
    """A failed activation: nothing is committed but its SEQ and this trace."""

    seq: int
    kind: ActivationKind
    trace: Sequence[TraceEvent]
    """A tuple; an ``EventLog`` (the events as bytes) with ``ReplayHooks(compact_trace=True)``."""
    error_type: str
    error: BaseException = field(compare=False)
    provider_failures: tuple[ProviderFailure, ...] = ()
    tool_misses: tuple[ToolMiss, ...] = ()
    served_tool_events: tuple[int, ...] = ()


ActivationResult = ActivationCommit | ActivationFailure


def envelope_digest(envelope: AgentEnvelope) -> str:
    """sha256 hex of the envelope's deterministic serialization (traced on ACTIVATION_START)."""
    return hashlib.sha256(envelope.SerializeToString(deterministic=True)).hexdigest()


@dataclass(frozen=True, kw_only=True)
class ReplayHooks:
    """What replay changes in one run of ``run_activation``; each default is the pipeline's.

    One object, so the pipeline's call names none of them and a new replay-only switch
    is one field here, not one more parameter of every call.
    """

    visible_through_seq: int | None = None
    """Cache entries minted by a later activation than this seq are not the responses
    the replayed one consumed (nor the tool results it got): they are not served."""
    serve_recorded_tools: bool = False
    """``recorded=True`` tools are served from the key's tool cache and never run (the
    pipeline runs them and records their results under ``tool_cache_policy``)."""
    capture: ValueCapture | None = None
    """Receives the value behind every digest the activation traces."""
    encode_cache_cells: bool = True
    """False: the commit's ``llm_cache`` and ``tool_cache`` cells stay empty instead of
    holding the caches encoded (replay reads only the memory cell; encoding a large
    cache would hold it twice more)."""
    compact_trace: bool = False
    """True: the trace is recorded as the events' serialized bytes (``EventLog``, a
    quarter of the parsed messages' memory), the same events read back."""
    fork: ForkAnswer | None = None
    """Replay's fork (``--fork N --set VALUE``): the call at that trace index receives this
    answer instead of the cache's or the tool's."""
    uncontained: tuple[type[BaseException], ...] = ()
    """What ends the run instead of failing the activation: replay's guard raises these to
    stop agent code (``os._exit`` refused). Everything else agent code raises fails the
    activation, as in the pipeline."""


_PIPELINE = ReplayHooks()


def run_activation(
    agent: Agent,
    registry: ToolRegistry,
    provider: Provider,
    state: KeyState,
    trigger: AgentEnvelope | Timeout,
    *,
    now_ms: int,
    seq: int,
    entity_key: bytes,
    hitl: HitlPolicy = DEFAULT_HITL_POLICY,
    cache_policy: CachePolicy = DEFAULT_CACHE_POLICY,
    tool_cache_policy: ToolCachePolicy = DEFAULT_TOOL_CACHE_POLICY,
    decision: TriggerDecision | None = None,
    replay: ReplayHooks | None = None,
) -> ActivationResult:
    """Run one activation of ``agent`` for ``entity_key`` at ``seq`` on the clock ``now_ms``.

    ``state`` is the key's loaded (migrated) state and is not modified.
    ``decision`` is ``classify_trigger(state, trigger)`` when the caller has it (the
    DoFn classifies every trigger before running it); it is computed here otherwise.
    Its action must be START or RESUME, and it alone says which of the two runs.
    ``replay`` is what replay changes in the run (``ReplayHooks``); the pipeline
    passes none.
    Whatever agent code raises fails this activation, a ``BaseException`` that is not an
    ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``) included:
    in the pipeline it must not take its worker down, and replay must judge the same
    failure the pipeline traced. Only ``replay.uncontained`` propagates.
    """
    if decision is None:
        decision = classify_trigger(state, trigger)
    kind = decision.kind
    if kind is None:
        raise ValueError(
            f"run_activation was given a {trigger_name(trigger)} trigger the key's state "
            f"decides to {decision.action.value}"
            + (f" ({decision.reason})" if decision.reason else "")
            + "; only START and RESUME decisions run an activation"
        )
    hooks = replay if replay is not None else _PIPELINE
    capture = hooks.capture
    # Private copies: agent code mutates these; a failure simply drops them.
    work = _copy_state(state)
    ctx = AgentContext(
        entity_key=entity_key,
        seq=seq,
        now_ms=now_ms,
        memory=work.memory,
        cache=work.cache,
        provider=provider,
        registry=registry,
        hitl=hitl,
        cache_policy=cache_policy,
        cache_visible_through_seq=hooks.visible_through_seq,
        tool_cache=work.tool_cache,
        tool_cache_policy=tool_cache_policy,
        serve_recorded_tools=hooks.serve_recorded_tools,
        capture=capture,
        compact_trace=hooks.compact_trace,
        fork=hooks.fork,
    )
    # Agent code runs "inside an activation": side_effect=True tools refuse, and replay's
    # guard finds this context (and ctx.call's tool) through these ContextVars.
    running = _running.ACTIVATION.set(ctx)
    try:
        return _run(agent, ctx, state, work, trigger, kind, hitl, capture, hooks.encode_cache_cells)
    except BaseException as exc:
        if isinstance(exc, hooks.uncontained):
            raise
        index = ctx.record(
            TraceEvent.ACTIVATION_FAILED, _error_type(exc), {te.ATTR_ERROR_TYPE: _error_type(exc)}
        )
        if capture is not None:
            capture.add(index, CaptureKind.ERROR, exc)
        return ActivationFailure(
            seq=seq,
            kind=kind,
            trace=_frozen_trace(ctx.events),
            error_type=_error_type(exc),
            error=exc,
            provider_failures=tuple(ctx.provider_failures),
            tool_misses=tuple(ctx.tool_misses),
            served_tool_events=tuple(ctx.served_tool_events),
        )
    finally:
        _running.ACTIVATION.reset(running)


def _frozen_trace(events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """The result's trace: the context's ``EventLog`` as it is, else a tuple of its events."""
    return events if isinstance(events, EventLog) else tuple(events)


def _copy_state(state: KeyState) -> KeyState:
    memory = canonical_json.loads(canonical_json.dumps(state.memory)) if state.memory else {}
    cont = None
    if state.continuation is not None:
        cont = Continuation()
        cont.CopyFrom(state.continuation)
    return KeyState(
        memory=memory,
        memory_provenance=state.memory_provenance,  # frozen: each commit makes a new one
        cache=state.cache.copy(),
        continuation=cont,
        pending=[_copy_intent(i) for i in state.pending],
        resume_history=list(state.resume_history),
        tool_cache=state.tool_cache.copy(),
        migrations_applied=list(state.migrations_applied),
    )


def _copy_intent(intent: ToolIntent) -> ToolIntent:
    copy = ToolIntent()
    copy.CopyFrom(intent)
    return copy


def _start_attributes(
    trigger: AgentEnvelope | Timeout, kind: ActivationKind, state: KeyState
) -> dict[str, te.AttrValue]:
    attrs: dict[str, te.AttrValue] = {
        te.ATTR_ACTIVATION_KIND: kind.value,
        te.ATTR_TRIGGER: trigger_name(trigger).value,
    }
    if isinstance(trigger, Timeout):
        attrs[te.ATTR_DEADLINE_MS] = trigger.deadline_ms
        attrs[te.ATTR_INBOUND_STATUS] = InboundStatus.TIMEOUT.value
    else:
        attrs[te.ATTR_ENVELOPE_ID] = trigger.envelope_id
        attrs[te.ATTR_ENVELOPE_SHA256] = envelope_digest(trigger)
        body = trigger_name(trigger)
        if body is Trigger.EVENT:
            attrs[te.ATTR_EVENT_TYPE] = trigger.event.type
        elif body is Trigger.TOOL_RESULT:
            attrs[te.ATTR_INBOUND_INTENT_ID] = trigger.tool_result.intent_id
            attrs[te.ATTR_INBOUND_STATUS] = ToolResult.Status.Name(trigger.tool_result.status)
        elif body is Trigger.APPROVAL:
            attrs[te.ATTR_INBOUND_INTENT_ID] = trigger.approval.intent_id
            attrs[te.ATTR_INBOUND_STATUS] = (
                InboundStatus.APPROVED if trigger.approval.approved else InboundStatus.REJECTED
            ).value
    if kind is ActivationKind.RESUME and state.continuation is not None:
        attrs[te.ATTR_STEP_INDEX] = state.continuation.step_index + 1
    return attrs


def _run(
    agent: Agent,
    ctx: AgentContext,
    state: KeyState,
    work: KeyState,
    trigger: AgentEnvelope | Timeout,
    kind: ActivationKind,
    hitl: HitlPolicy,
    capture: ValueCapture | None,
    encode_cache_cells: bool,
) -> ActivationCommit:
    ctx.record(TraceEvent.ACTIVATION_START, kind.value, _start_attributes(trigger, kind, state))
    pre_cont = state.continuation
    released: list[ToolIntent] = []
    outcome: Done | Suspend | None = None
    outcome_name: Outcome
    ran_agent_code = True  # False only for an approval handled without agent code

    if kind is ActivationKind.RESUME:
        record = ResumeRecord(seq=ctx.seq, pending=[_copy_intent(i) for i in state.pending])
        if pre_cont is not None:
            record.continuation.CopyFrom(pre_cont)
        work.resume_history = [*work.resume_history, record][-MAX_RESUME_HISTORY:]

    if isinstance(trigger, AgentEnvelope) and trigger_name(trigger) is Trigger.EVENT:
        outcome = agent.start(ctx, trigger.event)
    elif isinstance(trigger, AgentEnvelope) and trigger_name(trigger) is Trigger.APPROVAL:
        approval = trigger.approval
        intent = next(i for i in work.pending if i.intent_id == approval.intent_id)
        work.pending = [i for i in work.pending if i.intent_id != approval.intent_id]
        awaited = pre_cont is not None and approval.intent_id in pre_cont.awaiting_intent_ids
        ran_agent_code = not approval.approved and awaited
        if approval.approved:
            released.append(intent)
        elif awaited:
            outcome = _resume(agent, ctx, work, pre_cont, approval)
    else:
        assert pre_cont is not None, "classify_trigger admits resumes of suspended keys only"
        inbound: ToolResult | Timeout
        if isinstance(trigger, Timeout):
            inbound = trigger
            awaiting = set(pre_cont.awaiting_intent_ids)
            # The human did not answer in time: awaited intents still needing approval lapse.
            work.pending = [i for i in work.pending if i.intent_id not in awaiting]
        else:
            inbound = trigger.tool_result
        outcome = _resume(agent, ctx, work, pre_cont, inbound)

    approval_requests: list[ToolIntent] = []
    continuation: Continuation | None = work.continuation
    outputs: tuple[bytes, ...] = ()
    if outcome is None and not ran_agent_code:
        outcome_name = Outcome.RELEASED if released else Outcome.REJECTED
    elif isinstance(outcome, Done):
        outcome_name = Outcome.DONE
        outputs = outcome.all_outputs()
        for out in outputs:
            if not isinstance(out, bytes):
                raise AgentResultError(f"Done outputs must be bytes, got {type(out).__name__}")
        continuation = None
    elif isinstance(outcome, Suspend):
        outcome_name = Outcome.SUSPENDED
        step_index = (
            pre_cont.step_index + 1 if kind is ActivationKind.RESUME and pre_cont is not None else 0
        )
        continuation = _suspend(ctx, work, pre_cont, outcome, hitl, step_index)
    else:  # None included: an agent that forgot to return must not commit as if done
        raise AgentResultError(
            f"{type(agent).__name__}.{kind.value} returned "
            f"{type(outcome).__name__}; it must return Done(...) or Suspend(...)"
            + (" (a missing return statement?)" if outcome is None else "")
        )

    for intent in ctx.staged_intents:
        if intent.requires_approval:
            approval_requests.append(intent)
        else:
            released.append(intent)
    work.pending = [*work.pending, *approval_requests]
    work.continuation = continuation

    if ctx.fatal_error is not None:
        # A recorded result the tool cache cannot keep fails the activation even when agent
        # code caught the error: committing without it would make the activation unreplayable.
        raise ctx.fatal_error

    # What the activation wrote, and so who last wrote each key once it commits.
    writes = ctx.memory_write_set(state.memory)
    work.memory_provenance = state.memory_provenance.after(writes, ctx.seq)
    # Serialize everything before emitting the closing events, so a value that cannot
    # be stored fails the activation instead of committing half of it.
    memory = encode_memory(work.memory, work.memory_provenance)
    cells = dump_key_state(work, caches=encode_cache_cells, memory_cell=memory.cell)

    for intent in released:
        ctx.record(TraceEvent.INTENT_RELEASED, intent.tool, {te.ATTR_INTENT_ID: intent.intent_id})
    if continuation is not None and outcome_name is Outcome.SUSPENDED:
        index = ctx.record(
            TraceEvent.SUSPENDED,
            "suspend",
            {
                te.ATTR_STEP_INDEX: continuation.step_index,
                te.ATTR_AWAITING: ",".join(continuation.awaiting_intent_ids),
                te.ATTR_DEADLINE_MS: continuation.deadline_ms,
                te.ATTR_STATE_SHA256: hashlib.sha256(continuation.adapter_snapshot).hexdigest(),
            },
        )
        if capture is not None:
            capture.add(index, CaptureKind.SUSPEND_STATE, continuation.adapter_snapshot)
    index = ctx.record(
        TraceEvent.ACTIVATION_END,
        outcome_name.value,
        {
            te.ATTR_OUTCOME: outcome_name.value,
            te.ATTR_OUTPUTS_COUNT: len(outputs),
            te.ATTR_INTENTS_COUNT: len(released),
            # Digests, never payloads: replay compares the re-run's outputs and memory with them.
            te.ATTR_OUTPUTS_SHA256: te.outputs_digest_text(outputs),
            te.ATTR_MEMORY_SHA256: te.sha256_hex(memory.memory_json),
            te.ATTR_MEMORY_WRITES_SHA256: writes.digest(),
        },
    )
    if capture is not None:
        capture.add(index, CaptureKind.OUTPUTS, outputs)
        capture.add(index, CaptureKind.MEMORY, memory.memory_json)
        capture.add(index, CaptureKind.MEMORY_WRITES, writes)
    return ActivationCommit(
        seq=ctx.seq,
        kind=kind,
        state=work,
        cells=cells,
        trace=_frozen_trace(ctx.events),
        outputs=outputs,
        released_intents=tuple(released),
        approval_requests=tuple(approval_requests),
        timer_deadline_ms=continuation.deadline_ms if continuation is not None else None,
        provider_failures=tuple(ctx.provider_failures),
        tool_misses=tuple(ctx.tool_misses),
        served_tool_events=tuple(ctx.served_tool_events),
        memory_writes=writes,
    )


def _resume(
    agent: Agent,
    ctx: AgentContext,
    work: KeyState,
    cont: Continuation | None,
    inbound: ToolResult | Approval | Timeout,
) -> Done | Suspend:
    assert cont is not None
    try:
        adapter_state: Any = (
            canonical_json.loads(cont.adapter_snapshot) if cont.adapter_snapshot else None
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptBlobError("continuation", f"adapter snapshot is not JSON: {exc}") from exc
    # The continuation is consumed; Suspend may set a new one.
    work.continuation = None
    return agent.resume(ctx, adapter_state, cont.step_index + 1, inbound)


def _suspend(
    ctx: AgentContext,
    work: KeyState,
    pre_cont: Continuation | None,
    outcome: Suspend,
    hitl: HitlPolicy,
    step_index: int,
) -> Continuation:
    why = canonical_json.check_json_value(outcome.state, "Suspend.state")
    if why is not None:
        raise AgentResultError(f"{why}; Suspend(state=...) must be a JSON value")
    # An agent may await what it staged now, what still awaits approval, and what the
    # suspension it resumed from was still awaiting.
    known = {i.intent_id for i in ctx.staged_intents} | {i.intent_id for i in work.pending}
    if pre_cont is not None:
        known |= set(pre_cont.awaiting_intent_ids)
    awaiting = [str(i) for i in outcome.awaiting]
    unknown = [i for i in awaiting if i not in known]
    if unknown:
        raise AgentResultError(
            f"Suspend(awaiting=...) names intents this key never staged: {', '.join(unknown)}"
        )
    return Continuation(
        suspended_seq=ctx.seq,
        step_index=step_index,
        adapter_snapshot=canonical_json.dumps(outcome.state),
        awaiting_intent_ids=awaiting,
        deadline_ms=ctx.now_ms + hitl.hitl_timeout_ms,
        schema_version=CURRENT_VERSIONS["continuation"],
    )


__all__ = [
    "ActivationCommit",
    "ActivationFailure",
    "ActivationResult",
    "ReplayHooks",
    "TriggerAction",
    "TriggerDecision",
    "classify_trigger",
    "envelope_digest",
    "hitl_timeout",
    "run_activation",
    "trigger_name",
]
