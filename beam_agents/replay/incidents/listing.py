"""``beam-agents-replay ls``: the traced activations of a key (or of every key), one row each.

One pass over the trace streams builds a small summary per traced activation
(its ``ACTIVATION_START`` facts, its outcome, how many model calls and staged
intents, the cache keys of its model calls), never keeping whole events.

Given a snapshot, each activation of the snapshot's key also says whether it
can be replayed from that snapshot, by the engine's own rules rather than new
ones: the snapshot's ``ReplayCache.lookup`` at the traced clock with
``visible_through_seq`` (the same call the re-run makes, so "cached",
"expired", "digest-only" and "minted later" mean what they mean there), and
``reconstruct``'s choice of the continuation a resume consumed. A key suspended
in the snapshot with no traced next activation gets one more row: its pending
resume, which replays as a what-if.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.key_state import KeyState
from beam_agents.llm_cache import LookupStatus
from beam_agents.replay.inputs.traces import trace_events
from beam_agents.replay.naming import LIST_ACTIVATIONS, Input, Naming
from beam_agents.replay.options import Source, as_sources
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.reporting.labels import key_label
from beam_agents.tool_cache import tool_cache_key
from beam_agents.trace_view import ActivationFailed, ActivationStart, LlmCall, ToolCall

__all__ = ["ActivationRow", "Listing", "list_activations", "parse_key", "render_listing"]

# Replayability words (the ``replay`` column), in the order an operator reads them.
CACHED = "cached"
"""Every traced model response and recorded tool result is in the snapshot's caches (and a
resume's continuation is there)."""
EVICTED = "evicted"
"""A traced response (or recorded tool result) is no longer in the snapshot (evicted, purged)."""
EXPIRED = "expired"
DIGEST_ONLY = "digest-only"
MINTED_LATER = "minted-later"
"""The cache holds the request's entry, but a later activation inserted it."""
NOT_COMMITTED = "not-committed"
"""A failed activation's billed response: failures commit nothing, so it was never cached."""
CONTINUATION_GONE = "continuation-gone"
AFTER_SNAPSHOT = "after-snapshot"
INCOMPLETE = "incomplete-trace"
PENDING_RESUME = "pending-resume"

AMBIGUOUS = "ambiguous"
"""A recorded tool call whose recording activation got two different results for it."""

_MISS_WORDS = {
    LookupStatus.ABSENT: EVICTED,
    LookupStatus.EXPIRED: EXPIRED,
    LookupStatus.DIGEST_ONLY: DIGEST_ONLY,
    LookupStatus.MINTED_LATER: MINTED_LATER,
    LookupStatus.AMBIGUOUS: AMBIGUOUS,
}


@dataclass(frozen=True, kw_only=True)
class ActivationRow:
    """One traced activation (or the pending resume of a suspended snapshot)."""

    entity_key: bytes
    seq: int
    kind: str
    """``start``, ``resume``, or empty when its ``ACTIVATION_START`` is not in the traces."""
    trigger: str
    """``event``, ``tool_result``, ``approval``, ``timeout`` (empty if unknown)."""
    envelope_id: str
    envelope_sha256: str
    now_ms: int | None
    outcome: str
    """``done``, ``suspended``, ``failed``, ``incomplete`` (no terminal event) or ``pending``."""
    model_calls: int
    staged_intents: int
    error_type: str = ""
    replay: str | None = None
    """With a snapshot of this key: whether it replays from it (see the module's words)."""
    replay_detail: str = ""


@dataclass(frozen=True, kw_only=True)
class Listing:
    """What ``ls`` found."""

    rows: tuple[ActivationRow, ...]
    """Ordered by key, then seq."""
    snapshot_key: bytes | None = None
    snapshot_seq: int | None = None

    @property
    def keys(self) -> list[bytes]:
        """The keys listed, in order."""
        return sorted({row.entity_key for row in self.rows})


@dataclass
class _Summary:
    start: TraceEvent | None = None
    kinds: dict[int, int] = field(default_factory=dict)
    """index -> kind (``trace_events`` yields each position once)."""
    calls: dict[int, tuple[str, bool]] = field(default_factory=dict)
    """index -> (cache key, cache hit) of its LLM_CALLs."""
    recorded: dict[int, tuple[str, str]] = field(default_factory=dict)
    """index -> (tool, args sha256) of its recorded tool calls."""
    terminal: TraceEvent | None = None


