"""Laying text out in a known width, cheaply: folding, columns, prose wrapping.

The detail and step panes change on every keypress. Rich's ``Table`` measures
every cell several times per render (≈12 ms for one event's fields here), and
a widget whose height changes makes Textual lay the whole screen out again.
So the panes are given their width and receive ready-made lines from these
helpers: a few string slices per line.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

_CONSOLE = Console(file=io.StringIO(), width=1000, color_system=None, legacy_windows=False)
"""Only used for ``Text.wrap``'s word wrapping (it needs a console for tab sizes)."""


def _cell_offsets(plain: str, width: int) -> list[int]:
    offsets: list[int] = []
    used = 0
    for index, char in enumerate(plain):
        size = cell_len(char)
        if used + size > width and used:
            offsets.append(index)
            used = 0
        used += size
    return offsets


def fold(text: Text, width: int) -> list[Text]:
    """``text`` cut into lines of at most ``width`` cells (at line feeds, then anywhere)."""
    width = max(1, width)
    lines: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        plain = line.plain
        if cell_len(plain) <= width:
            lines.append(line)
        elif len(plain) == cell_len(plain):
            lines.extend(line.divide(range(width, len(plain), width)))
        else:
            lines.extend(line.divide(_cell_offsets(plain, width)))
    return lines or [Text()]


def wrap(text: Text, width: int) -> list[Text]:
    """``text`` word-wrapped to ``width`` cells (long words folded), keeping its line feeds."""
    return list(text.wrap(_CONSOLE, max(1, width), overflow="fold"))


def columns(
    cells: Sequence[Text], widths: Sequence[int], *, gap: int = 1, words: bool = False
) -> list[Text]:
    """Cells side by side, each cut to its column's width, padded so columns line up.

    Cells are folded anywhere (digests, keys) unless ``words`` asks for word wrapping.
    """
    cut = wrap if words else fold
    folded = [cut(cell, width) for cell, width in zip(cells, widths, strict=True)]
    height = max(len(parts) for parts in folded)
    lines: list[Text] = []
    for row in range(height):
        line = Text(no_wrap=True)
        for column, (parts, width) in enumerate(zip(folded, widths, strict=True)):
            if column:
                line.append(" " * gap)
            part = parts[row] if row < len(parts) else Text()
            if words:
                part.rstrip()
            line.append_text(part)
            if column < len(widths) - 1:
                line.append(" " * max(0, width - part.cell_len))
        lines.append(line)
    return lines


def indent(lines: list[Text], prefix: str) -> list[Text]:
    """Each line with ``prefix`` in front of it."""
    return [Text(prefix) + line for line in lines]
