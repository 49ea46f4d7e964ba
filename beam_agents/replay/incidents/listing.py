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
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO, overload

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.key_state import KeyState, waiting_text
from beam_agents.llm_cache import LookupStatus
from beam_agents.replay.inputs.traces import trace_events
from beam_agents.replay.naming import LIST_ACTIVATIONS, Input, Naming
from beam_agents.replay.options import Source, as_sources
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.replay.reporting.escape import escape, escape_strings
from beam_agents.replay.reporting.json_lines import write_document
from beam_agents.replay.reporting.labels import key_label, utc_time
from beam_agents.tool_cache import tool_cache_key
from beam_agents.trace_view import ActivationFailed, ActivationStart, LlmCall, ToolCall

__all__ = [
    "LS_JSON_SCHEMA",
    "ActivationRow",
    "Listing",
    "list_activations",
    "listing_json",
    "listing_lines",
    "parse_key",
    "render_listing",
    "write_listing_json",
]

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
CALL_FAILED = "call-failed"
"""The traced model call itself failed (a rate limit, an outage): it never had a response,
whether or not a later activation (its retry) cached one under the same key."""
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


@dataclass(frozen=True, kw_only=True, slots=True)
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


class _Rows(Sequence[ActivationRow]):
    """The rows, each built when read from its activation's summary: a listing of a million
    tiny activations holds a million small summaries, not a million rows as well."""

    def __init__(self, build: Callable[[int], ActivationRow], count: int) -> None:
        self._build = build
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> ActivationRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[ActivationRow]: ...

    def __getitem__(self, index: int | slice) -> ActivationRow | list[ActivationRow]:
        if isinstance(index, slice):
            return [self._build(i) for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        return self._build(index)

    def __iter__(self) -> Iterator[ActivationRow]:
        return (self._build(i) for i in range(self._count))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Rows, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class Listing:
    """What ``ls`` found."""

    rows: Sequence[ActivationRow]
    """Ordered by key, then seq (built when read)."""
    snapshot_key: bytes | None = None
    snapshot_seq: int | None = None
    key_counts: tuple[tuple[bytes, int], ...] = ()
    """Each key listed, in order, with how many rows it has (its run in ``rows``)."""
    snapshot_waiting: str = ""
    """What the snapshot's key waited on when exported (``waiting_text``; empty: nothing)."""

    @property
    def keys(self) -> list[bytes]:
        """The keys listed, in order."""
        return [key for key, _ in self.key_counts]


class _Summary:
    """What ``ls`` keeps of one traced activation: its opening and closing events as their
    frames (parsed again only to be listed), counts, and, for the key a snapshot judges,
    the cache lookups its model calls and recorded tools will make."""

    __slots__ = ("calls", "events", "last_index", "model_calls", "recorded", "staged",
                 "start", "terminal")  # fmt: skip

    def __init__(self, detailed: bool) -> None:
        self.start: bytes | None = None
        self.terminal: bytes | None = None
        self.events = 0
        """Positions traced (``trace_events`` yields each once)."""
        self.last_index = -1
        self.model_calls = 0
        self.staged = 0
        self.calls: dict[int, tuple[str, bool, bool]] | None = {} if detailed else None
        """index -> (cache key, cache hit, the call failed) of its LLM_CALLs (the snapshot's
        key only)."""
        self.recorded: dict[int, tuple[str, str]] | None = {} if detailed else None
        """index -> (tool, args sha256) of its recorded tool calls (the snapshot's key only)."""

    def start_event(self) -> TraceEvent | None:
        return None if self.start is None else TraceEvent.FromString(self.start)

    def terminal_event(self) -> TraceEvent | None:
        return None if self.terminal is None else TraceEvent.FromString(self.terminal)


def _key_readings(text: str) -> list[bytes]:
    """What a key argument can name: the hex of the key's bytes (when it reads as hex),
    and its text."""
    readings: list[bytes] = [text.encode("utf-8")]
    if len(text) % 2 == 0 and text and all(c in string.hexdigits for c in text):
        readings.insert(0, bytes.fromhex(text))
    return list(dict.fromkeys(readings))


def parse_key(text: str, known: Sequence[bytes], naming: Naming = LIST_ACTIVATIONS) -> bytes:
    """The key a key argument names: hex of the key's bytes, or its text.

    Raises:
        InputError: The key is in none of the traces, or both readings are.
    """
    present = set(known)
    matching = [k for k in _key_readings(text) if k in present]
    if len(matching) == 1:
        return matching[0]
    if len(matching) > 1:
        raise InputError(
            f"{naming.given(Input.KEY, repr(text))} names two traced keys: hex {matching[0].hex()} and the text "
            f"{text!r} (hex {matching[1].hex()})",
            "pass the hex of the one you mean",
        )
    raise InputError(
        f"{naming.given(Input.KEY, repr(text))}: the traces hold no activation of that key",
        f"{naming.list_keys} to see the traced keys",
    )


def _scan(
    sources: Sequence[Source],
    keys: bytes | tuple[bytes, ...] | None,
    naming: Naming,
    detailed: bytes | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[bytes, dict[int, _Summary]]:
    found: dict[bytes, dict[int, _Summary]] = {}
    for read, (_, event, frame) in enumerate(trace_events(sources, keys, naming), start=1):
        key = event.entity_key
        by_seq = found.get(key)
        if by_seq is None:
            by_seq = found[key] = {}
        summary = by_seq.get(event.seq)
        if summary is None:
            summary = by_seq[event.seq] = _Summary(key == detailed)
        summary.events += 1
        index = event.index
        if index > summary.last_index:
            summary.last_index = index
        kind = event.kind
        if kind == TraceEvent.ACTIVATION_START and index == 0:
            summary.start = frame
        elif kind == TraceEvent.LLM_CALL:
            summary.model_calls += 1
            if summary.calls is not None:
                call = LlmCall.of(event)
                summary.calls[index] = (
                    call.cache_key or "",
                    bool(call.cache_hit),
                    bool(call.error_type),
                )
        elif kind == TraceEvent.TOOL_CALL:
            if summary.recorded is not None:
                tool = ToolCall.of(event)
                if tool.recorded:
                    summary.recorded[index] = (tool.tool_name or "", tool.args_sha256 or "")
        elif kind == TraceEvent.INTENT_STAGED:
            summary.staged += 1
        elif kind in (TraceEvent.ACTIVATION_END, TraceEvent.ACTIVATION_FAILED):
            summary.terminal = frame
        if progress is not None and not read & 0xFFFF:
            progress(read)
    return found


def _outcome(summary: _Summary) -> tuple[str, str]:
    terminal = summary.terminal_event()
    if terminal is None:
        return "incomplete", ""
    if terminal.kind == TraceEvent.ACTIVATION_FAILED:
        return "failed", ActivationFailed.of(terminal).error_type or terminal.name
    return terminal.name or "done", ""


def _complete(summary: _Summary) -> bool:
    terminal = summary.terminal_event()
    return (
        summary.start is not None
        and terminal is not None
        and summary.events == summary.last_index + 1
        and terminal.index == summary.last_index
    )


def _replayability(
    snapshot: StateSnapshot, state: KeyState, seq: int, summary: _Summary, outcome: str
) -> tuple[str, str]:
    from beam_agents.replay.reconstruct.plan import resumed_continuation

    if seq > snapshot.seq:
        return AFTER_SNAPSHOT, f"the snapshot was exported at seq {snapshot.seq}, before it"
    if not _complete(summary):
        return INCOMPLETE, "not every trace event of it is in the traces"
    start_event = summary.start_event()
    assert start_event is not None and summary.calls is not None
    assert summary.recorded is not None
    if ActivationStart.of(start_event).is_resume:
        try:
            resumed_continuation(snapshot, state, seq, failed=outcome == "failed")
        except CannotReproduce as gone:
            return CONTINUATION_GONE, gone.reason
    now_ms = start_event.start_ms
    calls = len(summary.calls)
    tools = len(summary.recorded)
    # In trace order, as the re-run meets them: the first one it cannot serve decides.
    for index in sorted({*summary.calls, *summary.recorded}):
        if index in summary.calls:
            cache_key, hit, call_failed = summary.calls[index]
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
            hit = call_failed = False  # the pipeline always runs a recorded tool, and records it
            what = f"recorded tool call {tool!r} at event {index}"
        if status is LookupStatus.HIT:
            continue
        word = _MISS_WORDS[status]
        if call_failed and status in (LookupStatus.ABSENT, LookupStatus.MINTED_LATER):
            # No response ever existed here: what a later activation cached is not it.
            word = CALL_FAILED
        elif status is LookupStatus.ABSENT and outcome == "failed" and not hit:
            word = NOT_COMMITTED
        return word, f"{what} is {word}"
    detail = f"{calls} of {calls} model responses cached"
    if tools:
        detail += f", {tools} of {tools} recorded tool results"
    return CACHED, detail


def _row(key: bytes, seq: int, summary: _Summary) -> ActivationRow:
    # An activation whose ACTIVATION_START is not in the traces reads as one with no attributes.
    start_event = summary.start_event()
    start = (
        ActivationStart.of(start_event)
        if start_event is not None
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
        now_ms=start_event.start_ms if start_event is not None else None,
        outcome=outcome,
        model_calls=summary.model_calls,
        staged_intents=summary.staged,
        error_type=error_type,
    )


def list_activations(
    traces: Sequence[Source],
    *,
    snapshot: Source | None = None,
    key: str | bytes | None = None,
    naming: Naming = LIST_ACTIVATIONS,
    progress: Callable[[int], None] | None = None,
) -> Listing:
    """The traced activations, one row each; with a snapshot, whether each replays from it.

    One pass over the traces, reading only the wanted key's events when there is one (a
    text ``key`` is resolved before the scan: the streams are filtered by both the keys it
    can name). Memory is a small summary per traced activation of the keys listed (its
    opening and closing events as their bytes, counts) and a hash per traced event.

    Args:
        traces: Trace-stream sources (files, directories of ``*.pb``, stream bytes).
        snapshot: List its key, and judge each activation's replayability.
        key: A key's bytes, or text (hex of the key, or the key itself).
            None: every traced key (the snapshot's, if one is given).
        naming: How the caller names these inputs in messages (default: these parameters).
        progress: Called now and then with the number of trace events read so far.

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
    if isinstance(key, str) and loaded is None:
        # Resolved before the scan: only the keys the text can name are read.
        found = _scan(traces, tuple(_key_readings(key)), naming, progress=progress)
        wanted = parse_key(key, sorted(found), naming)
        found = {wanted: found[wanted]}
    else:
        detailed = loaded[0].entity_key if loaded is not None else None
        found = _scan(traces, wanted, naming, detailed, progress)
        if wanted is not None and wanted not in found:
            raise InputError(
                f"the traces hold no activation of key {wanted.hex()}",
                "pass the trace streams of the pipeline that ran the key",
            )
    entries: list[tuple[bytes, int, _Summary]] = [
        (entity_key, seq, by_seq[seq])
        for entity_key, by_seq in sorted(found.items())
        for seq in sorted(by_seq)
    ]
    counts = [(entity_key, len(by_seq)) for entity_key, by_seq in sorted(found.items())]
    pending: ActivationRow | None = None
    if loaded is not None:
        pending = _pending_resume(loaded[0], loaded[1], found.get(loaded[0].entity_key, {}))
        if pending is not None:
            counts = [(k, n + 1 if k == pending.entity_key else n) for k, n in counts]
            if not counts:
                counts = [(pending.entity_key, 1)]

    def build(i: int) -> ActivationRow:
        if i == len(entries):
            assert pending is not None
            return pending
        entity_key, seq, summary = entries[i]
        row = _row(entity_key, seq, summary)
        if loaded is not None:
            word, detail = _replayability(loaded[0], loaded[1], seq, summary, row.outcome)
            row = _with(row, replay=word, replay_detail=detail)
        return row

    return Listing(
        rows=_Rows(build, len(entries) + (pending is not None)),
        snapshot_key=loaded[0].entity_key if loaded is not None else None,
        snapshot_seq=loaded[0].seq if loaded is not None else None,
        key_counts=tuple(counts),
        snapshot_waiting=waiting_text(loaded[0]) if loaded is not None else "",
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


LS_JSON_SCHEMA = "beam-agents-replay-ls/1"
"""The ``schema`` field of ``ls --json`` (docs/incidents.md lists its fields)."""


def _ago(ms: int, now_ms: int) -> str:
    """How long before ``now_ms`` (the wall clock of whoever runs ``ls``): ``3h 12m ago``."""
    delta = (now_ms - ms) // 1000
    future = delta < 0
    delta = abs(delta)
    days, rest = divmod(delta, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        text = f"{days}d {hours}h"
    elif hours:
        text = f"{hours}h {minutes:02d}m"
    elif minutes:
        text = f"{minutes}m {seconds:02d}s"
    else:
        text = f"{seconds}s"
    return f"in {text}" if future else f"{text} ago"


def _at(ms: int | None) -> str:
    """``2024-12-12 10:42:00`` (UTC, to the second), or ``?``."""
    if ms is None:
        return "?"
    text = utc_time(ms)
    return text[:19] if text[:1].isdigit() else text


def listing_lines(listing: Listing, *, now_ms: int | None = None) -> Iterator[str]:
    """The ``ls`` table line by line: per key, a heading with its count, then one line per
    activation with its time (UTC, and how long ago: the clock the activation ran on,
    against ``now_ms``, the wall clock by default). Linear in the rows. Each line is
    escaped whole on its way out (a line break in a field shows as ``\\n``): no field can
    drive the terminal or start a line of its own."""
    return (escape(line) for line in _listing_lines(listing, now_ms=now_ms))


def _listing_lines(listing: Listing, *, now_ms: int | None) -> Iterator[str]:
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    with_replay = listing.snapshot_seq is not None
    rows = iter(listing.rows)
    total = 0
    for key, count in listing.key_counts:
        group = [next(rows) for _ in range(count)]
        traced = sum(1 for r in group if r.outcome != "pending")
        total += traced
        heading = f"key {key_label(key)}: {traced} traced activation(s)"
        if with_replay and key == listing.snapshot_key:
            heading += f"; snapshot at seq {listing.snapshot_seq}"
            if listing.snapshot_waiting:
                heading += f"; waiting: {escape(listing.snapshot_waiting)}"
        yield heading
        header = (
            f"  {'seq':>5}  {'at (UTC)':<19}  {'ago':<12}  {'kind':<6}  {'trigger':<11}  "
            f"{'envelope id':<20}  {'outcome':<10}  {'calls':>5}  {'intents':>7}"
        )
        yield header + ("  replay from the snapshot" if with_replay else "")
        for r in group:
            ago = "" if r.now_ms is None else _ago(r.now_ms, now_ms)
            line = (
                f"  {r.seq:>5}  {_at(r.now_ms):<19}  {ago:<12}  {escape(r.kind) or '?':<6}  "
                f"{escape(r.trigger) or '?':<11}  {escape(r.envelope_id) or '-':<20}  "
                f"{r.outcome:<10}  {r.model_calls:>5}  {r.staged_intents:>7}"
            )
            if r.replay is not None:
                line += f"  {r.replay}: {escape(r.replay_detail)}"
            if r.error_type:
                line += f"  (error.type {escape(r.error_type)})"
            yield line
    yield f"{total} traced activation(s) of {len(listing.key_counts)} key(s)"


def render_listing(listing: Listing, *, now_ms: int | None = None) -> str:
    """The ``ls`` table as one text (``listing_lines``, joined)."""
    return "\n".join(listing_lines(listing, now_ms=now_ms)) + "\n"


def _row_document(r: ActivationRow) -> dict[str, object]:
    """One row of ``ls --json``, its strings escaped (``jq -r`` prints nothing raw)."""
    document: dict[str, object] = escape_strings({
        "entity_key": r.entity_key.hex(),
        "seq": r.seq,
        "kind": r.kind,
        "trigger": r.trigger,
        "envelope_id": r.envelope_id,
        "envelope_sha256": r.envelope_sha256,
        "now_ms": r.now_ms,
        "at_utc": None if r.now_ms is None else _at(r.now_ms),
        "outcome": r.outcome,
        "error_type": r.error_type,
        "model_calls": r.model_calls,
        "staged_intents": r.staged_intents,
        "replay": r.replay,
        "replay_detail": r.replay_detail,
    })
    return document


def _listing_head(listing: Listing) -> dict[str, object]:
    document: dict[str, object] = escape_strings({
        "schema": LS_JSON_SCHEMA,
        "keys": len(listing.key_counts),
        "activations": sum(
            n for _, n in listing.key_counts
        ) - (1 if listing.rows and listing.rows[-1].outcome == "pending" else 0),
        "snapshot": None
        if listing.snapshot_key is None
        else {"entity_key": listing.snapshot_key.hex(), "seq": listing.snapshot_seq},
    })
    return document


def listing_json(listing: Listing) -> dict[str, object]:
    """The ``ls --json`` document as data (``write_listing_json`` writes the same text)."""
    return {**_listing_head(listing), "rows": [_row_document(r) for r in listing.rows]}


def write_listing_json(listing: Listing, out: TextIO) -> None:
    """Write the ``ls --json`` document to ``out``: one row per line, encoded by the
    standard library's C encoder, never the whole document in memory."""
    rows = (_row_document(r) for r in listing.rows)
    write_document(out, {**_listing_head(listing), "rows": rows}, streamed=("rows",))
