"""The detail pane: one event, traced beside replayed, field by field.

Which fields differ is the result's word (``EventPair.differing_fields``); the
pane only lines the values up and marks those fields. On the first diverging
event it adds the result's structured diff, and on the cache-miss event the
nearest cached entry and the request components that differ.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import cast

from rich.text import Text

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.reporting.text import (
    miss_request_values,
    recording_age,
    request_components_differing,
    unjudged_memory,
)
from beam_agents.replay.result import (
    CacheMiss,
    Divergence,
    EventPair,
    Mark,
    ReferenceRun,
    ReplayResult,
    Value,
    ValueList,
    Verdict,
    event_values,
)
from replay_tui.render.layout import columns, fold, wrap
from replay_tui.render.literal import literal_text

ABSENT = "—"

HEAD_FIELDS = ("kind", "name")
TAIL_FIELDS = (
    "index",
    "seq",
    "entity_key",
    "start_ms",
    "end_ms",
    "trace_id",
    "span_id",
    "parent_span_id",
)
"""Identity fields go after the attributes: they rarely differ, and when they do they are marked."""


@dataclass(frozen=True, slots=True)
class DetailRow:
    """One aligned line of the detail pane."""

    field: str
    """The field path, as the result names it (``name``, ``attributes['…']``)."""
    label: str
    traced: str
    replayed: str
    differs: bool
    """The result lists this field among the pair's differing fields."""
    normalized: bool = False
    """A field the engine normalized (``EventPair.normalized_fields``) whose raw values differ."""


def _format(value: object) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, bytes):
        return value.hex() or '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return escape(value) if value else '""'
    return str(value)


def _top_fields(event: TraceEvent | None) -> dict[str, str]:
    if event is None:
        return {}
    return {
        "kind": te.kind_name(event.kind),
        "name": _format(event.name),
        "index": str(event.index),
        "seq": str(event.seq),
        "entity_key": _format(event.entity_key),
        "start_ms": str(event.start_ms),
        "end_ms": str(event.end_ms),
        "trace_id": _format(event.trace_id),
        "span_id": _format(event.span_id),
        "parent_span_id": _format(event.parent_span_id),
    }


def _differing_set(paths: tuple[str, ...]) -> set[str]:
    # Accept either quoting of attribute paths, and bare attribute names.
    names: set[str] = set()
    for path in paths:
        names.add(path)
        names.add(path.replace('"', "'"))
        if path.startswith("attributes[") and path.endswith("]"):
            names.add(path[len("attributes[") : -1].strip("'\""))
    return names


def detail_rows(pair: EventPair) -> list[DetailRow]:
    """Every field of the pair's two events, aligned, with the differing ones marked."""
    differing = _differing_set(pair.differing_fields)
    traced_top, replayed_top = _top_fields(pair.traced), _top_fields(pair.replayed)

    def top(names: tuple[str, ...]) -> list[DetailRow]:
        return [
            DetailRow(
                field=name,
                label=name,
                traced=traced_top.get(name, ABSENT),
                replayed=replayed_top.get(name, ABSENT),
                differs=name in differing,
            )
            for name in names
        ]

    rows = top(HEAD_FIELDS)
    traced_attrs = te.attributes_dict(pair.traced) if pair.traced is not None else {}
    replayed_attrs = te.attributes_dict(pair.replayed) if pair.replayed is not None else {}
    for name in sorted(traced_attrs.keys() | replayed_attrs.keys()):
        path = f"attributes['{name}']"
        traced_value = _format(traced_attrs.get(name))
        replayed_value = _format(replayed_attrs.get(name))
        differs = path in differing or name in differing
        normalized = path in pair.normalized_fields  # the engine's call, never the TUI's
        rows.append(
            DetailRow(
                field=path,
                label=escape(name),
                traced=traced_value,
                replayed=replayed_value,
                differs=differs,
                normalized=normalized,
            )
        )
    return rows + top(TAIL_FIELDS)


