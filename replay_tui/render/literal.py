"""Literal text: every string that came from the inputs, made safe to put on a terminal.

Keys, names, memory values, payloads and error messages are data, never
presentation. Two things could turn data into presentation: Rich markup
(``[bold red]x[/]`` in a string Rich parses) and terminal control characters
(``\\x1b[2J`` clears the screen, ``\\u202e`` reverses the text around it). The TUI
therefore builds ``rich.text.Text`` objects (never markup strings) from strings
passed through the one escaper of every surface
(:func:`beam_agents.replay.reporting.escape.escape`, called by that name everywhere):
every control, format, bidi, tag or invisible character and every lone surrogate
becomes a visible escape such as ``\\x1b``.
"""

from __future__ import annotations

from rich.text import Text

from beam_agents.replay.reporting.escape import escape

ELLIPSIS = "…"


def literal_text(value: str, style: str = "", *, multiline: bool = False) -> Text:
    """A Rich ``Text`` holding ``escape(value)``: never parsed as markup."""
    return Text(escape(value, multiline=multiline), style=style)


def clip(value: str, width: int) -> str:
    """``value`` cut to ``width`` cells, ending in an ellipsis when cut."""
    if width <= 0:
        return ""
    if len(value) <= width:
        return value
    return value[: width - 1] + ELLIPSIS


def duration(ms: int) -> str:
    """A signed duration in the largest sensible units: ``2h 05m``, ``3m 12s``, ``850ms``."""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    seconds, _ = divmod(ms, 1000)
    if seconds < 60:
        return f"{sign}{ms / 1000:.1f}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{sign}{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{sign}{days}d {hours:02d}h"
