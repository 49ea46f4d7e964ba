"""Canonical JSON: one byte string per JSON value, on every machine.

Used for working memory, the adapter snapshot, tool arguments and digests, so
that the same value always gives the same bytes (invariant 4). Keys sorted,
no insignificant white space, UTF-8, NaN and infinities refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

JsonValue = Any  # None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]

MAX_JSON_DEPTH = 256
"""The deepest nesting of arrays and objects a JSON value may have, written or read.

One limit for the writer (``check_json_value``), the blob loaders
(``migrations.parse_json_object``) and the replay views, so what the pipeline
writes always loads and always renders. Python's own JSON decoder stops near
1,000 levels, and only when the stack allows it; this limit is well inside."""


def check_json_value(value: object, path: str = "", *, _depth: int = 0) -> str | None:
    """Return why ``value`` is not a JSON value (naming the path), or None if it is one."""
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if _depth >= MAX_JSON_DEPTH and isinstance(value, (list, tuple, Mapping)):
        return f"{path or 'value'} is nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path or 'value'} is {value!r}, not finite"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            why = check_json_value(item, f"{path}[{i}]", _depth=_depth + 1)
            if why:
                return why
        return None
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{path or 'value'} has a non-string key {k!r}"
            why = check_json_value(item, f"{path}[{k!r}]", _depth=_depth + 1)
            if why:
                return why
        return None
    return f"{path or 'value'} is a {type(value).__name__}, not a JSON value"


# One encoder for every call: json.dumps with non-default settings builds a new one each time.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def dumps(value: JsonValue) -> bytes:
    """Serialize a JSON value canonically; raises ValueError/TypeError on a non-JSON value."""
    return _ENCODER.encode(value).encode("utf-8")


def loads(data: bytes) -> JsonValue:
    """Parse JSON bytes (canonical or not)."""
    return json.loads(data.decode("utf-8"))
