"""The comparison of replayed trace events with traced ones: normalize two attributes, diff the rest.

The seed page's rule, exactly: on ``LLM_CALL`` events, ``beam_agents.cache_hit``
and ``beam_agents.billed`` are normalized on both sides (a replay is served
from the cache where the original may have reached the provider); every other
field of every event is compared as-is, in order. The list is closed: widening
it would let a real difference pass as "reproduced", so it is a frozen module
constant pinned by a test.

The digests of outputs and memory on ``ACTIVATION_END``
(``beam_agents.outputs.sha256``, ``beam_agents.memory_sha256``,
``beam_agents.memory_writes_sha256``) are not part of this byte comparison: replay
starts from a snapshot's post-image, so whether they can be compared at all
depends on the pre-state and on what the re-run read;
``beam_agents.replay.judging.end_check`` judges them and the engine adds its
finding. A trace written before they existed has none (``untraced_end``).

Finding the first difference is a byte comparison of the two events'
deterministic serializations (after normalization), which also catches fields
this version does not know. Only the event where they first differ is rendered
field by field, and only then is DeepDiff imported (it is slow to import and
to run on large inputs; INFRA).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from beam_agents._protos import TraceEvent
from beam_agents.event_log import EventLog
from beam_agents.replay.result import (
    Divergence,
    DivergenceKind,
    EventPair,
    EventPairs,
    FieldDiff,
)
from beam_agents.trace_data import attribute_value_text, event_to_dict
from beam_agents.trace_events import (
    ATTR_BILLED,
    ATTR_CACHE_HIT,
    END_DIGEST_ATTRIBUTES,
    END_JUDGED_ATTRIBUTES,
    kind_name,
    serialize_trace_event,
)
from beam_agents.trace_view import attribute_path

__all__ = [
    "NORMALIZED_ATTRIBUTES",
    "EventComparison",
    "attribute_path",
    "compare_events",
    "describe_divergence",
    "field_differences",
    "normalize",
    "normalized_paths",
    "untraced_end",
    "without_end_digests",
]

NORMALIZED_ATTRIBUTES = frozenset({ATTR_CACHE_HIT, ATTR_BILLED})
"""The only attributes normalized before comparison, and only on ``LLM_CALL`` events. Closed."""

_NORMALIZED_VALUES: Mapping[str, bool] = MappingProxyType(
    {ATTR_CACHE_HIT: True, ATTR_BILLED: False}
)
"""What each normalized attribute is set to on both sides: served from the cache, not billed."""

if frozenset(_NORMALIZED_VALUES) != NORMALIZED_ATTRIBUTES:  # pragma: no cover - a coding error
    raise ImportError("compare: _NORMALIZED_VALUES must name exactly NORMALIZED_ATTRIBUTES")

_SCALAR_FIELDS = ("entity_key", "seq", "index", "kind", "name", "start_ms", "end_ms")
_ID_FIELDS = ("trace_id", "span_id", "parent_span_id")


def normalize(event: TraceEvent) -> TraceEvent:
    """``event`` with the normalized attributes set (a copy), or ``event`` itself if none applies.

    Only an attribute the event has is normalized: one side having
    ``cache_hit`` and the other not is still a difference.
    """
    if event.kind != TraceEvent.LLM_CALL or not any(
        name in event.attributes for name in NORMALIZED_ATTRIBUTES
    ):
        return event
    copy = TraceEvent()
    copy.CopyFrom(event)
    for name, value in _NORMALIZED_VALUES.items():
        if name in copy.attributes:
            copy.attributes[name].bool_value = value
    return copy


def normalized_paths(traced: TraceEvent, replayed: TraceEvent) -> list[str]:
    """The normalized attributes whose raw values differ between the two events.

    Those are shown as they were traced and replayed, marked normalized, never as a
    difference; every other attribute is compared as is.
    """
    if TraceEvent.LLM_CALL not in (traced.kind, replayed.kind):
        return []
    paths = []
    for name in sorted(NORMALIZED_ATTRIBUTES):
        lv = traced.attributes.get(name, None)
        rv = replayed.attributes.get(name, None)
        if lv is not None and rv is not None and lv != rv:
            paths.append(attribute_path(name))
    return paths


def untraced_end(event: TraceEvent | None) -> bool:
    """Whether ``event`` is an ACTIVATION_END traced before outputs and memory were digested."""
    return (
        event is not None
        and event.kind == TraceEvent.ACTIVATION_END
        and not any(name in event.attributes for name in END_DIGEST_ATTRIBUTES)
    )


def without_end_digests(event: TraceEvent) -> TraceEvent:
    """``event`` without the output, memory and memory-writes digests (a copy), or itself if
    it has none."""
    if event.kind != TraceEvent.ACTIVATION_END or not any(
        name in event.attributes for name in END_JUDGED_ATTRIBUTES
    ):
        return event
    copy = TraceEvent()
    copy.CopyFrom(event)
    for name in END_JUDGED_ATTRIBUTES:
        if name in copy.attributes:
            del copy.attributes[name]
    return copy


def _pair_for_comparison(traced: TraceEvent, replayed: TraceEvent) -> tuple[TraceEvent, TraceEvent]:
    """Both events normalized, an ACTIVATION_END's output and memory digests left out."""
    return without_end_digests(normalize(traced)), without_end_digests(normalize(replayed))