def parse_key(text: str, known: Sequence[bytes], naming: Naming = LIST_ACTIVATIONS) -> bytes:
    """The key a key argument names: hex of the key's bytes, or its text.

    Raises:
        InputError: The key is in none of the traces, or both readings are.
    """
    readings: list[bytes] = [text.encode("utf-8")]
    if len(text) % 2 == 0 and text and all(c in string.hexdigits for c in text):
        readings.insert(0, bytes.fromhex(text))
    matching = [k for k in dict.fromkeys(readings) if k in set(known)]
    if len(matching) == 1:
        return matching[0]
    if len(matching) > 1:
        raise InputError(
            f"{naming.given(Input.KEY, repr(text))} names two traced keys: hex {matching[0].hex()} and the text "
            f"{text!r} (hex {matching[1].hex()})",
            "pass the hex of the one you mean",
        )
    raise InputError(
        f"{naming.given(Input.KEY, repr(text))}: the traces hold no activation of that key "
        f"({len(known)} key(s) traced)",
        f"{naming.list_keys} to see the traced keys",
    )


def _scan(
    sources: Sequence[Source], key: bytes | None, naming: Naming
) -> dict[bytes, dict[int, _Summary]]:
    found: dict[bytes, dict[int, _Summary]] = {}
    for _, event, _data in trace_events(sources, key, naming):
        summary = found.setdefault(event.entity_key, {}).setdefault(event.seq, _Summary())
        summary.kinds[event.index] = event.kind
        if event.kind == TraceEvent.ACTIVATION_START and event.index == 0:
            summary.start = event
        elif event.kind == TraceEvent.LLM_CALL:
            call = LlmCall.of(event)
            summary.calls[event.index] = (call.cache_key or "", bool(call.cache_hit))
        elif event.kind == TraceEvent.TOOL_CALL:
            tool = ToolCall.of(event)
            if tool.recorded:
                summary.recorded[event.index] = (tool.tool_name or "", tool.args_sha256 or "")
        elif event.kind in (TraceEvent.ACTIVATION_END, TraceEvent.ACTIVATION_FAILED):
            summary.terminal = event
    return found


def _outcome(summary: _Summary) -> tuple[str, str]:
    terminal = summary.terminal
    if terminal is None:
        return "incomplete", ""
    if terminal.kind == TraceEvent.ACTIVATION_FAILED:
        return "failed", ActivationFailed.of(terminal).error_type or terminal.name
    return terminal.name or "done", ""


def _complete(summary: _Summary) -> bool:
    indices = summary.kinds
    return (
        summary.start is not None
        and summary.terminal is not None
        and set(indices) == set(range(len(indices)))
        and summary.terminal.index == len(indices) - 1
    )


def _replayability(
    snapshot: StateSnapshot, state: KeyState, seq: int, summary: _Summary, outcome: str
) -> tuple[str, str]:
    from beam_agents.replay.reconstruct.plan import resumed_continuation

    if seq > snapshot.seq:
        return AFTER_SNAPSHOT, f"the snapshot was exported at seq {snapshot.seq}, before it"
    if not _complete(summary):
        return INCOMPLETE, "not every trace event of it is in the traces"
    assert summary.start is not None
    if ActivationStart.of(summary.start).is_resume:
        try:
            resumed_continuation(snapshot, state, seq, failed=outcome == "failed")
        except CannotReproduce as gone:
            return CONTINUATION_GONE, gone.reason
    now_ms = summary.start.start_ms
    calls = len(summary.calls)
    tools = len(summary.recorded)
    # In trace order, as the re-run meets them: the first one it cannot serve decides.
    for index in sorted({*summary.calls, *summary.recorded}):
        if index in summary.calls:
            cache_key, hit = summary.calls[index]
            status = (
                state.cache.copy().lookup(cache_key, now_ms=now_ms, visible_through_seq=seq).status
            )
            what = f"model call at event {index} (cache key {cache_key[:16]}…)"
        else:
            tool, args_sha256 = summary.recorded[index]
            status = (
                state.tool_cache.copy()
                .lookup(tool_cache_key(tool, args_sha256), now_ms=now_ms, visible_through_seq=seq)
                .status
            )
            hit = False  # the pipeline always runs a recorded tool, and records it
            what = f"recorded tool call {tool!r} at event {index}"
        if status is LookupStatus.HIT:
            continue
        word = _MISS_WORDS[status]
        if status is LookupStatus.ABSENT and outcome == "failed" and not hit:
            word = NOT_COMMITTED
        return word, f"{what} is {word}"
    detail = f"{calls} of {calls} model responses cached"
    if tools:
        detail += f", {tools} of {tools} recorded tool results"
    return CACHED, detail


