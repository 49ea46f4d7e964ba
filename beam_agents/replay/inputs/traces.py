"""The trace streams: the one scanner of ``--traces``, and what they say about one key.

``trace_events`` is the only reader of trace sources (files, directories of
``*.pb``, ``-``, stream bytes, or events given as messages): ``replay``, ``ls``
and ``bundle`` all read through it, so they apply one rule to what the streams
hold. Sinks deliver at least once, so an event may appear twice: an exact copy
(the same bytes at the same key, seq and index) is skipped; a
*different* event at a position already seen is refused (exit 2), since only
one of them can be the record of what happened; an event with more than
``MAX_EVENT_ATTRIBUTES`` attributes is refused too. Only the wanted key's frames
are parsed (``read_trace_frames`` filters them before parsing).

``scan_traces`` keeps, for one key: the opening ``ACTIVATION_START`` of every
traced activation (to name the traced seqs and match an envelope to its
activation), the events that say what happened to the key's intents and
continuation (``INTENT_STAGED``, ``SUSPENDED`` and the closing event, per seq: ``TracedKey.history``, which ``reconstruct`` uses to
rebuild and verify the pending intents an older activation saw), and the full
events of one activation only: the one ``--seq`` names, or else the highest seq
seen so far. Memory is bounded by one activation, a few events per activation
of the key, and two 8-byte digests per event of the key (the duplicate rule).
Every event kept is held as its serialized bytes (``EventLog``, ``TracedSeq``,
``TracedKey.starts``) and parsed when read: a parsed event costs several times its
bytes, and a trace of a million one-event activations of a key (13 MB) took 902 MB
when each was kept parsed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from beam_agents._protos import TraceEvent
from beam_agents.errors import TraceStreamError
from beam_agents.event_log import EventLog
from beam_agents.replay.inputs.sources import STDIN, CappedReader, describe_source, open_regular
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import InputError
from beam_agents.trace_events import (
    ATTR_MEMORY_WRITES_SHA256,
    END_DIGEST_ATTRIBUTES,
    kind_name,
    serialize_trace_event,
)
from beam_agents.trace_stream import (
    StreamSource,
    read_activation_frames,
    read_trace_frames,
    trace_stream_files,
)
from beam_agents.trace_view import IntentStaged, LlmCall, attribute_kind

__all__ = [
    "MAX_ACTIVATIONS_PER_KEY",
    "MAX_EVENT_ATTRIBUTES",
    "EntityKeys",
    "TraceMessages",
    "TraceSource",
    "TracedKey",
    "TracedSeq",
    "check_complete",
    "first_events",
    "scan_traces",
    "seq_ranges",
    "trace_events",
]

_TERMINAL = (TraceEvent.ACTIVATION_END, TraceEvent.ACTIVATION_FAILED)


class Events(Mapping[int, TraceEvent]):
    """Trace events by a number (an index, a seq), held as their deterministic bytes and
    parsed each time one is read (nothing here is read often)."""

    __slots__ = ("_bytes",)

    def __init__(self) -> None:
        self._bytes: dict[int, bytes] = {}

    def put(self, number: int, data: bytes) -> None:
        self._bytes[number] = data

    def put_first(self, number: int, data: bytes) -> None:
        """``put`` unless ``number`` has an event already."""
        self._bytes.setdefault(number, data)

    def __getitem__(self, number: int) -> TraceEvent:
        return TraceEvent.FromString(self._bytes[number])

    def __contains__(self, number: object) -> bool:
        return number in self._bytes

    def __iter__(self) -> Iterator[int]:
        return iter(self._bytes)

    def __len__(self) -> int:
        return len(self._bytes)


class TracedSeq:
    """What the trace of one activation says about the key's intents and continuation."""

    __slots__ = ("_staged", "_suspended", "_terminal", "committed")

    def __init__(self) -> None:
        self._staged: Events | None = None
        self._suspended: bytes | None = None
        self._terminal: bytes | None = None
        self.committed: bool | None = None
        """True if it ended with ``ACTIVATION_END``, False if it failed, None if unknown."""

    @property
    def staged(self) -> Mapping[int, TraceEvent]:
        """Its ``INTENT_STAGED`` events, by index."""
        return self._staged if self._staged is not None else {}

    @property
    def suspended(self) -> TraceEvent | None:
        """Its ``SUSPENDED`` event, if it ended suspended."""
        return None if self._suspended is None else TraceEvent.FromString(self._suspended)

    @property
    def terminal(self) -> TraceEvent | None:
        """Its ``ACTIVATION_END`` or ``ACTIVATION_FAILED``; None if not traced (yet)."""
        return None if self._terminal is None else TraceEvent.FromString(self._terminal)

    def note(self, event: TraceEvent, data: bytes) -> TraceEvent | None:
        """Keep ``event`` (its ``data``); the event already there, when one of its kind is."""
        if event.kind == TraceEvent.INTENT_STAGED:
            if self._staged is None:
                self._staged = Events()
            self._staged.put(event.index, data)
            return None
        known = self.suspended if event.kind == TraceEvent.SUSPENDED else self.terminal
        if known is not None:
            return known
        if event.kind == TraceEvent.SUSPENDED:
            self._suspended = data
        else:
            self._terminal = data
            self.committed = event.kind == TraceEvent.ACTIVATION_END
        return None

    def staged_event(self, intent_id: str) -> TraceEvent | None:
        """Its ``INTENT_STAGED`` event for ``intent_id``, if traced."""
        for index in sorted(self.staged):
            event = self.staged[index]
            if IntentStaged.of(event).intent_id == intent_id:
                return event
        return None


