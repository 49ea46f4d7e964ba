"""``EventLog``: one activation's trace events held as their serialized bytes, parsed on access.

A parsed ``TraceEvent`` costs about 1.3 KB of memory (its own protobuf arena and
the attribute map); its deterministic serialization about 300 bytes. Replay
holds a whole activation on each side (traced and replayed), so a
100,000-event activation held as messages alone took 250 MB (issue 14). An
``EventLog`` keeps the bytes and parses an event each time it is read (about a
microsecond): a ``Sequence[TraceEvent]`` whose elements are equal, not
identical, from one read to the next. Nothing reads an event to change it, so
nothing can tell the difference except ``is``. ``append`` adds an event (its
bytes): ``run_activation(..., replay=ReplayHooks(compact_trace=True))`` records the re-run's trace
into one, and replay's trace scan keeps the traced activation in one.

The bytes are ``serialize_trace_event``'s (deterministic) for every event beam-agents
wrote, so comparing two events' ``raw`` bytes is the comparison ``compare`` makes,
without parsing; a traced activation is kept as its frames, which a foreign writer may
have encoded otherwise: ``compare`` then compares the fields (equal bytes prove the same
event, different bytes prove nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from beam_agents._protos import TraceEvent
from beam_agents.trace_events import serialize_trace_event

__all__ = ["EventLog"]


class EventLog(Sequence[TraceEvent]):
    """Trace events as their deterministic serializations; each read parses a fresh message."""

    __slots__ = ("_data",)

    def __init__(self, data: Iterable[bytes] = ()) -> None:
        """``data``: each event's ``serialize_trace_event`` bytes, in order."""
        self._data: list[bytes] = list(data)

    @classmethod
    def of(cls, events: Iterable[TraceEvent]) -> EventLog:
        """The log of ``events`` (an ``EventLog`` is returned as is)."""
        if isinstance(events, EventLog):
            return events
        return cls(serialize_trace_event(event) for event in events)

    def append(self, event: TraceEvent) -> None:
        """Add ``event`` at the end (its bytes: changing ``event`` later changes nothing here)."""
        self._data.append(serialize_trace_event(event))

    def raw(self, index: int) -> bytes:
        """The serialized bytes of event ``index`` (no parsing)."""
        return self._data[index]

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, index: int) -> TraceEvent: ...

    @overload
    def __getitem__(self, index: slice) -> EventLog: ...

    def __getitem__(self, index: int | slice) -> TraceEvent | EventLog:
        if isinstance(index, slice):
            return EventLog(self._data[index])
        return TraceEvent.FromString(self._data[index])

    def __iter__(self) -> Iterator[TraceEvent]:
        for data in self._data:
            yield TraceEvent.FromString(data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return self._data == other._data
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventLog({len(self._data)} events)"
