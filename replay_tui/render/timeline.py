"""Timeline rows: what one ``EventPair`` looks like as one line, traced beside replayed.

``build_row`` turns a pair into a ``TimelineRow`` (plain data, testable without
the app, like posting's ``build_rows``); ``render_row`` lays that row out in a
given width. The timeline widget calls both lazily, for visible rows only, so a
100,000-event activation costs what one screenful costs.

Marks come from the result (``EventPair.differs``, ``first_divergence``,
``cache_miss``); the TUI does not compare events itself.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from rich.text import Text

from beam_agents import trace_events as te
from beam_agents import trace_view as tv
from beam_agents._protos import TraceEvent
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import (
    EventPair,
    EventPairs,
    ReplayResult,
    Verdict,
    differing_positions,
)
from replay_tui.render.literal import clip

KIND_LABELS: dict[int, str] = {
    TraceEvent.ACTIVATION_START: "START",
    TraceEvent.LLM_CALL: "LLM",
    TraceEvent.TOOL_CALL: "TOOL",
    TraceEvent.INTENT_STAGED: "STAGED",
    TraceEvent.INTENT_RELEASED: "RELEASED",
    TraceEvent.SUSPENDED: "SUSPEND",
    TraceEvent.ACTIVATION_END: "END",
    TraceEvent.ACTIVATION_FAILED: "FAILED",
}

KIND_STYLES: dict[int, str] = {
    TraceEvent.ACTIVATION_START: "bold",
    TraceEvent.LLM_CALL: "cyan",
    TraceEvent.TOOL_CALL: "blue",
    TraceEvent.INTENT_STAGED: "magenta",
    TraceEvent.INTENT_RELEASED: "magenta",
    TraceEvent.SUSPENDED: "yellow",
    TraceEvent.ACTIVATION_END: "bold",
    TraceEvent.ACTIVATION_FAILED: "bold red",
}

ROW_CACHE_SIZE = 2048
"""Rows kept built: a few screens' worth, so scrolling back is free and memory stays flat."""

KEY_PREFIX_CHARS = 12
"""How many hex digits of a cache key a row shows (the detail pane shows all of them)."""


class RowMark(enum.Enum):
    """What the mark column of a row says about it."""

    SAME = " "
    DIFFERS = "≠"
    FIRST_DIVERGENCE = "▶"
    CACHE_MISS = "?"
    MISSING = "−"
    EXTRA = "+"


MARK_STYLES: dict[RowMark, str] = {
    RowMark.SAME: "",
    RowMark.DIFFERS: "bold red",
    RowMark.FIRST_DIVERGENCE: "bold white on red",
    RowMark.CACHE_MISS: "bold black on yellow",
    RowMark.MISSING: "bold red",
    RowMark.EXTRA: "bold red",
}