_HISTORY_KINDS = (
    TraceEvent.INTENT_STAGED,
    TraceEvent.SUSPENDED,
    *_TERMINAL,
)


@dataclass
class TracedKey:
    """The traced activations of one key, and the events of one of them."""

    entity_key: bytes
    starts: Events = field(default_factory=Events)
    """The ``ACTIVATION_START`` (index 0) of each traced activation, by seq."""
    seqs: set[int] = field(default_factory=set)
    """Every seq with at least one traced event (an activation may lack its start)."""
    kept_seq: int | None = None
    """The seq whose events ``event_bytes`` holds."""
    event_bytes: dict[int, bytes] = field(default_factory=dict, repr=False)
    """The events of ``kept_seq``, by index, as their frames (deterministic serializations
    when beam-agents wrote them; the comparison falls back to the fields otherwise) (a
    parsed event costs four times its bytes: ``event_log``)."""
    provider: str = ""
    """The provider named by the first traced LLM_CALL of the key (any activation)."""
    history: dict[int, TracedSeq] = field(default_factory=dict)
    """Per traced seq: its intent, suspension and closing events."""

    @property
    def highest_seq(self) -> int | None:
        """The highest traced seq, or None when the key has no traced event."""
        return max(self.seqs) if self.seqs else None

    def activation(self) -> EventLog:
        """The kept activation's events in index order (validated: see ``check_complete``)."""
        return EventLog(self.event_bytes[i] for i in sorted(self.event_bytes))

    def provider_of_kept(self) -> str:
        """The provider named by the kept activation's first LLM_CALL, else by any traced one."""
        for event in self.activation():
            if event.kind == TraceEvent.LLM_CALL:
                provider = LlmCall.of(event).provider
                if provider is not None:
                    return provider
        return self.provider


def seq_ranges(seqs: Iterable[int]) -> str:
    """``1-4, 7, 9-10`` for a set of seqs (for messages)."""
    ordered = sorted(set(seqs))
    if not ordered:
        return "none"
    parts: list[str] = []
    start = prev = ordered[0]
    for seq in ordered[1:]:
        if seq == prev + 1:
            prev = seq
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = seq
    parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


@dataclass(frozen=True)
class TraceMessages:
    """Trace events given as messages (``Replayer.replay(traces=[...])``): read as they
    are, never written into a stream to be parsed again."""

    events: tuple[TraceEvent, ...]
    name: str = "the trace events given"
    """How messages name this source (``(the second in ...)``)."""


TraceSource = Source | TraceMessages
"""One source of trace events: a file, a directory of ``*.pb``, ``-``, bytes, or messages."""

MAX_EVENT_ATTRIBUTES = 4096
"""The most attributes a trace event may carry (the core writes fewer than 20 per event)."""

_STREAM_ADVICE = "pass trace streams as the file:// sink or convert-bq writes them"


EntityKeys = bytes | tuple[bytes, ...] | None
"""The keys whose events a scan reads: one, several (``ls --key`` that reads as hex or as
text), or None for every key."""


