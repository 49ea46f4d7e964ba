"""Trace events as plain data: for ``--json``, for the field-by-field diff, and one-line values.

Bytes are lowercase hex; the kind is its name; each attribute keeps its type
(``{"type": "int", "value": 7}``) so that ``"7"`` and ``7`` stay different
things, as they are in the comparison. Non-finite doubles, which JSON cannot
hold, are the strings ``"nan"``, ``"inf"`` and ``"-inf"``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from beam_agents._protos import AttributeValue, TraceEvent
from beam_agents.trace_events import kind_name

__all__ = ["ABSENT", "attribute_to_dict", "attribute_value_text", "event_to_dict"]

ABSENT = "(absent)"
"""How a field or attribute one side does not have is shown."""

_TYPE_NAMES = {
    "string_value": "string",
    "int_value": "int",
    "bool_value": "bool",
    "double_value": "double",
    "bytes_value": "bytes",
}


def _json_double(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def attribute_to_dict(value: AttributeValue) -> dict[str, Any]:
    """``{"type": ..., "value": ...}`` for one attribute (type ``unset`` for an empty oneof)."""
    which = value.WhichOneof("value")
    if which is None:
        return {"type": "unset", "value": None}
    raw = getattr(value, which)
    if which == "bytes_value":
        shown: Any = raw.hex()
    elif which == "double_value":
        shown = _json_double(raw)
    else:
        shown = raw
    return {"type": _TYPE_NAMES[which], "value": shown}


def event_to_dict(event: TraceEvent) -> dict[str, Any]:
    """Every field of ``event`` as JSON-able data, attributes sorted by name."""
    return {
        "entity_key": event.entity_key.hex(),
        "seq": event.seq,
        "index": event.index,
        "kind": kind_name(event.kind),
        "name": event.name,
        "start_ms": event.start_ms,
        "end_ms": event.end_ms,
        "attributes": {
            name: attribute_to_dict(event.attributes[name]) for name in sorted(event.attributes)
        },
        "trace_id": event.trace_id.hex(),
        "span_id": event.span_id.hex(),
        "parent_span_id": event.parent_span_id.hex(),
    }


def attribute_value_text(value: AttributeValue | None) -> str:
    """One attribute as text: strings quoted, bytes as ``hex:…``, ABSENT for None."""
    if value is None:
        return ABSENT
    data = attribute_to_dict(value)
    kind, shown = data["type"], data["value"]
    if kind == "unset":
        return "(set, no value)"
    if kind == "string":
        return json.dumps(shown, ensure_ascii=True)
    if kind == "bool":
        return "true" if shown else "false"
    if kind == "bytes":
        return f"hex:{shown}"
    if kind == "double":
        return str(shown) if isinstance(shown, str) else repr(shown)
    return str(shown)
