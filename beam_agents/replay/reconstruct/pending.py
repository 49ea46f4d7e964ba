"""The pending intents a key held just before an older activation, rebuilt from the inputs.

The snapshot is taken *after* the target activation, so its ``pending`` has
lost every intent resolved since (approved, rejected, or lapsed at a HITL
timeout), and holds intents staged since. The set the target saw is rebuilt
from what the inputs do hold (issue #17):

- **Exact copies.** ``snapshot.pending`` (still pending at export) and the
  ``pending`` of each ``snapshot.resumed_from`` record (the key's pending
  intents just before that resume, byte for byte). Nothing else holds an
  intent's bytes: a trace has only its id and digests (``args_sha256``...), and
  the ``.approvals`` output is not an input of replay.
- **Membership.** Pending intents leave the list only at a successful resume
  (an approval, a rejection, a HITL timeout) and never come back; the records
  kept are those of the key's most recent resumes, consecutive. So an intent
  staged before the target was pending at the target iff it is still pending
  at export, or some record *after* the target still lists it; one whose last
  record is before the target was resolved there.
- **Completeness.** An intent resolved by a resume whose record has rolled out
  of ``resumed_from`` (it keeps 8) is in no copy. When the history is full and
  its oldest record is after the target, the activations in between are read
  from the traces: a resume there that may have resolved an intent pending at
  the target, or an activation there that is not traced, makes the replay
  irreproducible (exit 3), naming the intent (or the seqs) and what to pass —
  never a guess that could read as "diverged".
- **Verification.** Where the traces hold the activation that staged a rebuilt
  intent, its ``INTENT_STAGED`` must agree with the copy (tool, ``args_sha256``,
  approval, channel, ``expires_at_ms``, and ``created_ms`` = that activation's
  clock); a copy that disagrees is not of this history (exit 2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from beam_agents._protos import (
    Continuation,
    ResumeRecord,
    ToolIntent,
)
from beam_agents.activation import MAX_RESUME_HISTORY
from beam_agents.context import derive_intent_id
from beam_agents.replay.inputs.traces import TracedKey, TracedSeq, seq_ranges
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.trace_view import (
    ActivationStart,
    InboundStatus,
    IntentStaged,
    Outcome,
    Suspended,
    Trigger,
    decode,
)

__all__ = ["pending_before", "verify_intents"]

_STILL_PENDING = 1 << 62
"""The "last seen" seq of an intent still pending at export (after every record)."""

_MAX_ORDINAL = 4096
"""Intent ordinals searched when ordering rebuilt intents (an activation stages fewer)."""

_EXPORT_SOONER = (
    "a snapshot keeps the continuations and pending intents of the key's "
    f"{MAX_RESUME_HISTORY} most recent resumes: export the key sooner after the activation "
    "you want to replay (a snapshot exported before the resume that resolved the intent "
    "still holds it)"
)


@dataclass(frozen=True)
class _Copy:
    intent: ToolIntent
    source: str
    last_seen: int
    """The seq of the latest record listing it, or ``_STILL_PENDING``."""


def _exact_copies(
    pending: Sequence[ToolIntent], records: Sequence[ResumeRecord]
) -> dict[str, _Copy]:
    """Every intent the snapshot holds a copy of, by id, with the latest place it is listed."""
    copies: dict[str, _Copy] = {}
    lists: list[tuple[str, int, Sequence[ToolIntent]]] = [
        (f"snapshot.resumed_from[seq={r.seq}]", r.seq, r.pending) for r in records
    ]
    lists.append(("snapshot.pending", _STILL_PENDING, pending))
    for source, seen, intents in lists:
        for intent in intents:
            known = copies.get(intent.intent_id)
            if known is not None and known.intent != intent:
                raise InputError(
                    f"the snapshot holds two different copies of pending intent "
                    f"{intent.intent_id!r} ({known.source} and {source})",
                    "the snapshot is not one the pipeline exported; export the key again",
                )
            copies[intent.intent_id] = _Copy(intent, known.source if known else source, seen)
    return copies


def pending_before(
    seq: int,
    pending: Sequence[ToolIntent],
    records: Sequence[ResumeRecord],
    traced: TracedKey,
    *,
    continuation: Continuation | None = None,
) -> tuple[list[ToolIntent], str]:
    """The key's pending intents just before activation ``seq`` and where they came from.

    For a start, or a resume that failed (a successful resume's own record holds
    its pending list exactly).

    Args:
        seq: The target activation.
        pending: The snapshot's pending intents (migrated).
        records: The snapshot's ``resumed_from`` records (migrated).
        traced: The scan of the key's traces.
        continuation: For a failed resume, the continuation it ran on (it tells which
            intents a later HITL timeout lapsed, if that must be known).

    Returns:
        The intents in the key's order (staging seq, then order of staging), and a
        short description of their sources for the report.

    Raises:
        CannotReproduce: An intent pending at ``seq`` may have been resolved by a
            resume whose record rolled out of ``resumed_from`` (naming it or the
            activations to trace).
        InputError: The snapshot's copies disagree with each other or with the traces.
    """
    ordered = sorted(records, key=lambda r: r.seq)
    copies = _exact_copies(pending, ordered)
    _check_rolled_over(seq, ordered, copies, traced, continuation)
    chosen = [c for c in copies.values() if c.intent.seq < seq and c.last_seen > seq]
    # The key appends staged intents in order and removes without reordering.
    chosen.sort(key=lambda c: (c.intent.seq, _ordinal(c.intent)))
    intents = [c.intent for c in chosen]
    verify_intents(intents, traced, [c.source for c in chosen])
    sources = sorted({c.source for c in chosen})
    return intents, ", ".join(sources)


def _ordinal(intent: ToolIntent) -> int:
    """The intent's place among those its activation staged (its id is derived from it)."""
    for ordinal in range(_MAX_ORDINAL):
        if derive_intent_id(intent.entity_key, intent.seq, ordinal) == intent.intent_id:
            return ordinal
    return _MAX_ORDINAL  # an id not derived by this version: after the others, stably