def _streams(
    sources: Sequence[TraceSource], entity_keys: EntityKeys, naming: Naming, seq: int | None
) -> Iterator[tuple[str, Iterable[tuple[TraceEvent, bytes]]]]:
    """Each source's name and its events with their frames (of ``entity_keys`` only, and
    of activation ``seq`` only unless it is None: then ``entity_keys`` is one key)."""
    keys = (entity_keys,) if isinstance(entity_keys, bytes) else entity_keys

    def read(source: StreamSource) -> Iterable[tuple[TraceEvent, bytes]]:
        if seq is not None and isinstance(entity_keys, bytes):
            return read_activation_frames(source, entity_key=entity_keys, seq=seq)
        return read_trace_frames(source, entity_keys=keys)

    for source in sources:
        if isinstance(source, TraceMessages):
            events = source.events
            wanted = None if keys is None else frozenset(keys)
            yield (
                source.name,
                (
                    (e, serialize_trace_event(e))
                    for e in events
                    if (wanted is None or e.entity_key in wanted) and (seq is None or e.seq == seq)
                ),
            )
            continue
        if isinstance(source, bytes):
            yield describe_source(source), read(source)
            continue
        if os.fspath(source) == STDIN:
            # Read as a stream, in chunks, like a file: a piped trace dump can be large.
            stdin = CappedReader(sys.stdin.buffer, Input.TRACES, naming, "<stdin>")
            yield "<stdin>", read(stdin)
            continue
        files = trace_stream_files(source)
        if not files:
            raise InputError(
                f"{naming.given(Input.TRACES, os.fspath(source))} is a directory with no *.pb "
                "trace-stream files",
                f"point {naming.name(Input.TRACES)} at the directory the file:// trace sink "
                "writes, or at a file",
            )
        for path in files:
            # Regular files only (no FIFO, no /dev/zero), each within the traces' cap.
            with open_regular(str(path), Input.TRACES, naming) as stream:
                capped = CappedReader(stream, Input.TRACES, naming, str(path))
                yield str(path), read(capped)


def trace_events(
    sources: Sequence[TraceSource],
    entity_key: EntityKeys,
    naming: Naming = REPLAYER,
    *,
    seq: int | None = None,
) -> Iterator[tuple[str, TraceEvent, bytes]]:
    """Every event of ``entity_key`` (a key, several, or None: every key) in ``sources``,
    each position once: ``(the source's name, the event, its frame)``, in reading order.
    With ``seq`` (and one key), only that activation's events: the others' frames are
    skipped unparsed (``read_activation_frames``).

    The frame is the event's bytes as the stream holds them (beam-agents writes
    ``serialize_trace_event``'s deterministic bytes; messages given as such are
    serialized so). The duplicate rule compares frames: a copy is the same bytes at the
    same position, as an at-least-once sink delivers it; it keeps a 64-bit hash per
    position (``hash`` of the frame: a different event passes for a copy with
    probability 2**-64), in one flat table per key.

    Raises:
        InputError: No source, a source missing or unreadable, a stream corrupt (naming
            the file and byte offset), two different events at one position, or an
            event with too many attributes.
    """
    if not sources:
        raise InputError(
            f"no {naming.name(Input.TRACES)} given",
            "pass the trace stream(s) holding the activations",
        )
    seen: dict[bytes, dict[int, int]] = {}
    """Per key: ``seq << 32 | index`` (index is 32 bits) -> the hash of its first frame."""
    try:
        for name, events in _streams(sources, entity_key, naming, seq):
            for event, frame in events:
                if len(event.attributes) > MAX_EVENT_ATTRIBUTES:
                    raise _too_many_attributes(event, name)
                positions = seen.get(event.entity_key)
                if positions is None:
                    positions = seen[event.entity_key] = {}
                position = (event.seq << 32) | event.index
                known = positions.get(position)
                digest = hash(frame)
                if known is None:
                    positions[position] = digest
                    yield name, event, frame
                elif known != digest:
                    raise InputError(
                        f"the traces hold two different events for key {event.entity_key.hex()} "
                        f"seq {event.seq} index {event.index} (the second in {name})",
                        "a trace has one event per position: these streams mix traces of "
                        "different runs or different pipelines; pass only the traces of one "
                        "pipeline",
                    )
    except TraceStreamError as exc:
        raise InputError(f"{naming.about(Input.TRACES)} {exc}", _STREAM_ADVICE) from None


