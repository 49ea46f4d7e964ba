"""A scrollable pane of ready-made lines, laid out for its own width.

The detail and step panes are rebuilt on every keypress. Handing Textual a
Rich renderable of changing height would re-measure it several times and lay
the whole screen out again; this pane asks its builder for lines at its width
(again only when the width changes), sets its virtual size, and renders only
the visible lines. The screen's layout never changes.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip


def text_strip(text: Text, console: Console, width: int | None = None) -> Strip:
    """One line of ``text`` as a ``Strip`` whose every segment has a style.

    ``Text.render`` ends with an unstyled newline segment; Textual's monochrome
    filter (``NO_COLOR``) reads ``segment.style.color`` and crashed on it.
    """
    null = Style.null()
    segments = [
        Segment(seg.text, seg.style or null, seg.control)
        for seg in text.render(console, end="")
        if seg.text
    ]
    return Strip(segments, width) if width is not None else Strip(segments)

LinesBuilder = Callable[[int], list[Text]]
"""Given a width in cells, the lines to show (each at most that wide)."""


class LinesPane(ScrollView, can_focus=True):
    """Shows what its builder returns; arrows and page keys scroll it when focused."""

    DEFAULT_CSS = """
    LinesPane {
        scrollbar-gutter: stable;
    }
    """

    class ScrolledToEnd(Message):
        """The pane was scrolled down to its last line (a screen may load more)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._build: LinesBuilder | None = None
        self._lines: list[Text] = []
        self._built_width = -1
        self._strips: dict[int, Strip] = {}

    @property
    def lines(self) -> list[Text]:
        """The lines currently shown (for tests and copy)."""
        return self._lines

    def set_content(self, build: LinesBuilder) -> None:
        """Show ``build``'s lines from the top."""
        self._build = build
        self._built_width = -1
        self._relayout()
        self.scroll_to(0, 0, animate=False, immediate=True)

    def set_text(self, text: Text) -> None:
        """Show one piece of text, wrapped to the width."""
        from replay_tui.render.layout import wrap

        self.set_content(lambda width: wrap(text, width))

    def refresh_content(self) -> None:
        """Ask the builder again at the same width, keeping the scroll position (the
        builder has more to show)."""
        self._built_width = -1
        self._relayout()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value > old_value and new_value >= self.max_scroll_y > 0:
            self.post_message(self.ScrolledToEnd())

    def _relayout(self, *, resized: bool = False) -> None:
        width = self.scrollable_content_region.width
        if self._build is None or width <= 0 or width == self._built_width:
            return
        self._built_width = width
        old_height = self.virtual_size.height
        self._lines = self._build(width)
        self._strips.clear()
        size = Size(width, len(self._lines))
        viewport = self.scrollable_content_region.height
        if resized or (old_height > viewport) != (size.height > viewport):
            # The scrollbar appears or disappears: a real layout change.
            self.virtual_size = size
        else:
            # Only the scroll extent changed. Assigning virtual_size would lay the whole
            # screen out again on every keypress; update this pane's scrollbar instead.
            self.set_reactive(ScrollView.virtual_size, size)
            if self.show_vertical_scrollbar:
                self.vertical_scrollbar.window_virtual_size = size.height
                self.vertical_scrollbar.refresh()
        self.refresh()

    def on_resize(self) -> None:
        self._built_width = -1
        self._relayout(resized=True)

    def on_mount(self) -> None:
        self._relayout(resized=True)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = int(self.scroll_offset.y) + y
        strip = self._strips.get(index)
        if strip is None:
            base = self.rich_style
            if index >= len(self._lines):
                return Strip.blank(width, base)
            text = self._lines[index].copy()
            text.stylize_before(base)
            strip = text_strip(text, self.app.console).crop_extend(0, width, base)
            self._strips[index] = strip
        return strip
