"""The detail pane: the selected event, traced vs replayed, differing fields marked."""

from __future__ import annotations

from rich.text import Text

from beam_agents.replay.result import ReplayResult
from replay_tui.render.detail import detail_lines, values_by_event
from replay_tui.widgets.lines_pane import LinesPane


class DetailPane(LinesPane):
    """Re-laid out from pure functions whenever the selection changes."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.result = result
        self.position: int | None = None
        self.border_title = "detail"
        self.values = values_by_event(result)

    def show(self, position: int | None) -> None:
        """Show the pair at row ``position`` (None: nothing selected)."""
        self.position = position
        if position is None or not self.result.events:
            message = "No event selected." if self.result.events else "This result has no events."
            self.set_text(Text(message, style="dim"))
            return
        pair = self.result.events[position]
        self.border_title = f"detail · event {pair.index}"
        values = self.values.get(pair.index, [])
        self.set_content(lambda width: detail_lines(self.result, pair, width, values))