def _title(pair: EventPair, *, what_if: bool) -> Text:
    event = pair.traced or pair.replayed
    title = Text(f"event {pair.index}", style="bold")
    if event is not None:
        title.append(f"  {te.kind_name(event.kind)}  ")
        title.append(literal_text(event.name, "italic"))
    if what_if:
        title.append("  what-if: nothing traced to compare with", style="bold cyan")
    elif pair.traced is None:
        title.append(
            "  extra: the re-run produced an event the trace does not have", style="bold red"
        )
    elif pair.replayed is None:
        title.append("  missing: the re-run stopped before this traced event", style="bold red")
    elif pair.differs:
        title.append("  differs", style="bold red")
    else:
        title.append("  same", style="green")
    return title


STACK_BELOW_WIDTH = 64
"""Narrower than this, fields are stacked (name, then values) instead of three columns."""

LABEL_GAP = 1


def _mark(row: DetailRow) -> tuple[Text, str]:
    if row.differs:
        return Text("≠", style="bold red"), "bold red"
    if row.normalized:
        return Text("≈", style="cyan"), "cyan"
    return Text(" "), ""


def _label(row: DetailRow) -> Text:
    return Text(row.label, style="bold")


def _replayed(row: DetailRow, style: str) -> Text:
    value = Text(row.replayed, style=style)
    if row.normalized:
        value.append(" (normalized)", style="dim cyan")
    return value


