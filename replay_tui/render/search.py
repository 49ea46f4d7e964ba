"""``/``: find the next event whose values (or kind and name) hold a text, and jump to it.

The filter (``f``) narrows the timeline to matching rows; search keeps every row
and moves the selection, so the operator sees the match in its context. It looks
at what the re-run computed — every decoded value, e.g. ``B2001`` in a tool's
arguments — not only at what the trace names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from beam_agents.replay.result import EventPair, ReplayResult, Value
from beam_agents.trace_events import kind_name

__all__ = ["search_position"]


class _Values(Protocol):
    def get(self, index: int, default: Sequence[Value] = ..., /) -> Sequence[Value]: ...


def _holds(pair: EventPair, values: Sequence[Value], needle: str) -> bool:
    for event in (pair.replayed, pair.traced):
        if event is not None and (
            needle in event.name.casefold() or needle in kind_name(event.kind).casefold()
        ):
            return True
    return any(needle in v.text.casefold() or needle in v.path.casefold() for v in values)


def search_position(
    result: ReplayResult,
    values_by_index: _Values,
    query: str,
    after: int,
) -> int | None:
    """The first row after ``after`` (wrapping around) whose values or name hold ``query``.

    Case-insensitive. Returns the row position, or None when no row matches.
    """
    needle = query.casefold()
    total = len(result.events)
    for step in range(1, total + 1):
        position = (after + step) % total
        pair = result.events[position]  # built once: the engine's pairs are built when read
        values = values_by_index.get(pair.index, ())
        if _holds(pair, values, needle):
            return position
    return None
