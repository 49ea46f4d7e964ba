"""``NO_COLOR``: grey levels that stay readable.

Under ``NO_COLOR`` Textual turns every colour into the grey of its luminance
(``textual.filter.Monochrome``). A colour that carries meaning by its hue alone lands
wherever its luminance puts it: the timeline's magenta ``STAGED`` and ``RELEASED``
became grey 237 on the background's 234, text nobody can read. ``ReadableMonochrome``
does the same conversion, then lifts (or darkens) any foreground whose contrast with
its background falls under ``MIN_CONTRAST`` (the WCAG ratio for body text) to the
nearest grey that reaches it. What colour meant is said by the text itself (marks,
words), so nothing is lost with the hue.
"""

from __future__ import annotations

from functools import lru_cache

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.filter import LineFilter

__all__ = ["MIN_CONTRAST", "ReadableMonochrome", "contrast_ratio"]

MIN_CONTRAST = 4.5
"""WCAG 2's minimum contrast ratio for normal text (AA)."""


def _luminance(grey: int) -> float:
    channel = grey / 255
    linear = channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4
    return linear


def contrast_ratio(a: int, b: int) -> float:
    """WCAG contrast ratio of two grey levels (0-255): 1 (none) to 21 (black on white)."""
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _grey(color: RichColor) -> int:
    return Color.from_rich_color(color).monochrome.r


@lru_cache(256)
def _readable(fore: int, back: int) -> int:
    """``fore``, or the grey nearest to it that reaches ``MIN_CONTRAST`` against ``back``."""
    if contrast_ratio(fore, back) >= MIN_CONTRAST:
        return fore
    lighter = [g for g in range(fore, 256) if contrast_ratio(g, back) >= MIN_CONTRAST]
    darker = [g for g in range(fore, -1, -1) if contrast_ratio(g, back) >= MIN_CONTRAST]
    choices = lighter[:1] + darker[:1]
    return min(choices, key=lambda g: abs(g - fore)) if choices else (255 if back < 128 else 0)


@lru_cache(1024)
def _style(style: Style, background: int) -> Style:
    fore = None if style.color is None else _grey(style.color)
    back = background if style.bgcolor is None else _grey(style.bgcolor)
    color = None
    if fore is not None:
        fore = _readable(fore, back)
        color = RichColor.from_rgb(fore, fore, fore)
    bgcolor = None if style.bgcolor is None else RichColor.from_rgb(back, back, back)
    return style + Style.from_color(color, bgcolor)


class ReadableMonochrome(LineFilter):
    """Textual's ``Monochrome``, with every foreground readable on its background."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        back = background.monochrome.r
        return [
            Segment(text, None if style is None else _style(style, back), None)
            for text, style, _ in segments
        ]