def first_events(
    sources: Sequence[TraceSource],
    entity_key: bytes,
    seq: int,
    count: int,
    naming: Naming = REPLAYER,
) -> list[TraceEvent]:
    """The first ``count`` traced events of activation ``seq`` of ``entity_key``, by index
    (what the TUI paints while the replay reads the traces whole and re-runs them).

    Reading stops as soon as indices ``0 .. count - 1`` are all found, or the activation's
    closing event and every index before it; otherwise at the end of the traces. Only the
    unbroken run from index 0 is returned, so a row shown is the row at its place (an
    activation whose index 3 is missing shows 0 to 2). Nothing is judged here: the
    duplicate rule applies to what was read, and a refusal is ``scan_traces``' to make.

    Raises:
        InputError: As ``trace_events`` (for what was read).
    """
    found: dict[int, TraceEvent] = {}
    end: int | None = None
    for _, event, _ in trace_events(sources, entity_key, naming, seq=seq):
        if event.index < count:
            found[event.index] = event
        if event.kind in _TERMINAL:
            end = event.index if end is None else min(end, event.index)
        wanted = count if end is None else min(count, end + 1)
        if len(found) >= wanted and all(i in found for i in range(wanted)):
            break
    run: list[TraceEvent] = []
    while len(run) in found and (end is None or len(run) <= end):
        run.append(found[len(run)])
    return run


MAX_ACTIVATIONS_PER_KEY = 1_000_000
"""The most activations of one key the traces may hold: what is kept per activation is a
few hundred bytes, whatever its size on the wire."""


def _too_many_activations(key: bytes, name: str) -> InputError:
    return InputError(
        f"the traces hold more than {MAX_ACTIVATIONS_PER_KEY} activations of key {key.hex()} "
        f"(counted up to {name})",
        "pass the traces of the time around the activations to replay (a slice of the "
        "topic or table), not the key's whole history",
    )


def _too_many_attributes(event: TraceEvent, name: str) -> InputError:
    return InputError(
        f"the trace event of key {event.entity_key.hex()} seq {event.seq} index {event.index} "
        f"(in {name}) carries {len(event.attributes)} attributes, more than the "
        f"{MAX_EVENT_ATTRIBUTES} a trace event may have",
        "beam-agents writes fewer than 20 per event: this stream was not written by it, or "
        "was tampered with; pass the traces of the pipeline the snapshot came from",
    )


def scan_traces(
    sources: Sequence[TraceSource],
    entity_key: bytes,
    *,
    seq: int | None,
    naming: Naming = REPLAYER,
) -> TracedKey:
    """What the traces say about ``entity_key`` (see the module docstring).

    Args:
        sources: The traces: files, directories of ``*.pb``, stream bytes, or messages.
        entity_key: The snapshot's key.
        seq: Keep this activation's events; None keeps the highest traced one.
        naming: How the caller named the inputs (for the messages).

    Raises:
        InputError: As ``trace_events``.
    """
    found = TracedKey(entity_key=entity_key)
    for name, event, data in trace_events(sources, entity_key, naming):
        _take(found, event, data, seq, name)
    return found


def _take(found: TracedKey, event: TraceEvent, data: bytes, wanted: int | None, name: str) -> None:
    seq, index = event.seq, event.index
    if seq not in found.seqs:
        if len(found.seqs) >= MAX_ACTIVATIONS_PER_KEY:
            raise _too_many_activations(found.entity_key, name)
        found.seqs.add(seq)
    if not found.provider and event.kind == TraceEvent.LLM_CALL:
        found.provider = LlmCall.of(event).provider or ""
    if index == 0:
        found.starts.put_first(seq, data)
    if event.kind in _HISTORY_KINDS:
        _note(found, event, data, name)
    keep = wanted if wanted is not None else max(seq, found.kept_seq or seq)
    if seq != keep:
        return
    if found.kept_seq != seq:
        found.kept_seq = seq
        found.event_bytes = {}
    found.event_bytes[index] = data


