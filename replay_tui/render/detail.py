"""The detail pane: one event, traced beside replayed, field by field.

Which fields differ is the result's word (``EventPair.differing_fields``); the
pane only lines the values up and marks those fields. On the first diverging
event it adds the result's structured diff, and on the cache-miss event the
nearest cached entry and the request components that differ.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.replay.result import CacheMiss, Divergence, EventPair, ReplayResult, Verdict
from replay_tui.render.literal import literal, literal_text

NORMALIZED_ON_LLM_CALL = (te.ATTR_CACHE_HIT, te.ATTR_BILLED)
"""The closed normalization list of the seed page: shown, never marked as a difference."""

ABSENT = "—"

HEAD_FIELDS = ("kind", "name")
TAIL_FIELDS = ("index", "seq", "entity_key", "start_ms", "end_ms", "trace_id", "span_id", "parent_span_id")
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
    """A normalized field (cache_hit/billed on LLM_CALL) whose raw values differ."""


def _format(value: object) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, bytes):
        return value.hex() or '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return literal(value) if value else '""'
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
    is_llm = any(
        ev is not None and ev.kind == TraceEvent.LLM_CALL for ev in (pair.traced, pair.replayed)
    )
    for name in sorted(traced_attrs.keys() | replayed_attrs.keys()):
        path = f"attributes['{name}']"
        traced_value = _format(traced_attrs.get(name))
        replayed_value = _format(replayed_attrs.get(name))
        differs = path in differing or name in differing
        normalized = (
            is_llm
            and name in NORMALIZED_ON_LLM_CALL
            and not differs
            and traced_value != replayed_value
            and pair.traced is not None
            and pair.replayed is not None
        )
        rows.append(
            DetailRow(
                field=path,
                label=literal(name),
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
        title.append("  extra: the re-run produced an event the trace does not have", style="bold red")
    elif pair.replayed is None:
        title.append("  missing: the re-run stopped before this traced event", style="bold red")
    elif pair.differs:
        title.append("  differs", style="bold red")
    else:
        title.append("  same", style="green")
    return title


STACK_BELOW_WIDTH = 64
"""Narrower than this, fields are stacked (name, then values) instead of three columns."""


class FieldsTable:
    """``detail_rows`` laid out for the width it is given: aligned columns, or stacked when narrow."""

    def __init__(self, rows: list[DetailRow]) -> None:
        self.rows = rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width < STACK_BELOW_WIDTH:
            yield self._stacked()
        else:
            yield self._columns(options.max_width)

    @staticmethod
    def _mark(row: DetailRow) -> tuple[Text, str]:
        if row.differs:
            return Text("≠", style="bold red"), "bold red"
        if row.normalized:
            return Text("≈", style="cyan"), "cyan"
        return Text(" "), ""

    def _label(self, row: DetailRow) -> Text:
        label = Text(row.label, style="bold")
        if row.normalized:
            label.append(" (normalized)", style="dim cyan")
        return label

    def _columns(self, width: int) -> Table:
        table = Table(box=None, expand=True, pad_edge=False, show_edge=False, padding=(0, 1))
        table.add_column("", width=1, no_wrap=True)
        table.add_column("field", max_width=max(12, min(34, width // 3)), overflow="fold")
        table.add_column("traced", ratio=1, overflow="fold")
        table.add_column("replayed", ratio=1, overflow="fold")
        for row in self.rows:
            mark, style = self._mark(row)
            table.add_row(mark, self._label(row), Text(row.traced, style=style), Text(row.replayed, style=style))
        return table

    def _stacked(self) -> Text:
        text = Text()
        for row in self.rows:
            mark, style = self._mark(row)
            if text:
                text.append("\n")
            text.append(mark)
            text.append(" ")
            text.append(self._label(row))
            if row.traced == row.replayed and not row.differs:
                text.append("  ")
                text.append(row.traced, style=style or "")
            else:
                text.append("\n    traced    ", style="dim")
                text.append(row.traced, style=style)
                text.append("\n    replayed  ", style="dim")
                text.append(row.replayed, style=style)
        return text


def fields_table(rows: list[DetailRow]) -> FieldsTable:
    """The aligned traced/replayed view of ``detail_rows``."""
    return FieldsTable(rows)


def divergence_section(divergence: Divergence) -> list[RenderableType]:
    """The result's structured diff of the first diverging event."""
    head = Text("First divergence", style="bold white on red")
    what = f"  event {divergence.index} {literal(divergence.kind)} {literal(divergence.name)}"
    if divergence.missing:
        what += " — the re-run did not produce this event"
    if divergence.extra:
        what += " — the re-run produced an event the trace does not have"
    head.append(what, style="bold")
    parts: list[RenderableType] = [head]
    for diff in divergence.fields:
        # Stacked, not tabled: a path and two 64-digit digests do not fit side by side.
        lines = Text()
        lines.append("≠ ", style="bold red")
        lines.append(literal(diff.path), style="bold")
        lines.append("\n    traced    ", style="dim")
        lines.append(literal(diff.traced), style="red")
        lines.append("\n    replayed  ", style="dim")
        lines.append(literal(diff.replayed), style="green")
        parts.append(lines)
    if divergence.detail:
        parts.append(literal_text(divergence.detail, "dim", multiline=True))
    return parts


def miss_section(miss: CacheMiss) -> list[RenderableType]:
    """The cache miss: the key, why it missed, and the nearest cached entry."""
    head = Text("Cache miss", style="bold black on yellow")
    head.append(f"  status {literal(miss.status)}", style="bold")
    lines = Text()
    lines.append("key      ", style="bold")
    lines.append(literal(miss.cache_key))
    lines.append("\nmodel    ", style="bold")
    lines.append(literal(miss.model))
    if miss.traced_cache_key is not None:
        lines.append("\ntraced   ", style="bold")
        lines.append(literal(miss.traced_cache_key))
        if miss.traced_cache_key == miss.cache_key:
            lines.append("  (same key)", style="dim")
        else:
            lines.append("  (the traced call used another key)", style="yellow")
    if miss.nearest is None:
        lines.append("\nnearest  ", style="bold")
        lines.append("no cached entry resembles this request", style="dim")
    else:
        lines.append("\nnearest  ", style="bold")
        lines.append(literal(miss.nearest.cache_key))
        lines.append(f"  model {literal(miss.nearest.model)}", style="dim")
        lines.append("\ndiffers  ", style="bold")
        lines.append(
            ", ".join(literal(d) for d in miss.nearest.differences) or "nothing recorded",
            style="bold yellow",
        )
    return [head, lines]


def render_detail(result: ReplayResult, pair: EventPair) -> RenderableType:
    """Everything the detail pane shows for ``pair``."""
    what_if = result.verdict is Verdict.WHAT_IF
    parts: list[RenderableType] = [_title(pair, what_if=what_if)]
    div = result.first_divergence
    miss = result.cache_miss
    if div is not None and div.index == pair.index:
        parts += divergence_section(div)
        parts.append(Text(""))
    if miss is not None and miss.event_index == pair.index:
        parts += miss_section(miss)
        parts.append(Text(""))
    elif pair.differs and div is not None and div.index != pair.index:
        parts.append(
            Text(
                f"The verdict is judged at the first divergence (event {div.index}); "
                "later differences follow from it.",
                style="dim",
            )
        )
    rows = detail_rows(pair)
    if what_if:
        rows = [replace(row, differs=False) for row in rows]
    parts.append(fields_table(rows))
    return Group(*parts)
