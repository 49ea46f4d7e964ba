"""Reconstructing the activation to re-run: its target, clock, trigger and pre-state.

Seed §3: state blobs (and, for a resume, the continuation) come from the
snapshot; the target ``(entity_key, seq)`` and the clock come from the trace.

- **Target.** ``--seq``, else the key's highest traced seq. ``now_ms`` is the
  target's traced ``ACTIVATION_START.start_ms``; its kind and trigger are that
  event's ``beam_agents.activation.kind`` / ``beam_agents.trigger``.
- **Belonging together** (else exit 2, naming what differs): the event's key is
  the snapshot's; its body is the traced trigger; its ``envelope_id`` and
  sha256 are the traced ones; the snapshot is not older than the target; a
  timeout target takes no ``--event`` and every other target needs one.
- **Pre-state of a start**: the snapshot's memory and cache, no continuation
  (a start never runs on a suspended key), and the pending intents as they
  stood before the target, rebuilt by ``pending.pending_before`` from the
  snapshot's pending list, its resume records and the traces (an intent
  resolved after the target is in a later resume's record, not in
  ``snapshot.pending``).
- **Pre-state of a resume**: the continuation it consumed, from
  ``snapshot.resumed_from`` (the record of that very resume, with the pending
  intents it saw). A resume that failed committed nothing, so its continuation
  is still the key's current one: ``snapshot.continuation`` or, if a later
  resume consumed it, that resume's record (recognisable by a
  ``suspended_seq`` before the target), with its pending intents rebuilt as
  for a start. Neither → exit 3: it is gone.
- **What-if**: an event (``tool_result``/``approval``) that resumes the
  snapshot's *current* state and has no traced activation, or ``--seq`` naming
  the untraced ``snapshot.seq + 1`` of a suspended key (without ``--event``: its
  HITL timeout). It runs at ``snapshot.seq + 1`` on the event's time (the
  deadline for a timeout), with nothing traced to diff against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from beam_agents._protos import (
    AgentEnvelope,
    Continuation,
    ResumeRecord,
    StateSnapshot,
    ToolIntent,
    TraceEvent,
)
from beam_agents.activation import (
    TriggerAction,
    classify_trigger,
    envelope_digest,
    hitl_timeout,
    trigger_name,
)
from beam_agents.agent import Timeout
from beam_agents.key_state import KeyState
from beam_agents.replay.inputs.traces import TracedKey, check_complete, seq_ranges
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.reconstruct.pending import pending_before, verify_intents
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.replay.result import TargetFacts
from beam_agents.trace_view import ActivationKind, ActivationStart, Trigger

__all__ = ["Plan", "plan_replay", "resumed_continuation"]

_TRIGGERS = (Trigger.EVENT, Trigger.TOOL_RESULT, Trigger.APPROVAL, Trigger.TIMEOUT)
"""The triggers an activation can have (an export request runs none)."""


@dataclass(frozen=True)
class Plan:
    """One activation to re-run, fully determined."""

    seq: int
    now_ms: int
    kind: ActivationKind
    trigger_name: Trigger
    """``event``, ``tool_result``, ``approval`` or ``timeout``."""
    trigger: AgentEnvelope | Timeout
    state: KeyState
    """The reconstructed pre-state (shares the snapshot's objects; run_activation copies)."""
    traced: Sequence[TraceEvent] | None
    """The traced events to compare with (an ``EventLog``); None for a what-if."""
    continuation_source: str = ""
    envelope_id: str = ""

    @property
    def what_if(self) -> bool:
        """True when nothing was traced for this activation (a pending resume)."""
        return self.traced is None


def _traced_seq_of(traced: TracedKey, envelope: AgentEnvelope) -> int | None:
    """The traced activation this envelope triggered (same id and digest), if any."""
    digest = envelope_digest(envelope)
    for seq in sorted(traced.starts):
        start = ActivationStart.of(traced.starts[seq])
        if start.envelope_id == envelope.envelope_id and start.envelope_sha256 == digest:
            return seq
    return None


def plan_replay(
    snapshot: StateSnapshot,
    state: KeyState,
    traced: TracedKey,
    event: AgentEnvelope | None,
    seq: int | None,
    naming: Naming = REPLAYER,
) -> Plan:
    """Decide what to re-run from the loaded inputs.

    Args:
        snapshot: The snapshot as parsed.
        state: Its state, migrated.
        traced: The scan of the traces for the snapshot's key (``seq`` kept if given).
        event: The triggering envelope given, or None.
        seq: The seq asked for, or None.
        naming: How the caller named the inputs (for the messages).

    Raises:
        InputError: The inputs do not belong together (the message names what differs).
        CannotReproduce: The resume's continuation is no longer in the snapshot.
    """
    key = snapshot.entity_key
    event_name = naming.name(Input.EVENT)
    if event is not None:
        if event.entity_key != key:
            raise InputError(
                f"{event_name} is for key {event.entity_key.hex()}, but the snapshot is of key "
                f"{key.hex()}",
                "the snapshot, the traces and the event must all be of the same key",
            )
        if trigger_name(event) is Trigger.EXPORT_REQUEST:
            raise InputError(
                f"{event_name} is an export_request, which runs no activation",
                "pass the envelope that triggered the activation (an event, a tool_result "
                "or an approval)",
            )
    next_seq = snapshot.seq + 1
    if seq is not None:
        if seq in traced.seqs:
            return _plan_traced(snapshot, state, traced, event, seq, naming)
        if seq == next_seq and next_seq not in traced.seqs and _what_if_possible(state, event):
            return _plan_what_if(snapshot, state, event)
        raise InputError(
            f"{naming.given(Input.SEQ, seq)}: the traces hold no activation of key {key.hex()} at seq {seq} "
            f"(traced seqs: {seq_ranges(traced.seqs)})",
            "pick a traced seq, or pass the traces that hold it",
        )
    highest = traced.highest_seq
    if event is not None:
        matched = _traced_seq_of(traced, event)
        if matched is not None and matched != highest:
            raise InputError(
                f"{naming.given(Input.EVENT, repr(event.envelope_id))} triggered the traced "
                f"activation at seq {matched}, not the highest traced one (seq {highest})",
                f"pass {naming.given(Input.SEQ, matched)} to replay it",
            )
        if (
            matched is None
            and next_seq not in traced.seqs
            and (highest is None or highest <= snapshot.seq)
            and _what_if_possible(state, event)
        ):
            return _plan_what_if(snapshot, state, event)
    if highest is None:
        raise InputError(
            f"the traces hold no event of key {key.hex()} (the snapshot's key)",
            "pass the trace streams of the pipeline the snapshot came from",
        )
    return _plan_traced(snapshot, state, traced, event, highest, naming)


def _what_if_possible(state: KeyState, event: AgentEnvelope | None) -> bool:
    if event is None:
        return state.continuation is not None
    if trigger_name(event) not in (Trigger.TOOL_RESULT, Trigger.APPROVAL):
        return False
    return classify_trigger(state, event).action is TriggerAction.RESUME


def _plan_what_if(snapshot: StateSnapshot, state: KeyState, event: AgentEnvelope | None) -> Plan:
    cont = state.continuation
    trigger: AgentEnvelope | Timeout
    if event is None:
        assert cont is not None  # _what_if_possible
        trigger, now_ms = hitl_timeout(cont, cont.deadline_ms), cont.deadline_ms
    else:
        trigger, now_ms = event, event.event_time_ms
    return Plan(
        seq=snapshot.seq + 1,
        now_ms=now_ms,
        kind=ActivationKind.RESUME,
        trigger_name=trigger_name(trigger),
        trigger=trigger,
        state=state,
        traced=None,
        continuation_source="snapshot.continuation" if cont is not None else "",
        envelope_id=event.envelope_id if event is not None else "",
    )


def _plan_traced(
    snapshot: StateSnapshot,
    state: KeyState,
    traced: TracedKey,
    event: AgentEnvelope | None,
    seq: int,
    naming: Naming,
) -> Plan:
    key = snapshot.entity_key
    if traced.kept_seq != seq:  # pragma: no cover - scan_traces keeps the planned seq
        raise AssertionError(f"the scan kept seq {traced.kept_seq}, not {seq}")
    events = traced.activation()
    check_complete(events, key, seq)
    start = events[0]
    start_view = ActivationStart.of(start)
    traced_kind, traced_trigger = start_view.activation_kind or "", start_view.trigger or ""
    trigger = Trigger(traced_trigger) if traced_trigger in set(_TRIGGERS) else None
    kind = ActivationKind.START if trigger is Trigger.EVENT else ActivationKind.RESUME
    if trigger is None or traced_kind != kind:
        raise InputError(
            f"the traced ACTIVATION_START of key {key.hex()} seq {seq} says kind {traced_kind!r}, "
            f"trigger {traced_trigger!r}, which this version cannot replay",
            "the trace may come from a newer beam-agents; replay it with that version",
        )
    if snapshot.seq < seq:
        raise InputError(
            f"the snapshot was exported at seq {snapshot.seq}, before the target activation "
            f"(seq {seq}): it cannot hold that activation's state or its cached responses",
            f"export the key again after seq {seq}, or pass {naming.given(Input.SEQ, snapshot.seq)} "
            "or lower",
        )
    envelope_id = start_view.envelope_id or ""
    if trigger is Trigger.TIMEOUT:
        if event is not None:
            raise InputError(
                f"the activation at seq {seq} was a HITL timeout, which no envelope triggers, "
                f"but {naming.name(Input.EVENT)} was given",
                f"leave {naming.name(Input.EVENT)} out to replay a timeout",
            )
    else:
        _check_event(
            event, key, seq, trigger, envelope_id, start_view.envelope_sha256 or "", naming
        )
    try:
        failed = events[-1].kind == TraceEvent.ACTIVATION_FAILED
        pre, source = _pre_state(snapshot, state, traced, seq, kind, failed=failed)
    except CannotReproduce as gone:
        gone.target = TargetFacts(
            seq=seq,
            now_ms=start.start_ms,
            kind=kind,
            trigger=trigger,
            envelope_id=envelope_id,
        )
        raise
    trigger_obj: AgentEnvelope | Timeout
    if event is not None:
        trigger_obj = event
    else:
        if pre.continuation is None:  # pragma: no cover - resumed_continuation raises first
            raise CannotReproduce(f"no continuation for the timeout at seq {seq}")
        trigger_obj = hitl_timeout(pre.continuation, start.start_ms)
    decision = classify_trigger(pre, trigger_obj)
    if decision.kind is not kind:
        raise InputError(
            f"the state reconstructed from the snapshot for seq {seq} does not accept this "
            f"{trigger}: {decision.reason or decision.action.value}",
            "the snapshot, the traces and the event do not describe the same history",
        )
    return Plan(
        seq=seq,
        now_ms=start.start_ms,
        kind=kind,
        trigger_name=trigger,
        trigger=trigger_obj,
        state=pre,
        traced=events,
        continuation_source=source,
        envelope_id=envelope_id,
    )


def _a(word: str) -> str:
    """``word`` with its article: "an event", "an approval", "a tool_result", "a timeout"."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _check_event(
    event: AgentEnvelope | None,
    key: bytes,
    seq: int,
    trigger: str,
    envelope_id: str,
    envelope_sha256: str,
    naming: Naming,
) -> None:
    event_name, seq_name = naming.name(Input.EVENT), naming.name(Input.SEQ)
    if event is None:
        raise InputError(
            f"{event_name} is missing: the activation of key {key.hex()} at seq {seq} was triggered "
            f"by {_a(trigger)} envelope (envelope_id {envelope_id!r})",
            f"pass that envelope's bytes from the events topic with {event_name}",
        )
    body = trigger_name(event)
    if body != trigger:
        raise InputError(
            f"{event_name} carries {_a(body)}, but the activation at seq {seq} was triggered by "
            f"{_a(trigger)}",
            f"pass the envelope that triggered this activation, or {seq_name} for another one",
        )
    if event.envelope_id != envelope_id:
        raise InputError(
            f"{event_name} has envelope_id {event.envelope_id!r}, but the activation at seq {seq} "
            f"was triggered by envelope_id {envelope_id!r}",
            f"pass the envelope that triggered this activation, or {seq_name} for another one",
        )
    digest = envelope_digest(event)
    if digest != envelope_sha256:
        raise InputError(
            f"{event_name} has the traced envelope_id {envelope_id!r} but different bytes: its "
            f"sha256 is {digest}, the traced one {envelope_sha256}",
            "pass the envelope exactly as it was on the topic (a re-encoded or edited copy "
            "is another input)",
        )


def _pre_state(
    snapshot: StateSnapshot,
    state: KeyState,
    traced: TracedKey,
    seq: int,
    kind: ActivationKind,
    *,
    failed: bool,
) -> tuple[KeyState, str]:
    """The key's state just before activation ``seq``, and where its continuation came from."""
    continuation: Continuation | None = None
    source = ""
    if kind is ActivationKind.START:
        pending, _ = pending_before(seq, state.pending, state.resume_history, traced)
    else:
        continuation, own, source = resumed_continuation(snapshot, state, seq, failed=failed)
        if own is not None:
            pending = list(own)
            verify_intents(pending, traced, [source] * len(pending))
        else:
            # A resume that failed has no record of its own: its pending intents are
            # rebuilt like a start's.
            pending, _ = pending_before(
                seq, state.pending, state.resume_history, traced, continuation=continuation
            )
    pre = KeyState(
        memory=state.memory,
        memory_provenance=state.memory_provenance,
        cache=state.cache,
        continuation=continuation,
        pending=pending,
        resume_history=[r for r in state.resume_history if r.seq < seq],
        tool_cache=state.tool_cache,
        migrations_applied=state.migrations_applied,
    )
    return pre, source


def resumed_continuation(
    snapshot: StateSnapshot, state: KeyState, seq: int, *, failed: bool
) -> tuple[Continuation | None, Sequence[ToolIntent] | None, str]:
    """The continuation resume ``seq`` consumed, its own record's pending list, and where from.

    The pending list is None for a resume that failed (it has no record of its own).
    """
    records = sorted(state.resume_history, key=lambda r: r.seq)
    for record in records:
        if record.seq == seq:
            cont = record.continuation if record.HasField("continuation") else None
            return cont, record.pending, f"snapshot.resumed_from[seq={seq}]"
    # A resume that committed left a record; if it is not here it has rolled off (a
    # later record may hold the same continuation, but not the pending list it saw).
    if failed:
        found = _failed_resume_continuation(state, records, seq)
        if found is not None:
            return found[0], None, found[1]
    kept = ", ".join(str(r.seq) for r in records) or "none"
    raise CannotReproduce(
        f"the continuation the resume at seq {seq} consumed is no longer in the snapshot "
        f"(snapshot.resumed_from holds the resumes at seqs: {kept}; the snapshot is at seq "
        f"{snapshot.seq})",
        "a snapshot keeps the continuations of the key's 8 most recent resumes: export the "
        "key sooner after the activation you want to replay",
    )


def _failed_resume_continuation(
    state: KeyState, records: Sequence[ResumeRecord], seq: int
) -> tuple[Continuation, str] | None:
    """The continuation a resume that failed ran on, and where from; None if it is gone."""
    # A failed resume committed nothing: its continuation lived on, so it is the one
    # a later resume consumed, or the key's current one (created before the target).
    # A continuation is set once (suspended_seq) and lives until consumed, so one
    # created before the target and consumed after it is the one the target saw, even
    # if records in between rolled off.
    later = [r for r in records if r.seq > seq]
    if later:
        first = later[0]
        if first.HasField("continuation") and first.continuation.suspended_seq < seq:
            return first.continuation, f"snapshot.resumed_from[seq={first.seq}]"
    elif state.continuation is not None and state.continuation.suspended_seq < seq:
        return state.continuation, "snapshot.continuation"
    return None
