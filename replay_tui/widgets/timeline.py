"""The timeline: a virtualized Line API widget, one line per event pair.

Stock ``DataTable`` builds every row up front (12 s for 100,000 rows here);
this widget renders only the lines on screen, asking ``TimelineModel`` for
those rows, so opening and moving cost the same for 50 or 100,000 events.
Line 0 is a sticky column heading; data rows start at line 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from replay_tui.messages import EventHighlighted
from replay_tui.render.timeline import TimelineRows, index_width, render_heading, render_row
from replay_tui.widgets.lines_pane import text_strip


class Timeline(ScrollView, can_focus=True):
    """Traced vs replayed events, side by side; the cursor row is the selected event."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("home,g", "first", "First event", show=False),
        Binding("end,G", "last", "Last event", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--cursor",
        "timeline--heading",
        "timeline--future",
    }

    DEFAULT_CSS = """
    Timeline {
        background: $surface;
    }
    Timeline > .timeline--cursor {
        background: $accent 40%;
        text-style: bold;
    }
    Timeline:focus > .timeline--cursor {
        background: $accent;
        color: $text;
    }
    Timeline > .timeline--heading {
        background: $panel;
        text-style: bold;
    }
    Timeline > .timeline--future {
        text-style: dim;
    }
    """

    def __init__(
        self,
        model: TimelineRows,
        *,
        id: str | None = None,
        classes: str | None = None,
        forked: bool = False,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.model = model
        self.forked = forked
        """The right side is a fork's counterfactual: its heading says ``forked``."""
        self._positions: Sequence[int] = range(len(model))
        """Row positions shown, in order: all of them, or those the filter kept."""
        self._cursor = 0
        """Index into ``_positions``."""
        self._idx_width = index_width(len(model))
        self.step_mode = False
        """In step mode, rows after the cursor are dimmed: they have not happened yet."""
        self.first_paint_done = False
        """Set after the first data line is rendered (the open benchmark waits for it)."""

    # -- state ------------------------------------------------------------------------------

    @property
    def position(self) -> int | None:
        """The selected row position (None when the filter left no rows)."""
        if not self._positions:
            return None
        return self._positions[self._cursor]

    @property
    def shown_count(self) -> int:
        return len(self._positions)

    @property
    def filtered(self) -> bool:
        return len(self._positions) != len(self.model)

    def replace_model(self, model: TimelineRows) -> None:
        """Show ``model``'s rows instead (more of the same activation's, as the loading
        screen learns them), the cursor kept on its row where the new model has it."""
        self.model = model
        self._positions = range(len(model))
        self._cursor = min(self._cursor, max(0, len(model) - 1))
        self._idx_width = index_width(len(model))
        self._update_virtual_size()
        self.refresh()

    def set_positions(self, positions: Sequence[int] | None) -> None:
        """Show only ``positions`` (None: every row), keeping the selection when it is kept."""
        selected = self.position
        self._positions = range(len(self.model)) if positions is None else positions
        self._cursor = 0
        if selected is not None and self._positions:
            self._cursor = _nearest_index(self._positions, selected)
        self._update_virtual_size()
        self.refresh()
        self._scroll_cursor_into_view(center=True)
        self._announce()

    def select_position(self, position: int, *, center: bool = False) -> bool:
        """Move the cursor to row ``position``; False if the filter hides that row."""
        if isinstance(self._positions, range):
            if not 0 <= position < len(self._positions):
                return False
            index = position
        else:
            index = _nearest_index(self._positions, position)
            if not self._positions or self._positions[index] != position:
                return False
        self._move_cursor(index, center=center)
        return True

    def set_step_mode(self, on: bool) -> None:
        if on != self.step_mode:
            self.step_mode = on
            self.refresh()

    # -- movement ---------------------------------------------------------------------------

    def _move_cursor(self, index: int, *, center: bool = False) -> None:
        if not self._positions:
            return
        index = max(0, min(index, len(self._positions) - 1))
        old = self._cursor
        self._cursor = index
        if self.step_mode:
            self.refresh()
        else:
            self._refresh_row(old)
            self._refresh_row(index)
        self._scroll_cursor_into_view(center=center)
        if old != index or center:
            self._announce()

    def _announce(self) -> None:
        position = self.position
        if position is not None:
            self.post_message(EventHighlighted(position))

    def action_cursor_down(self) -> None:
        self._move_cursor(self._cursor + 1)

    def action_cursor_up(self) -> None:
        self._move_cursor(self._cursor - 1)

    def action_page_down(self) -> None:
        self._move_cursor(self._cursor + max(1, self._page_rows() - 1))

    def action_page_up(self) -> None:
        self._move_cursor(self._cursor - max(1, self._page_rows() - 1))

    def action_first(self) -> None:
        self._move_cursor(0)

    def action_last(self) -> None:
        self._move_cursor(len(self._positions) - 1)

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        self.focus()
        self._move_cursor(int(self.scroll_offset.y) + offset.y - 1)

    # -- scrolling --------------------------------------------------------------------------

    def _page_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _update_virtual_size(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self._positions) + 1)

    def on_resize(self) -> None:
        self._update_virtual_size()
        self._scroll_cursor_into_view()

    def on_mount(self) -> None:
        self._update_virtual_size()

    def _scroll_cursor_into_view(self, *, center: bool = False) -> None:
        page = self._page_rows()
        top = int(self.scroll_offset.y)
        if center:
            target = max(0, self._cursor - page // 2)
        elif self._cursor < top:
            target = self._cursor
        elif self._cursor >= top + page:
            target = self._cursor - page + 1
        else:
            return
        self.scroll_to(y=target, animate=False, immediate=True)

    def _refresh_row(self, index: int) -> None:
        line = index - int(self.scroll_offset.y) + 1
        if line >= 1:
            self.refresh_lines(index + 1)

    # -- rendering --------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y == 0:
            text = render_heading(width, idx_width=self._idx_width, forked=self.forked)
            text.stylize_before(self.get_component_rich_style("timeline--heading"))
            return text_strip(text, self.app.console, width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self._positions):
            return Strip.blank(width, base)
        row = self.model.row(self._positions[index])
        text = render_row(row, width, idx_width=self._idx_width)
        style: Style = base
        if index == self._cursor:
            # One colour pair for the whole cursor row: red or yellow on the cursor colour
            # is unreadable, and the detail pane shows the same marks in full.
            text = Text(text.plain, no_wrap=True)
            style = base + self.get_component_rich_style("timeline--cursor")
        elif self.step_mode and index > self._cursor:
            style = base + self.get_component_rich_style("timeline--future")
        text.stylize_before(style)
        self.first_paint_done = True
        return text_strip(text, self.app.console, width)


def _nearest_index(positions: Sequence[int], position: int) -> int:
    """The index in sorted ``positions`` of ``position``, or of the nearest row after it."""
    from bisect import bisect_left

    at = bisect_left(positions, position)
    return min(at, len(positions) - 1) if positions else 0