def _row(key: bytes, seq: int, summary: _Summary) -> ActivationRow:
    # An activation whose ACTIVATION_START is not in the traces reads as one with no attributes.
    start = (
        ActivationStart.of(summary.start)
        if summary.start is not None
        else ActivationStart(seq=seq, index=0, name="")
    )
    outcome, error_type = _outcome(summary)
    return ActivationRow(
        entity_key=key,
        seq=seq,
        kind=start.activation_kind or "",
        trigger=start.trigger or "",
        envelope_id=start.envelope_id or "",
        envelope_sha256=start.envelope_sha256 or "",
        now_ms=summary.start.start_ms if summary.start is not None else None,
        outcome=outcome,
        model_calls=len(summary.calls),
        staged_intents=sum(1 for k in summary.kinds.values() if k == TraceEvent.INTENT_STAGED),
        error_type=error_type,
    )


def list_activations(
    traces: Sequence[Source],
    *,
    snapshot: Source | None = None,
    key: str | bytes | None = None,
    naming: Naming = LIST_ACTIVATIONS,
) -> Listing:
    """The traced activations, one row each; with a snapshot, whether each replays from it.

    Args:
        traces: Trace-stream sources (files, directories of ``*.pb``, stream bytes).
        snapshot: List its key, and judge each activation's replayability.
        key: A key's bytes, or text (hex of the key, or the key itself).
            None: every traced key (the snapshot's, if one is given).
        naming: How the caller names these inputs in messages (default: these parameters).

    Raises:
        InputError: Unreadable inputs, or a key that names no traced activation.
        CannotReproduce: The snapshot has a migration gap.
    """
    traces = as_sources(traces)  # one path is one source, not its characters
    loaded: tuple[StateSnapshot, KeyState] | None = None
    if snapshot is not None:
        from beam_agents.replay.inputs.snapshot import load_snapshot_source

        snap, state, _ = load_snapshot_source(snapshot, naming)
        loaded = (snap, state)
    wanted: bytes | None = key if isinstance(key, bytes) else None
    if loaded is not None:
        snap_key = loaded[0].entity_key
        if wanted is not None and wanted != snap_key:
            raise InputError(
                f"{naming.given(Input.KEY, wanted.hex())} is not the snapshot's key "
                f"({snap_key.hex()})",
                f"leave {naming.name(Input.KEY)} out to list the snapshot's key",
            )
        if isinstance(key, str) and snap_key not in (key.encode("utf-8"), _hex_or_none(key)):
            raise InputError(
                f"{naming.given(Input.KEY, repr(key))} is not the snapshot's key "
                f"({snap_key.hex()})",
                f"leave {naming.name(Input.KEY)} out to list the snapshot's key",
            )
        wanted = snap_key
    found = _scan(traces, wanted, naming)
    if isinstance(key, str) and loaded is None:
        wanted = parse_key(key, sorted(found), naming)
        found = {wanted: found[wanted]}
    elif wanted is not None and wanted not in found:
        raise InputError(
            f"the traces hold no activation of key {wanted.hex()}",
            "pass the trace streams of the pipeline that ran the key",
        )
    rows: list[ActivationRow] = []
    for entity_key in sorted(found):
        for seq in sorted(found[entity_key]):
            summary = found[entity_key][seq]
            row = _row(entity_key, seq, summary)
            if loaded is not None:
                word, detail = _replayability(loaded[0], loaded[1], seq, summary, row.outcome)
                row = _with(row, replay=word, replay_detail=detail)
            rows.append(row)
    if loaded is not None:
        pending = _pending_resume(loaded[0], loaded[1], found.get(loaded[0].entity_key, {}))
        if pending is not None:
            rows.append(pending)
    return Listing(
        rows=tuple(rows),
        snapshot_key=loaded[0].entity_key if loaded is not None else None,
        snapshot_seq=loaded[0].seq if loaded is not None else None,
    )