def _check_rolled_over(
    seq: int,
    records: Sequence[ResumeRecord],
    copies: dict[str, _Copy],
    traced: TracedKey,
    continuation: Continuation | None,
) -> None:
    """Refuse when a resume whose record is gone may have resolved an intent pending at ``seq``."""
    if len(records) < MAX_RESUME_HISTORY or records[0].seq <= seq + 1:
        return  # no record has rolled off, or none after the target has
    gap = range(seq + 1, records[0].seq)
    untraced = [m for m in gap if m not in traced.starts or _history(traced, m).committed is None]
    if untraced:
        raise CannotReproduce(
            f"the pending intents at seq {seq} cannot be rebuilt: snapshot.resumed_from has "
            f"rolled over (its oldest record is the resume at seq {records[0].seq}), and the "
            f"activations at seqs {seq_ranges(untraced)} that may have resolved some of them "
            "are not in the traces",
            f"pass the traces of seqs {seq_ranges(untraced)}, or {_EXPORT_SOONER}",
        )
    lost: list[tuple[str, int]] = []
    for m in gap:
        start = ActivationStart.of(traced.starts[m])
        if not _history(traced, m).committed or not start.is_resume:
            continue
        if start.trigger == Trigger.APPROVAL:
            resolved = [start.inbound_intent_id or ""]
        elif start.trigger == Trigger.TIMEOUT:
            resolved = _awaited_at(m, seq, traced, continuation)
        else:
            continue  # a tool_result resolves no pending intent (those await approval)
        lost.extend(
            (intent_id, m)
            for intent_id in resolved
            if intent_id not in copies and not _not_pending_at(intent_id, seq, traced)
        )
    if lost:
        named = ", ".join(f"{intent_id!r} (resolved at seq {m})" for intent_id, m in lost)
        raise CannotReproduce(
            f"the pending intents at seq {seq} cannot be rebuilt: {named} may have been pending "
            f"then, but the record of the resume that resolved it has rolled out of "
            f"snapshot.resumed_from (oldest kept: seq {records[0].seq}), and no input holds "
            "its bytes",
            _EXPORT_SOONER,
        )