def _field_text(event: TraceEvent, field: str) -> str:
    value = getattr(event, field)
    if field == "kind":
        return kind_name(value)
    if isinstance(value, bytes):
        return value.hex() or '""'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    return str(value)


def field_differences(traced: TraceEvent, replayed: TraceEvent) -> list[FieldDiff]:
    """Every field in which two events differ after normalization, in a stable order.

    Fields first (``entity_key`` … ``end_ms``), then attributes by name
    (``attributes['…']``), then the span ids. If the serializations differ but
    no known field does (a field this version does not know), one row named
    ``(serialized bytes)`` says so: a difference is never dropped.
    """
    left, right = _pair_for_comparison(traced, replayed)
    rows: list[FieldDiff] = []
    for field in _SCALAR_FIELDS:
        if getattr(left, field) != getattr(right, field):
            rows.append(
                FieldDiff(
                    path=field, traced=_field_text(left, field), replayed=_field_text(right, field)
                )
            )
    for name in sorted(set(left.attributes) | set(right.attributes)):
        lv = left.attributes.get(name, None)
        rv = right.attributes.get(name, None)
        if (
            lv is None
            or rv is None
            or lv.SerializeToString(deterministic=True) != rv.SerializeToString(deterministic=True)
        ):
            rows.append(
                FieldDiff(
                    path=attribute_path(name),
                    traced=attribute_value_text(lv),
                    replayed=attribute_value_text(rv),
                )
            )
    for field in _ID_FIELDS:
        if getattr(left, field) != getattr(right, field):
            rows.append(
                FieldDiff(
                    path=field, traced=_field_text(left, field), replayed=_field_text(right, field)
                )
            )
    if not rows and serialize_trace_event(left) != serialize_trace_event(right):
        rows.append(
            FieldDiff(
                path="(serialized bytes)",
                traced=f"{len(serialize_trace_event(left))} bytes",
                replayed=f"{len(serialize_trace_event(right))} bytes (fields this version does not know)",
            )
        )
    return rows


@dataclass(frozen=True)
class EventComparison:
    """The traced and replayed events side by side, and where they first differ."""

    pairs: EventPairs
    first_difference: int | None
    """Index of the first pair that differs (a missing or extra event included), or None."""


def _raw(events: Sequence[TraceEvent], index: int) -> bytes:
    if isinstance(events, EventLog):
        return events.raw(index)
    return serialize_trace_event(events[index])


