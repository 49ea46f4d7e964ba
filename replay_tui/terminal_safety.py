"""The TUI's last net: no character of an input reaches the terminal raw, whatever a widget shows.

Renderers build Rich ``Text`` from ``escape``-d strings (``render.literal``), so an
input's ``\\x1b`` shows as the four characters ``\\x1b``. This net is for a string
that reached a widget without passing the escaper (a renderer's mistake, a stock
widget's own text): every segment of text Textual writes to the terminal passes
``escape.neutralize``, which replaces a control, format (bidi), invisible or
surrogate character by U+FFFD, one cell wide, so the layout holds. Textual's own
escape sequences (cursor moves, colours) are not segments' text and pass as they are.

``install()`` replaces ``textual.strip.Strip.render`` with the same function over
neutralized text; ``ReplayApp`` installs it when it is created.
tests/replay_tui/test_terminal_safety.py fails if a Textual upgrade changes what it
replaces.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from textual.strip import Strip

from beam_agents.replay.reporting.escape import neutralize

_ORIGINAL = Strip.render


def _render(self: Strip, console: Console) -> str:
    if self._render_cache is None:
        color_system = console._color_system or _truecolor()
        render = self.render_style
        self._render_cache = "".join(
            [
                text
                if control
                else neutralize(text)
                if style is None
                else render(style, neutralize(text), color_system=color_system)
                for text, style, control in self._segments
            ]
        )
    return self._render_cache


def _truecolor() -> Any:
    from rich.color import ColorSystem

    return ColorSystem.TRUECOLOR


def install() -> None:
    """Neutralize every segment of text the TUI writes to the terminal (idempotent)."""
    Strip.render = _render  # type: ignore[method-assign]


def installed() -> bool:
    return Strip.render is _render