def _label_width(rows: list[DetailRow], width: int) -> int:
    longest = max((len(row.label) for row in rows), default=5)
    return max(12, min(longest, width * 2 // 5))


def fields_lines(rows: list[DetailRow], width: int) -> list[Text]:
    """``detail_rows`` laid out in ``width``: aligned columns, or stacked when narrow."""
    if width < STACK_BELOW_WIDTH:
        return _stacked(rows, width)
    label_w = _label_width(rows, width)
    value_w = max(8, (width - 2 - label_w - 2 * LABEL_GAP) // 2)
    widths = (1, label_w, value_w, value_w)
    lines = columns(
        [
            Text(""),
            Text("field", style="bold"),
            Text("traced", style="bold"),
            Text("replayed", style="bold"),
        ],
        widths,
        gap=LABEL_GAP,
    )
    for row in rows:
        mark, style = _mark(row)
        lines += columns(
            [mark, _label(row), Text(row.traced, style=style), _replayed(row, style)],
            widths,
            gap=LABEL_GAP,
        )
    return lines


def _stacked(rows: list[DetailRow], width: int) -> list[Text]:
    lines: list[Text] = []
    value_w = max(8, width - 14)
    for row in rows:
        mark, style = _mark(row)
        head = mark + Text(" ") + _label(row)
        if row.traced == row.replayed and not row.differs:
            head.append("  ")
            head.append(row.traced, style=style)
            lines += fold(head, width)
            continue
        lines += fold(head, width)
        lines += columns(
            [Text("    traced", style="dim"), Text(row.traced, style=style)], (13, value_w)
        )
        lines += columns([Text("    replayed", style="dim"), _replayed(row, style)], (13, value_w))
    return lines


def divergence_lines(divergence: Divergence, width: int) -> list[Text]:
    """The result's structured diff of the first diverging event."""
    head = Text("First divergence", style="bold white on red")
    what = f"  event {divergence.index} {escape(divergence.kind)} {escape(divergence.name)}"
    if divergence.missing:
        what += " — the re-run did not produce this event"
    if divergence.extra:
        what += " — the re-run produced an event the trace does not have"
    head.append(what, style="bold")
    lines = wrap(head, width)
    value_w = max(8, width - 14)
    for diff in divergence.fields:
        # Stacked, not tabled: a path and two 64-digit digests do not fit side by side.
        lines += fold(Text("≠ ", style="bold red") + Text(escape(diff.path), style="bold"), width)
        lines += columns(
            [Text("    traced", style="dim"), literal_text(diff.traced, "red")], (13, value_w)
        )
        lines += columns(
            [Text("    replayed", style="dim"), literal_text(diff.replayed, "green")], (13, value_w)
        )
    if divergence.detail:
        lines += wrap(literal_text(divergence.detail, "dim", multiline=True), width)
    return lines


def miss_lines(miss: CacheMiss, width: int) -> list[Text]:
    """The cache miss: the key, why it missed, and the nearest cached entry."""
    head = Text("Cache miss", style="bold black on yellow")
    head.append(f"  status {escape(miss.status)}", style="bold")
    lines = wrap(head, width)
    widths = (8, max(8, width - 9))

    def field(name: str, value: Text) -> None:
        lines.extend(columns([Text(name, style="bold"), value], widths))

    field("key", Text(escape(miss.cache_key)))
    field("model", Text(escape(miss.model)))
    if miss.traced_cache_key is not None:
        traced = Text(escape(miss.traced_cache_key))
        if miss.traced_cache_key == miss.cache_key:
            traced.append("  (same key)", style="dim")
        else:
            traced.append("  (the traced call used another key)", style="yellow")
        field("traced", traced)
    if miss.nearest is None:
        field("nearest", Text("no cached entry resembles this request", style="dim"))
    else:
        nearest = Text(escape(miss.nearest.cache_key))
        nearest.append(f"  model {escape(miss.nearest.model)}", style="dim")
        field("nearest", nearest)
        differences = ", ".join(escape(d) for d in miss.nearest.differences) or "nothing recorded"
        field("differs", Text(differences, style="bold yellow"))
    return lines


def miss_request_lines(result: ReplayResult, miss: CacheMiss, width: int) -> list[Text]:
    """The replayed request in plaintext, the components the nearest entry lacks highlighted."""
    values = miss_request_values(result, miss)
    if not values:
        return []
    differing = request_components_differing(miss)
    head = Text("Replayed request", style="bold underline")
    if differing:
        head.append("  highlighted: differs from the nearest cached entry", style="dim")
    lines = wrap(head, width)
    for value in values:
        hit = value.path in differing
        line = Text("≠ " if hit else "  ", style="bold yellow" if hit else "")
        line.append(escape(value.path), style="bold yellow" if hit else "bold")
        line.append(" ")
        shown = value.text if len(value.text) <= VALUE_CHARS else value.text[:VALUE_CHARS] + "…"
        line.append(escape(shown), style="black on yellow" if hit else "")
        lines += wrap(line, width)
    return lines


MARKS: dict[Mark, tuple[str, str]] = {
    Mark.VERIFIED: ("✓ verified", "bold green"),
    Mark.DIFFERS: ("≠ differs", "bold white on red"),
    Mark.UNVERIFIABLE: ("? unverifiable", "dim"),
}
"""The label and style of each value mark (the engine decides the mark; the pane shows it)."""

VALUE_CHARS = 400
"""Characters of one value the pane shows; ``v`` opens the event's values whole."""

_MARK_ORDER = {Mark.DIFFERS: 0, Mark.VERIFIED: 1, Mark.UNVERIFIABLE: 2}


class ValuesIndex:
    """The result's values of one event, differing ones first, found by bisection.

    Values given as a tuple are listed in event order, so the index is one list of event
    indices (built once, ~30 ms per million values); each lookup bisects and sorts a
    handful. The engine's (a ``ValueList``) derive one event's values on request.
    """

    __slots__ = ("_derived", "_keys", "_values")

    def __init__(self, values: Sequence[Value]) -> None:
        # The engine's values are derived per event when read: no index to build.
        self._derived = values if isinstance(values, ValueList) else None
        if self._derived is not None:
            self._values: Sequence[Value] = ()
            self._keys: list[int] = []
            return
        keys = [v.event_index for v in values]
        if any(a > b for a, b in pairwise(keys)):
            values = sorted(values, key=lambda v: v.event_index)
            keys = [v.event_index for v in values]
        self._values = values
        self._keys = keys

    def get(self, index: int, default: Sequence[Value] = ()) -> list[Value]:
        """The values of event ``index`` (differing first), or ``default`` as a list."""
        if self._derived is not None:
            found: Sequence[Value] = self._derived.for_event(index)
        else:
            lo = bisect_left(self._keys, index)
            hi = bisect_right(self._keys, index, lo)
            found = self._values[lo:hi]
        if not found:
            return list(default)
        return sorted(found, key=lambda v: _MARK_ORDER[v.mark])

    def search_texts(self, index: int) -> list[str]:
        """The path and the text of each of event ``index``'s values (what ``/`` searches).

        The engine's are derived for the search alone (``ValueList.search_texts``): no
        digests, no ``Value``, and the detail pane's kept events stay as they are.
        """
        if self._derived is not None:
            return self._derived.search_texts(index)
        return [text for v in self.get(index) for text in (v.path, v.text)]

    def search_rows(self) -> Iterator[tuple[TraceEvent, list[str]]] | None:
        """Each replayed event with its ``search_texts``, in one pass, when the values are
        the engine's (``ReplayValues.search_rows``); None otherwise."""
        rows = getattr(self._derived, "search_rows", None)
        return None if rows is None else cast("Iterator[tuple[TraceEvent, list[str]]]", rows())


def values_by_event(result: ReplayResult) -> ValuesIndex:
    """The result's values, looked up by event index (see ``ValuesIndex``)."""
    return ValuesIndex(result.values)


def _append_value(line: Text, shown: str, limit: int | None) -> None:
    if limit is not None and len(shown) > limit:
        line.append(escape(shown[:limit]))
        line.append(f"… {len(shown) - limit} more (v: whole)", style="dim")
    else:
        line.append(escape(shown))


NOT_JUDGED_MARK = ("~ not judged", "bold yellow")
"""A committed memory that differs from the trace for a reason replay names (a later
snapshot): its writes are judged instead, so it is no alarm."""


def value_line(
    value: Value,
    *,
    limit: int | None = VALUE_CHARS,
    traced: Value | None = None,
    not_judged: bool = False,
) -> Text:
    """One value: its mark, its path, the value (literal, cut to ``limit``), the traced digest;
    with ``traced`` (production's value, proved by a reference run) that value beside it.

    ``not_judged``: the value is a memory replay does not judge (``unjudged_memory``)."""
    label, style = NOT_JUDGED_MARK if not_judged else MARKS[value.mark]
    line = Text()
    line.append(label.ljust(14), style=style)
    line.append(" ")
    line.append(escape(value.path), style="bold")
    line.append(" ")
    _append_value(line, value.text, limit)
    if traced is not None and value.mark is not Mark.VERIFIED:
        line.append("   traced ", style="bold")
        _append_value(line, traced.text, limit)
        line.append(" ✓", style=MARKS[Mark.VERIFIED][1])
    elif value.mark is Mark.DIFFERS and value.traced_digest:
        line.append(f"   traced {escape(value.traced_digest)}", style="dim")
    return line


def reference_value_line(traced: Value, *, limit: int | None = VALUE_CHARS) -> Text:
    """A value production had (proved by the reference run) where the re-run has none."""
    line = Text()
    line.append("✓ traced".ljust(14), style=MARKS[Mark.VERIFIED][1])
    line.append(" ")
    line.append(escape(traced.path), style="bold")
    line.append(" ")
    _append_value(line, traced.text, limit)
    line.append("   replayed (none)", style="dim")
    return line


def values_lines(
    values: Sequence[Value],
    width: int,
    *,
    what_if: bool = False,
    reference: ReferenceRun | None = None,
    index: int | None = None,
    result: ReplayResult | None = None,
) -> list[Text]:
    """The replayed event's values, each with its mark (and, with a ``reference`` run,
    production's value beside each that is not verified); empty when it has none.

    ``result``: the replay they come from, to tell a memory it does not judge."""
    theirs: dict[str, Value] = {}
    if reference is not None and index is not None:
        theirs = {path: v for (at, path), v in reference.values.items() if at == index}
    if not values and not theirs:
        return []
    head = Text("Values", style="bold underline")
    head.append(
        "  the re-run's; a what-if has nothing to check them against"
        if what_if
        else "  the re-run's, checked against the traced digests",
        style="dim",
    )
    if theirs:
        head.append("; traced: the reference run's, proved by the trace's digests", style="dim")
    lines = wrap(head, width)
    for value in values:
        why = result.memory_not_judged if result and unjudged_memory(result, value) else None
        traced = theirs.pop(value.path, None)
        lines += wrap(value_line(value, traced=traced, not_judged=why is not None), width)
        if why is not None:
            lines += wrap(Text(f"  not judged: {escape(why)}", style="yellow"), width)
    for _path, traced_value in sorted(theirs.items()):
        lines += wrap(reference_value_line(traced_value), width)
    lines.append(Text())
    return lines


def detail_lines(
    result: ReplayResult,
    pair: EventPair,
    width: int,
    values: Sequence[Value] | None = None,
) -> list[Text]:
    """Everything the detail pane shows for ``pair``, laid out in ``width`` cells.

    ``values`` are the pair's values (``values_by_event``); None looks them up.
    """
    what_if = result.verdict is Verdict.WHAT_IF
    if values is None:
        values = list(event_values(result.values, pair.index))
    lines = wrap(_title(pair, what_if=what_if), width)
    # The values first: they say what changed; the digests and the diff below say where.
    lines += values_lines(
        values,
        width,
        what_if=what_if,
        reference=result.reference,
        index=pair.index,
        result=result,
    )
    div = result.first_divergence
    miss = result.cache_miss
    if div is not None and div.index == pair.index:
        lines += divergence_lines(div, width)
        lines.append(Text())
    if miss is not None and miss.event_index == pair.index:
        lines += miss_lines(miss, width)
        lines += miss_request_lines(result, miss, width)
        lines.append(Text())
    elif pair.differs and div is not None and div.index != pair.index:
        note = Text(
            f"The verdict is judged at the first divergence (event {div.index}); "
            "later differences follow from it.",
            style="dim",
        )
        lines += wrap(note, width)
    lines += recording_lines(result, pair.index, width, what_if=what_if)
    rows = detail_rows(pair)
    if what_if:
        return lines + replayed_lines(rows, width)
    return lines + fields_lines(rows, width)


def recording_lines(result: ReplayResult, index: int, width: int, *, what_if: bool) -> list[Text]:
    """For a recorded tool call served from the tool cache: which recording, and how old it is
    at the re-run's clock (a what-if's is an answer the pipeline would fetch anew)."""
    recording = next((r for r in result.served_recordings if r.event_index == index), None)
    if recording is None:
        return []
    line = Text("Recorded answer  ", style="bold")
    line.append(escape(recording_age(recording)))
    lines = wrap(line, width)
    if what_if:
        note = Text(
            "  a what-if: the pipeline would call this service anew; this is the answer "
            "recorded then, not what it would answer now",
            style="bold cyan",
        )
        lines += wrap(note, width)
    lines.append(Text())
    return lines


def replayed_lines(rows: list[DetailRow], width: int) -> list[Text]:
    """A what-if has no traced side: the replayed values alone, one column."""
    label_w = _label_width(rows, width)
    widths = (label_w, max(8, width - label_w - 1))
    lines = columns([Text("field", style="bold"), Text("replayed", style="bold")], widths)
    for row in rows:
        lines += columns([_label(row), Text(row.replayed)], widths)
    return lines