@dataclass(frozen=True, slots=True)
class SideCells:
    """One side (traced or replayed) of a row, as display strings (already literal)."""

    kind: str
    kind_code: int
    name: str
    cache: str
    """``hit``, ``MISS`` (replayed), ``live`` (traced: it went to the provider), ``rec``, or
    empty (not a model call)."""
    billed: str
    """``$`` when the call was billed, else empty."""
    extra: str
    """Kind-specific: cache key, intent id, awaited intents, outcome, error type."""
    fields: frozenset[str]
    """Which event fields the cells show, to highlight them when they differ."""
    miss: bool = False
    """The cache-miss event: ``extra`` names the key the re-run could not find."""


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One timeline row: an event index, its mark, and both sides."""

    index: int
    mark: RowMark
    traced: SideCells | None
    replayed: SideCells | None
    differing_fields: tuple[str, ...] = ()
    miss_key: str = ""
    """The cache key that missed, on the cache-miss row."""
    replaying: bool = False
    """Painted while the re-run runs: the traced side only, nothing judged yet."""


def _field_differs(differing: tuple[str, ...], fields: frozenset[str]) -> bool:
    return any(path in fields for path in differing)


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


def _live(cells: SideCells) -> SideCells:
    """The traced side: a model call the cache did not serve went to the provider — "live",
    not a miss (only a replayed call that is not served is one)."""
    if cells.cache == "MISS":
        return replace(cells, cache="live")
    return cells


def side_cells(event: TraceEvent) -> SideCells:
    """The display cells of one trace event."""
    view = tv.decode(event)
    kind = event.kind
    cache = billed = extra = ""
    shown = {"kind", "name"}
    if isinstance(view, tv.ActivationStart):
        detail = view.event_type or view.inbound_intent_id or _text(view.deadline_ms)
        parts = (view.trigger, detail, view.inbound_status)
        extra = " ".join(part for part in parts if part)
        shown |= {tv.ActivationStart.path(f) for f in ("trigger", "event_type", "inbound_status")}
    elif isinstance(view, tv.LlmCall):
        hit = view.cache_hit
        cache = "hit" if hit is True else "MISS" if hit is False else ""
        if view.fork_answer is True:  # the fork's value, not the cache's: never "hit"
            cache = "fork"
        billed = "$" if view.billed is True else ""
        key = view.cache_key or ""
        extra = f"k={key[:KEY_PREFIX_CHARS]}" if key else ""
        if view.error_type:
            extra = f"{extra} {view.error_type}".strip()
        shown |= {tv.LlmCall.path(f) for f in ("cache_key", "error_type")}
    elif isinstance(view, tv.ToolCall):
        extra = view.error_type or "ok"
        shown.add(tv.ToolCall.path("error_type"))
        if view.recorded is True:
            # A recorded tool: the pipeline recorded its result ("rec"); build_row marks the
            # replayed side "hit" where the tool cache served it.
            cache = "rec"
            if view.digest_only is True:
                extra = f"{extra} digest-only"
            shown |= {tv.ToolCall.path(f) for f in ("recorded", "digest_only")}
        if view.fork_answer is True:  # the fork's value: the tool did not run, nor was served
            cache = "fork"
    elif isinstance(view, tv.IntentStaged | tv.IntentReleased):
        extra = view.intent_id or ""
        if isinstance(view, tv.IntentStaged) and view.requires_approval is True:
            extra += " (approval)"
        shown |= {tv.IntentStaged.path(f) for f in ("intent_id", "requires_approval")}
    elif isinstance(view, tv.Suspended):
        awaiting = ",".join(view.awaiting or ())
        extra = f"awaits {awaiting}" if awaiting else "awaits nothing"
        shown.add(tv.Suspended.path("awaiting"))
    elif isinstance(view, tv.ActivationEnd):
        outputs = _text(view.outputs_count) or "0"
        intents = _text(view.intents_count) or "0"
        extra = f"outputs={outputs} intents={intents}"
        shown |= {tv.ActivationEnd.path(f) for f in ("outputs_count", "intents_count")}
    elif isinstance(view, tv.ActivationFailed):
        extra = view.error_type or ""
        shown.add(tv.ActivationFailed.path("error_type"))
    return SideCells(
        kind=KIND_LABELS.get(kind, te.kind_name(kind)),
        kind_code=kind,
        name=escape(event.name),
        cache=cache,
        billed=billed,
        extra=escape(extra),
        fields=frozenset(shown),
    )


def build_row(
    pair: EventPair,
    *,
    first_divergence_index: int | None = None,
    miss_index: int | None = None,
    miss_key: str = "",
    what_if: bool = False,
    miss_key_is_cache_key: bool = True,
) -> TimelineRow:
    """The row for ``pair``; the first-divergence and cache-miss marks come from the result.

    In a what-if there is no traced outcome, so no row is marked as extra or differing.
    """
    if what_if and pair.index != miss_index:
        mark = RowMark.SAME
    elif pair.index == first_divergence_index:
        mark = RowMark.FIRST_DIVERGENCE
    elif pair.index == miss_index:
        mark = RowMark.CACHE_MISS
    elif pair.replayed is None and pair.traced is not None:
        mark = RowMark.MISSING
    elif pair.traced is None and pair.replayed is not None:
        mark = RowMark.EXTRA
    elif pair.differs:
        mark = RowMark.DIFFERS
    else:
        mark = RowMark.SAME
    replayed = None if pair.replayed is None else side_cells(pair.replayed)
    if replayed is not None and replayed.cache == "rec" and pair.index != miss_index:
        # Replay never runs a recorded tool: a recorded TOOL_CALL that did not miss was served.
        replayed = replace(replayed, cache="hit")
    if replayed is not None and pair.index == miss_index:
        # The row the re-run could not serve names the missing key where the eye already is.
        replayed = replace(
            replayed,
            extra=f"missing {'key ' if miss_key_is_cache_key else ''}{escape(miss_key)}",
            miss=True,
            cache="MISS" if replayed.cache == "rec" else replayed.cache,
        )
    return TimelineRow(
        index=pair.index,
        mark=mark,
        traced=None if pair.traced is None else _live(side_cells(pair.traced)),
        replayed=replayed,
        differing_fields=pair.differing_fields,
        miss_key=miss_key if pair.index == miss_index else "",
    )


class TimelineModel:
    """The rows of one result, built on demand and kept, plus where the notable rows are.

    Constructing it reads only which pairs differ (``differing_positions``: for the
    engine's ``EventPairs`` without building a pair), so it is cheap even for 100,000
    events.
    """

    def __init__(self, result: ReplayResult) -> None:
        self.result = result
        self.pairs: Sequence[EventPair] = result.events
        div = result.first_divergence
        miss = result.cache_miss
        tool_miss = result.tool_miss
        self.first_divergence_index: int | None = div.index if div is not None else None
        self.miss_index: int | None = miss.event_index if miss is not None else None
        self.miss_key = miss.cache_key if miss is not None else ""
        self.miss_key_is_cache_key = True
        if miss is None and tool_miss is not None:
            # A recorded tool call the tool cache could not serve: marked like a cache miss.
            self.miss_index = tool_miss.event_index
            self.miss_key = f"tool result {tool_miss.tool} args={tool_miss.args_sha256[:KEY_PREFIX_CHARS]}"
            self.miss_key_is_cache_key = False
        self.what_if = result.verdict is Verdict.WHAT_IF
        """Nothing was traced to compare with: rows are the re-run alone."""
        self._dense = isinstance(self.pairs, EventPairs) or not self._sparse()
        """Pair ``i`` is event ``i`` (always so for the engine's ``EventPairs``)."""
        notable = (
            set()
            if self.what_if
            else {
                pos if self._dense else self.pairs[pos].index
                for pos in differing_positions(self.pairs)
            }
        )
        for index in (self.first_divergence_index, self.miss_index):
            if index is not None:
                notable.add(index)
        self._position = (
            None if self._dense else {pair.index: pos for pos, pair in enumerate(self.pairs)}
        )
        self.notable: list[int] = sorted(
            pos for pos in (self.position_of(i) for i in notable) if pos is not None
        )
        """Positions (row numbers) of differing rows and the cache-miss row, ascending."""
        self._rows: OrderedDict[int, TimelineRow] = OrderedDict()

    def _sparse(self) -> bool:
        # Pairs are normally numbered 0..n-1 in order; keep a lookup only if they are not.
        return any(pair.index != pos for pos, pair in enumerate(self.pairs))

    def __len__(self) -> int:
        return len(self.pairs)

    def position_of(self, event_index: int) -> int | None:
        """The row number of the pair with ``event_index`` (None if there is none)."""
        if self._position is not None:
            return self._position.get(event_index)
        return event_index if 0 <= event_index < len(self.pairs) else None

    def build(self, position: int) -> TimelineRow:
        """The row at ``position``, built afresh (no caching: safe from a worker thread)."""
        return build_row(
            self.pairs[position],
            first_divergence_index=self.first_divergence_index,
            miss_index=self.miss_index,
            miss_key=self.miss_key,
            what_if=self.what_if,
            miss_key_is_cache_key=self.miss_key_is_cache_key,
        )

    def row(self, position: int) -> TimelineRow:
        """The row at ``position``, kept in a bounded cache of recently shown rows."""
        row = self._rows.get(position)
        if row is None:
            row = self.build(position)
            self._rows[position] = row
            if len(self._rows) > ROW_CACHE_SIZE:
                self._rows.popitem(last=False)
        else:
            self._rows.move_to_end(position)
        return row

    def initial_position(self) -> int:
        """Where the cursor starts: the first divergence, else the cache miss, else the top."""
        for index in (self.first_divergence_index, self.miss_index):
            if index is not None:
                pos = self.position_of(index)
                if pos is not None:
                    return pos
        return 0

    def next_notable(self, position: int) -> int | None:
        """The next differing or missed row after ``position`` (None if there is none)."""
        at = bisect_right(self.notable, position)
        return self.notable[at] if at < len(self.notable) else None

    def previous_notable(self, position: int) -> int | None:
        """The last differing or missed row before ``position`` (None if there is none)."""
        at = bisect_left(self.notable, position)
        return self.notable[at - 1] if at > 0 else None


class TimelineRows(Protocol):
    """What the timeline widget reads of its model: how many rows, and each row."""

    def __len__(self) -> int: ...

    def row(self, position: int) -> TimelineRow: ...


class PreviewModel:
    """The rows of the traced activation while the re-run runs (what ``Timeline`` reads of a
    model: its length and its rows): the trace's events, unmarked, the replayed side
    waiting. Nothing here is a judgement; the result's ``TimelineModel`` replaces it."""

    def __init__(self, traced: Sequence[TraceEvent]) -> None:
        self.traced = traced
        self._rows: OrderedDict[int, TimelineRow] = OrderedDict()

    def __len__(self) -> int:
        return len(self.traced)

    def row(self, position: int) -> TimelineRow:
        row = self._rows.get(position)
        if row is None:
            event = self.traced[position]
            row = TimelineRow(
                index=event.index,
                mark=RowMark.SAME,
                traced=_live(side_cells(event)),
                replayed=None,
                replaying=True,
            )
            self._rows[position] = row
            if len(self._rows) > ROW_CACHE_SIZE:
                self._rows.popitem(last=False)
        return row


def build_rows(result: ReplayResult) -> list[TimelineRow]:
    """Every row of ``result`` (for tests and small results; the widget builds rows lazily)."""
    model = TimelineModel(result)
    return [model.row(pos) for pos in range(len(model))]


# -- layout -----------------------------------------------------------------------------------

MARK_WIDTH = 2
SEPARATOR = " │ "
KIND_WIDTH = 8
CACHE_WIDTH = 4


def index_width(count: int) -> int:
    """Digits needed for the largest index of ``count`` rows (at least 3)."""
    return max(3, len(str(max(count - 1, 0))))


def _side_widths(width: int, idx_width: int) -> int:
    return max(12, (width - MARK_WIDTH - idx_width - 1 - len(SEPARATOR)) // 2)


def _render_side(
    text: Text, cells: SideCells | None, width: int, differing: tuple[str, ...], *, missing: str
) -> None:
    if cells is None:
        text.append(clip(missing, width).ljust(width), style="bold red")
        return
    kind_w = min(KIND_WIDTH, width)
    text.append(clip(cells.kind, kind_w).ljust(kind_w), style=KIND_STYLES.get(cells.kind_code, ""))
    rest = width - kind_w
    if rest <= 0:
        return
    flags_w = CACHE_WIDTH + 3  # " MISS" + " $"
    name_w = max(4, (rest - flags_w) // 2)
    extra_w = rest - flags_w - name_w - 1
    name_style = "bold red" if "name" in differing else ""
    text.append(" ")
    text.append(clip(cells.name, name_w - 1).ljust(name_w - 1), style=name_style)
    cache_style = (
        "bold magenta"
        if cells.cache == "fork"
        else "green"
        if cells.cache == "hit"
        else "cyan"
        if cells.cache == "rec"
        else ""
        if cells.cache == "live"
        else "bold yellow"
        if cells.cache
        else ""
    )
    text.append(" ")
    text.append(cells.cache.ljust(CACHE_WIDTH), style=cache_style)
    text.append(" ")
    text.append(cells.billed.ljust(1), style="yellow")
    if extra_w > 0:
        if cells.miss:
            extra_style = "bold yellow"
        elif _field_differs(differing, cells.fields - {"kind", "name"}):
            extra_style = "bold red"
        else:
            extra_style = "dim"
        text.append(" ")
        text.append(clip(cells.extra, extra_w).ljust(extra_w), style=extra_style)


def render_row(row: TimelineRow, width: int, *, idx_width: int = 3) -> Text:
    """``row`` laid out in ``width`` cells: mark, index, traced side │ replayed side."""
    text = Text(no_wrap=True, overflow="crop")
    text.append(row.mark.value.ljust(MARK_WIDTH - 1), style=MARK_STYLES[row.mark])
    text.append(" ")
    text.append(str(row.index).rjust(idx_width), style="dim")
    text.append(" ")
    side_w = _side_widths(width, idx_width)
    what_if = row.mark is RowMark.SAME and row.traced is None
    differing = () if what_if else row.differing_fields
    _render_side(
        text,
        row.traced,
        side_w,
        differing,
        missing="(what-if: not traced)" if what_if else "(not in the trace)",
    )
    text.append(SEPARATOR, style="dim")
    if row.replaying:
        text.append(clip("replaying…", side_w).ljust(side_w), style="dim italic")
    else:
        _render_side(text, row.replayed, side_w, differing, missing="(not replayed)")
    text.truncate(width, pad=True)
    return text


def render_heading(width: int, *, idx_width: int = 3, forked: bool = False) -> Text:
    """The column heading above the rows, aligned with :func:`render_row` (``forked``: the
    right side is a fork's counterfactual, not a replay)."""
    side_w = _side_widths(width, idx_width)
    text = Text(no_wrap=True, overflow="crop", style="bold")
    text.append(" " * MARK_WIDTH)
    text.append("#".rjust(idx_width))
    text.append(" ")
    text.append(clip("traced", side_w).ljust(side_w))
    text.append(SEPARATOR, style="dim")
    text.append(clip("forked" if forked else "replayed", side_w).ljust(side_w))
    text.truncate(width, pad=True)
    return text


def event_search_text(event: TraceEvent) -> str:
    """What ``/`` matches in one event: kind, name, attribute names and values, hit/miss/billed.

    Read straight from the event (not from a built row): a text filter scans every
    event of an activation that may hold 100,000 of them.
    """
    kind = event.kind
    parts = [KIND_LABELS.get(kind, ""), te.kind_name(kind), event.name]
    for name, value in event.attributes.items():
        parts.append(name)
        which = value.WhichOneof("value")
        if which == "string_value":
            parts.append(value.string_value)
        elif which == "int_value":
            parts.append(str(value.int_value))
    if kind == TraceEvent.LLM_CALL:
        call = tv.LlmCall.of(event)
        if call.fork_answer:
            parts.append("fork")
        elif call.cache_hit is not None:
            parts.append("hit" if call.cache_hit else "miss")
        if call.billed:
            parts.append("billed")
    return " ".join(parts).lower()


def pair_search_text(pair: EventPair) -> str:
    """What ``/`` matches in a row: its index, ``differs``, and both events."""
    parts = [str(pair.index)]
    if pair.differs:
        parts.append("differs")
    if pair.traced is not None:
        parts.append(event_search_text(pair.traced))
    # Identical sides (the common case) are searched once.
    if pair.replayed is not None and (
        pair.traced is None
        or pair.differs
        or pair.replayed.SerializeToString() != pair.traced.SerializeToString()
    ):
        parts.append(event_search_text(pair.replayed))
    return " ".join(parts)


def kind_matches(pair: EventPair, kind_query: str) -> bool:
    """Whether either side of ``pair`` is of a kind whose name or label starts with the query."""
    query = kind_query.strip().upper()
    for event in (pair.traced, pair.replayed):
        if event is None:
            continue
        if te.kind_name(event.kind).startswith(query) or KIND_LABELS.get(event.kind, "").startswith(
            query
        ):
            return True
    return False


def filter_positions(
    model: TimelineModel,
    query: str,
    *,
    progress: Callable[[int], bool] | None = None,
    chunk: int = 5000,
) -> list[int] | None:
    """Row positions matching ``query``: ``kind:LLM`` matches by kind, anything else by text.

    This reads every event once (O(n)); the app runs it in a worker thread.
    ``progress(done)`` is called
    every ``chunk`` rows; when it returns False the scan stops and None is returned
    (a newer filter superseded this one).
    """
    query = query.strip()
    kind_query: str | None = None
    if query.lower().startswith("kind:"):
        kind_query = query[5:]
    needle = query.lower()
    matches: list[int] = []
    for pos, pair in enumerate(model.pairs):
        if progress is not None and pos % chunk == 0 and pos and not progress(pos):
            return None
        if kind_query is not None:
            if kind_matches(pair, kind_query):
                matches.append(pos)
        elif needle in pair_search_text(pair):
            matches.append(pos)
    return matches