def _hex_or_none(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def _with(row: ActivationRow, **changes: object) -> ActivationRow:
    from dataclasses import replace

    return replace(row, **changes)  # type: ignore[arg-type]


def _pending_resume(
    snapshot: StateSnapshot, state: KeyState, traced: dict[int, _Summary]
) -> ActivationRow | None:
    cont = state.continuation
    seq = snapshot.seq + 1
    if cont is None or seq in traced:
        return None
    awaiting = ", ".join(cont.awaiting_intent_ids) or "nothing"
    return ActivationRow(
        entity_key=snapshot.entity_key,
        seq=seq,
        kind="resume",
        trigger="",
        envelope_id="",
        envelope_sha256="",
        now_ms=None,
        outcome="pending",
        model_calls=0,
        staged_intents=0,
        replay=PENDING_RESUME,
        replay_detail=(
            f"suspended at seq {cont.suspended_seq}, awaiting {awaiting} (HITL deadline "
            f"{cont.deadline_ms}): a what-if, its responses are not minted yet"
        ),
    )


# --------------------------------------------------------------------------- rendering


def render_listing(listing: Listing) -> str:
    """The ``ls`` table: per key, a heading with its count, then one line per activation."""
    lines: list[str] = []
    with_replay = listing.snapshot_seq is not None
    keys = listing.keys
    for key in keys:
        rows = [r for r in listing.rows if r.entity_key == key]
        traced = sum(1 for r in rows if r.outcome != "pending")
        heading = f"key {key_label(key)}: {traced} traced activation(s)"
        if with_replay and key == listing.snapshot_key:
            heading += f"; snapshot at seq {listing.snapshot_seq}"
        lines.append(heading)
        header = (
            f"  {'seq':>5}  {'kind':<6}  {'trigger':<11}  {'envelope id':<20}  {'outcome':<10}  "
            f"{'calls':>5}  {'intents':>7}"
        )
        lines.append(header + ("  replay from the snapshot" if with_replay else ""))
        for r in rows:
            line = (
                f"  {r.seq:>5}  {escape(r.kind) or '?':<6}  {escape(r.trigger) or '?':<11}  "
                f"{escape(r.envelope_id) or '-':<20}  {r.outcome:<10}  {r.model_calls:>5}  "
                f"{r.staged_intents:>7}"
            )
            if r.replay is not None:
                line += f"  {r.replay}: {escape(r.replay_detail)}"
            if r.error_type:
                line += f"  (error.type {escape(r.error_type)})"
            lines.append(line)
    total = sum(1 for r in listing.rows if r.outcome != "pending")
    lines.append(f"{total} traced activation(s) of {len(keys)} key(s)")
    return "\n".join(lines) + "\n"


def listing_json(listing: Listing) -> dict[str, object]:
    """The ``ls --json`` document (stable field names; keys as hex)."""
    return {
        "keys": len(listing.keys),
        "activations": sum(1 for r in listing.rows if r.outcome != "pending"),
        "snapshot": None
        if listing.snapshot_key is None
        else {"entity_key": listing.snapshot_key.hex(), "seq": listing.snapshot_seq},
        "rows": [
            {
                "entity_key": r.entity_key.hex(),
                "seq": r.seq,
                "kind": r.kind,
                "trigger": r.trigger,
                "envelope_id": r.envelope_id,
                "envelope_sha256": r.envelope_sha256,
                "now_ms": r.now_ms,
                "outcome": r.outcome,
                "error_type": r.error_type,
                "model_calls": r.model_calls,
                "staged_intents": r.staged_intents,
                "replay": r.replay,
                "replay_detail": r.replay_detail,
            }
            for r in listing.rows
        ],
    }