def _note(found: TracedKey, event: TraceEvent, data: bytes, name: str) -> None:
    seq_history = found.history.get(event.seq)
    if seq_history is None:
        seq_history = found.history[event.seq] = TracedSeq()
    # One SUSPENDED and one closing event per activation, wherever the second one is.
    known = seq_history.note(event, data)
    if known is not None:
        raise InputError(
            f"the traces hold two different events for key {found.entity_key.hex()} seq "
            f"{event.seq} index {event.index} (the second in {name}): the activation ended "
            f"at index {known.index} already",
            "pass only the traces of one pipeline",
        )


def _first_gaps(indices: Sequence[int], limit: int) -> list[int]:
    """Up to ``limit`` of the smallest numbers in ``0..max(indices)`` that ``indices`` lacks.

    Time and memory are bounded by ``len(indices) + limit``, whatever the indices' values.
    """
    gaps: list[int] = []
    expected = 0
    for index in sorted(set(indices)):
        while expected < index and len(gaps) < limit:
            gaps.append(expected)
            expected += 1
        if len(gaps) >= limit:
            break
        expected = index + 1
    return gaps


def check_complete(events: Sequence[TraceEvent], entity_key: bytes, seq: int) -> None:
    """Refuse a traced activation that is not whole: indices 0..n-1, a start, one terminal event.

    An incomplete trace cannot be compared (a missing tail would read as the
    re-run's "extra" events), so it is an input error, not a divergence.

    Raises:
        InputError: Naming what is missing.
    """
    where = f"key {entity_key.hex()} seq {seq}"
    advice = "collect every trace event of that activation (a sink may still be writing them)"
    gaps = _first_gaps([e.index for e in events], 11)
    if gaps:
        # Never a range over the indices: one event with index 4294967295 is 17 bytes.
        shown = ", ".join(str(i) for i in gaps[:10]) + (", …" if len(gaps) > 10 else "")
        raise InputError(f"the trace of {where} is incomplete: no event at index {shown}", advice)
    if not events or events[0].kind != TraceEvent.ACTIVATION_START:
        raise InputError(f"the trace of {where} has no ACTIVATION_START at index 0", advice)
    last = events[-1]
    if last.kind not in _TERMINAL:
        raise InputError(
            f"the trace of {where} ends at index {last.index} with {kind_name(last.kind)}, "
            "not ACTIVATION_END or ACTIVATION_FAILED: it is incomplete",
            advice,
        )
    if last.kind == TraceEvent.ACTIVATION_END:
        _check_end_digests(last, where)
    for event in events[:-1]:
        if event.kind in _TERMINAL or (event.kind == TraceEvent.ACTIVATION_START and event.index):
            raise InputError(
                f"the trace of {where} has {kind_name(event.kind)} at index {event.index}, "
                "inside the activation: it is not one activation's trace",
                "pass the traces of the pipeline the snapshot came from",
            )


def _check_end_digests(end: TraceEvent, where: str) -> None:
    """Refuse an ACTIVATION_END whose output and memory digests are not both there as text.

    Every writer that traces them traces both, as strings (a trace from before them
    has neither: outputs and memory are then unverifiable, as documented). One
    without the other, or one of another type, is corruption, and judging it would
    silently skip that check: a changed output would replay as "reproduced". The
    memory write-set digest came later: a trace may lack it (it then predates it),
    but one that has it has both others, and all three as text.
    """
    kinds = {name: attribute_kind(end, name) for name in END_DIGEST_ATTRIBUTES}
    present = [name for name, kind in kinds.items() if kind is not None]
    writes = attribute_kind(end, ATTR_MEMORY_WRITES_SHA256)
    if writes is not None:
        # The write-set digest came later: a trace that has it has the other two as well.
        kinds[ATTR_MEMORY_WRITES_SHA256] = writes
        present.append(ATTR_MEMORY_WRITES_SHA256)
    if not present:
        return
    wrong = [name for name in present if kinds[name] != "string_value"]
    missing = [name for name, kind in kinds.items() if kind is None]
    if missing or wrong:
        what = (
            f"{present[0]!r} but not {missing[0]!r}"
            if missing
            else f"{wrong[0]!r} as {kinds[wrong[0]]}, not text"
        )
        raise InputError(
            f"the trace of {where} ends with an ACTIVATION_END holding {what}: every "
            "beam-agents that traces these digests writes both as text, so this trace event "
            "is corrupt or edited, and the outputs and memory could not be judged",
            "collect the trace again from the sink",
        )