def _history(traced: TracedKey, seq: int) -> TracedSeq:
    return traced.history.get(seq) or TracedSeq()


def _awaited_at(
    timeout_seq: int, seq: int, traced: TracedKey, continuation: Continuation | None
) -> list[str]:
    """The intents the HITL timeout at ``timeout_seq`` awaited (it lapsed the pending ones)."""
    # The continuation it consumed is the latest one set by a committed activation before
    # it; activations that set none (failures, approvals) leave the previous one in place.
    for m in range(timeout_seq - 1, seq - 1, -1):
        history = _history(traced, m)
        if not history.committed or history.terminal is None:
            continue
        if history.suspended is not None:
            return [i for i in Suspended.of(history.suspended).awaiting or () if i]
        if getattr(decode(history.terminal), "outcome", None) == Outcome.DONE:
            break  # it ended a suspension: the traces contradict themselves
    else:
        if continuation is not None:
            return list(continuation.awaiting_intent_ids)
    # A start's key was not suspended: the timeout consumed a suspension traced nowhere
    # here. Every intent is suspect; say which activation to look at.
    raise CannotReproduce(
        f"the pending intents at seq {seq} cannot be rebuilt: the HITL timeout at seq "
        f"{timeout_seq} lapsed the intents of a suspension the traces do not show, and its "
        "resume record has rolled out of snapshot.resumed_from",
        _EXPORT_SOONER,
    )


def _not_pending_at(intent_id: str, seq: int, traced: TracedKey) -> bool:
    """True if the traces prove ``intent_id`` was not pending before activation ``seq``."""
    for m, start_event in traced.starts.items():
        start = ActivationStart.of(start_event)
        if (
            m < seq
            and _history(traced, m).committed
            and start.trigger == Trigger.APPROVAL
            and start.inbound_intent_id == intent_id
            and start.inbound_status in (InboundStatus.APPROVED, InboundStatus.REJECTED)
        ):
            return True  # a human decided on it before the target
    for m, history in traced.history.items():
        staged = history.staged_event(intent_id)
        if staged is None:
            continue
        if m >= seq or history.committed is False:
            return True  # staged by the target or later, or by an activation that failed
        requires = IntentStaged.of(staged).requires_approval
        return requires is not None and not requires  # released at once
    return False


def verify_intents(
    intents: Sequence[ToolIntent], traced: TracedKey, sources: Sequence[str]
) -> None:
    """Check rebuilt intents against the ``INTENT_STAGED`` of the activations that staged them.

    Raises:
        InputError: A copy disagrees with the traced staging (naming the field).
    """
    for intent, source in zip(intents, sources, strict=True):
        history = traced.history.get(intent.seq)
        if history is None or history.committed is None:
            continue  # not traced (or not whole): nothing to check against
        staged = history.staged_event(intent.intent_id)
        problem = ""
        if staged is None or not history.committed:
            problem = "the traced activation that would have staged it " + (
                "failed" if staged is not None else "staged no intent of that id"
            )
        else:
            start = traced.starts.get(intent.seq)
            view = IntentStaged.of(staged)
            expected: list[tuple[str, object, object]] = [
                ("tool", intent.tool, view.tool_name),
                ("args_sha256", hashlib.sha256(intent.args).hexdigest(), view.args_sha256),
                ("requires_approval", intent.requires_approval, view.requires_approval),
                ("approval_channel", intent.approval_channel, view.approval_channel),
                ("expires_at_ms", intent.expires_at_ms, view.expires_at_ms),
                ("created_ms", intent.created_ms, start.start_ms if start is not None else None),
            ]
            for name, copy_value, traced_value in expected:
                if traced_value is not None and copy_value != traced_value:
                    problem = f"its {name} is {copy_value!r}, the trace says {traced_value!r}"
                    break
        if problem:
            raise InputError(
                f"pending intent {intent.intent_id!r} in {source} does not match the trace of "
                f"seq {intent.seq}: {problem}",
                "the snapshot and the traces do not describe the same history; pass the "
                "snapshot and the traces of one pipeline",
            )
