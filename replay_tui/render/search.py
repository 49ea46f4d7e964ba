"""``/``: find the next event whose values (or kind and name) hold a text, and jump to it.

The filter (``f``) narrows the timeline to matching rows; search keeps every row
and moves the selection, so the operator sees the match in its context. It looks
at what the re-run computed — every decoded value, e.g. ``B2001`` in a tool's
arguments — not only at what the trace names.

A row matches when the casefolded query is in the casefolded name or kind name of
its traced or replayed event, or in a value's path or text (``Value.text``, as the
detail pane shows it before escaping). ``SearchIndex`` answers that from one string
built on the first search: the engine's values are derived when read (seconds for a
100,000-event activation), so they are read once, not once per search.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from beam_agents._protos import TraceEvent
from beam_agents.event_log import EventLog
from beam_agents.replay.result import EventPair, EventPairs, ReplayResult, Value
from beam_agents.trace_events import kind_name

__all__ = ["SearchIndex", "search_example", "search_position"]


class _Values(Protocol):
    def get(self, index: int, default: Sequence[Value] = ..., /) -> Sequence[Value]: ...


class _SearchableValues(_Values, Protocol):
    def search_texts(self, index: int) -> Sequence[str]: ...

    def search_rows(self) -> Iterator[tuple[TraceEvent, Sequence[str]]] | None: ...


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

    Case-insensitive. Returns the row position, or None when no row matches. Reads
    every row's values on each call: the TUI searches a ``SearchIndex``.
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


_SEPARATOR = "\0"


class SearchIndex:
    """``search_position``'s answers from one casefolded string of every row's searched texts.

    Built on the first ``find`` (under a lock: searches run in workers), from each
    row's event names, kind names and ``search_texts`` (the engine's derive them
    without digests or ``Value`` objects). Each row's texts are joined by NUL and
    end with one, so a query without NUL matches inside one text only, as
    ``search_position`` matches. Texts longer than ``LONG_TEXT`` chars (a 1 MiB
    model answer), and every text once ``BUDGET`` chars of values are held, are not
    copied: their rows are read again on each search, so the index holds about
    ``BUDGET`` chars of values at most, counted folded (plus the events' names),
    whatever the activation's size or its characters.
    """

    LONG_TEXT = 4096
    BUDGET = 16 << 20

    def __init__(self, result: ReplayResult, values: _SearchableValues) -> None:
        self.result = result
        self.values = values
        self._lock = threading.Lock()
        self._corpus = ""
        self._starts = array("q")
        """Where each row's texts start in the corpus (one more: its length)."""
        self._reread: list[int] = []
        """Rows with texts left out of the corpus, ascending: read on each search."""
        self._built = False

    def find(self, query: str, after: int) -> int | None:
        """``search_position(result, values, query, after)``."""
        needle = query.casefold()
        if _SEPARATOR in needle:
            return search_position(self.result, self.values, query, after)
        total = len(self.result.events)
        if not total:
            return None
        self.build()
        start = (after + 1) % total
        for lo, hi in ((start, total), (0, start)):
            found = self._first(needle, lo, hi)
            if found is not None:
                return found
        return None

    def build(self, stop: Callable[[], bool] | None = None) -> None:
        """Read every row's texts into the index, once (a second call waits for the first).

        ``stop``: asked every few thousand rows; when it says so, the build ends unfinished
        (the next ``find`` builds the index again), so quitting the app does not wait.
        """
        with self._lock:
            if not self._built:
                self._build(stop)

    def _first(self, needle: str, lo: int, hi: int) -> int | None:
        """The first row in ``[lo, hi)`` that holds ``needle``."""
        if lo >= hi:
            return None
        at = self._corpus.find(needle, self._starts[lo], self._starts[hi])
        found = bisect_right(self._starts, at) - 1 if at >= 0 else None
        end = hi if found is None else found
        reread = self._reread
        for k in range(bisect_left(reread, lo), bisect_left(reread, end)):
            if self._row_holds(reread[k], needle):
                return reread[k]
        return found

    def _row_holds(self, position: int, needle: str) -> bool:
        pair = self.result.events[position]
        return _holds(pair, self.values.get(pair.index, ()), needle)

    def _build(self, stop: Callable[[], bool] | None) -> None:
        events = self.result.events
        pairs = events if isinstance(events, EventPairs) else None
        kinds: dict[int, str] = {}
        texts_of = self.values.search_texts
        long_text, budget, size = self.LONG_TEXT, self.BUDGET, 0
        pieces: list[str] = []
        """Each row's names and texts, each followed by NUL."""
        starts = array("q", [0])
        end = 0
        reread = self._reread

        def add(position: int, row: Sequence[TraceEvent], texts: Sequence[str]) -> None:
            nonlocal end, size
            parts: list[str] = []
            for event in row:
                kind = event.kind
                name = kinds.get(kind)
                if name is None:
                    name = kinds[kind] = kind_name(kind)
                parts += (name, event.name)
            length = sum(map(len, texts)) + len(texts)
            if (
                size + length <= budget
                and (not texts or max(map(len, texts)) <= long_text)
                and all(map(str.isascii, texts))  # folded, as long
            ):
                parts += texts
                size += length
            else:
                # Counted folded: some characters fold to several (ﬃ to ffi), so a budget
                # of unfolded chars held up to 3 times it, and folding the whole corpus
                # at the end held it several times over (16 M chars of such values
                # peaked at 673 MB; hostile pass).
                for text in texts:
                    folded = text.casefold() if len(text) <= long_text else None
                    if folded is None or len(folded) > long_text or size + len(folded) + 1 > budget:
                        if not reread or reread[-1] != position:
                            reread.append(position)
                    else:
                        parts.append(folded)
                        size += len(folded) + 1
            parts.append("")
            chunk = _SEPARATOR.join(parts)
            if not chunk.isascii():  # ASCII is folded at the end (as many chars)
                chunk = chunk.casefold()
            pieces.append(chunk)
            end += len(chunk)
            starts.append(end)

        position = 0
        if pairs is not None:
            replayed, traced = pairs.replayed, pairs.traced
            theirs = len(traced)
            # Equal bytes are equal names and kinds: the traced event is then not read.
            logs = isinstance(replayed, EventLog) and isinstance(traced, EventLog)
            # The engine's values: each replayed event read once, with its texts.
            rows = self.values.search_rows()
            for position in range(len(events)):
                if stop is not None and not position % 4096 and stop():
                    self._reread = []
                    return
                if position < len(replayed):
                    if rows is not None:
                        event, texts = next(rows)
                        if event.index != position:  # pragma: no cover - numbered in order
                            texts = texts_of(position)
                    else:
                        event, texts = replayed[position], texts_of(position)
                    if position >= theirs or (
                        logs and replayed.raw(position) == traced.raw(position)  # type: ignore[attr-defined]
                    ):
                        add(position, (event,), texts)
                    else:
                        add(position, (event, traced[position]), texts)
                else:  # an event the re-run did not reach: no values
                    add(position, (traced[position],), texts_of(position))
        else:
            for position in range(len(events)):
                if stop is not None and not position % 4096 and stop():
                    self._reread = []
                    return
                pair = events[position]
                row = [e for e in (pair.replayed, pair.traced) if e is not None]
                add(position, row, texts_of(pair.index))
        # The rows that are not ASCII are folded already (add()); ASCII folds to as many
        # chars, so the rows start where they did. Not the whole corpus folded at once
        # when it is not ASCII: str.casefold holds 3 times its input while it folds.
        if all(piece.isascii() for piece in pieces):
            folded = "".join(pieces)
            pieces.clear()
            folded = folded.casefold()
        else:
            folded = "".join([p.casefold() if p.isascii() else p for p in pieces])
            pieces.clear()
        self._corpus = folded
        self._starts = starts
        self._built = True


_EXAMPLE_ROWS = 200
"""How far into the timeline the search line looks for an example to offer."""


def search_example(result: ReplayResult) -> str:
    """A name from this result to show as an example in the search line (a tool's, else a
    model's), or empty: never a fixed example that belongs to another agent."""
    fallback = ""
    for pair in result.events[:_EXAMPLE_ROWS]:
        event = pair.replayed or pair.traced
        if event is None or not event.name.isprintable() or len(event.name) > 40:
            continue
        if event.kind == TraceEvent.TOOL_CALL:
            return event.name
        if event.kind == TraceEvent.LLM_CALL and not fallback:
            fallback = event.name
    return fallback
