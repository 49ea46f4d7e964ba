"""The layout of every ``--json`` document: one field per line, one array element per line.

``json.JSONEncoder(indent=2)`` is the standard library's pure-Python encoder (its C
encoder has no indentation before Python 3.14): a 100,000-event replay spent most of its
28.8 s there. Here each top-level field, and each element of the long arrays, is
encoded by the C encoder (``json.dumps`` without ``indent``) on a line of its own:

    {
      "schema": "beam-agents-replay/1",
      "verdict": "reproduced",
      "events": [
        {"index": 0, "differs": false, ...},
        {"index": 1, "differs": false, ...}
      ],
      ...
    }

The same data as before, the same ASCII-only text (every non-ASCII character as a
``\\u`` escape, so no control character or bidi override reaches a terminal that shows
it), one trailing newline; an element's line is something ``grep`` finds and
``json.loads`` reads. The long arrays are iterated once, element by element, so the
document is never held whole.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, TextIO

__all__ = ["dumps_line", "write_document"]

_ENCODE = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(", ", ": ")).encode


def dumps_line(value: Any) -> str:
    """``value`` as JSON on one line (the C encoder; ASCII; NaN refused)."""
    return _ENCODE(value)


def write_document(
    out: TextIO,
    document: Mapping[str, Any],
    *,
    streamed: Collection[str] = (),
    chunk_chars: int = 1 << 16,
) -> None:
    """Write ``document`` to ``out``: a field per line, each element of the ``streamed``
    fields (iterables, read once) on a line of its own. Writes in chunks of about
    ``chunk_chars``."""
    buffer: list[str] = ["{\n"]
    size = 0
    fields = list(document.items())
    for number, (name, value) in enumerate(fields):
        comma = "," if number < len(fields) - 1 else ""
        head = f"  {_ENCODE(name)}: "
        if name not in streamed:
            buffer.append(f"{head}{_ENCODE(value)}{comma}\n")
            continue
        items: Iterable[Any] = value
        first = True
        for item in items:
            buffer.append(f"{head}[\n    {_ENCODE(item)}" if first else f",\n    {_ENCODE(item)}")
            first = False
            size += len(buffer[-1])
            if size >= chunk_chars:
                out.write("".join(buffer))
                buffer.clear()
                size = 0
        buffer.append(f"{head}[]{comma}\n" if first else f"\n  ]{comma}\n")
    buffer.append("}\n")
    out.write("".join(buffer))