def compare_events(traced: Sequence[TraceEvent], replayed: Sequence[TraceEvent]) -> EventComparison:
    """Pair the events by position and mark every pair that differs after normalization.

    Args:
        traced: The activation's traced events, ``index`` 0, 1, … in order.
        replayed: The re-run's events, in order.

    Returns:
        One pair per position up to the longer list; a position only one side
        has is a difference (missing or extra). The pairs are positions into
        ``traced`` and ``replayed`` (``EventPairs``), which they keep as given.
    """
    differing: dict[int, tuple[str, ...]] = {}
    normalized: dict[int, tuple[str, ...]] = {}
    for i in range(min(len(traced), len(replayed))):
        if _raw(traced, i) == _raw(replayed, i):
            continue  # the same bytes: nothing differs, nothing was normalized
        t, r = traced[i], replayed[i]
        left, right = _pair_for_comparison(t, r)
        fields: tuple[str, ...] = ()
        if serialize_trace_event(left) != serialize_trace_event(right):
            fields = tuple(row.path for row in field_differences(t, r))
            differing[i] = fields
        shown = tuple(p for p in normalized_paths(t, r) if p not in fields)
        if shown:
            normalized[i] = shown
    pairs = EventPairs(traced, replayed, differing=differing, normalized=normalized)
    positions = pairs.differing_positions()
    return EventComparison(pairs=pairs, first_difference=positions[0] if positions else None)


def _lines(data: Mapping[str, Any], indent: str = "  ") -> list[str]:
    out: list[str] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and key == "attributes":
            out.append(f"{indent}attributes:")
            for name, attr in value.items():
                out.append(f"{indent}  {name}: {attr['type']} {attr['value']!r}")
        else:
            out.append(f"{indent}{key}: {value!r}")
    return out


def _rows_detail(rows: Sequence[FieldDiff]) -> str:
    """The field rows as text: what the DeepDiff rendering says, less prettily."""
    return "\n".join(f"{row.path}: traced {row.traced}, replayed {row.replayed}" for row in rows)


def _deepdiff_detail(traced: TraceEvent, replayed: TraceEvent, rows: Sequence[FieldDiff]) -> str:
    normalized = _pair_for_comparison(traced, replayed)
    left = event_to_dict(normalized[0])
    right = event_to_dict(normalized[1])
    try:
        from deepdiff import DeepDiff
    except ImportError:  # a stripped install: the field rows say the same, less prettily
        return _rows_detail(rows)
    pretty = DeepDiff(left, right, verbose_level=2).pretty()
    return "traced → replayed (root is the event):\n" + (pretty or "(no field differs)")


def describe_divergence(pair: EventPair, *, detail: bool = True) -> Divergence:
    """The structured diff of one differing pair (the first divergence), with a DeepDiff
    rendering (``detail`` False: the field rows as text; DeepDiff is not imported)."""
    if pair.traced is None and pair.replayed is not None:
        ev = pair.replayed
        return Divergence(
            index=pair.index,
            kind=kind_name(ev.kind),
            name=ev.name,
            fields=(),
            how=DivergenceKind.EXTRA,
            detail="\n".join(
                [
                    "the re-run produced this event; the trace ends before it:",
                    *_lines(event_to_dict(ev)),
                ]
            ),
        )
    if pair.replayed is None and pair.traced is not None:
        ev = pair.traced
        return Divergence(
            index=pair.index,
            kind=kind_name(ev.kind),
            name=ev.name,
            fields=(),
            how=DivergenceKind.MISSING,
            detail="\n".join(
                [
                    "the trace has this event; the re-run ended before it:",
                    *_lines(event_to_dict(ev)),
                ]
            ),
        )
    assert pair.traced is not None and pair.replayed is not None
    rows = field_differences(pair.traced, pair.replayed)
    return Divergence(
        index=pair.index,
        kind=kind_name(pair.traced.kind),
        name=pair.traced.name,
        fields=tuple(rows),
        detail=_deepdiff_detail(pair.traced, pair.replayed, rows) if detail else _rows_detail(rows),
    )
