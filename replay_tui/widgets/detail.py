"""The detail pane: the selected event, traced vs replayed, differing fields marked."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from beam_agents.replay.result import ReplayResult
from replay_tui.render.detail import render_detail


class DetailPane(VerticalScroll, can_focus=True):
    """Scrollable; re-rendered from pure functions whenever the selection changes."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.result = result
        self.position: int | None = None
        self.border_title = "detail"

    def compose(self) -> ComposeResult:
        yield Static(id="detail-body")

    def show(self, position: int | None) -> None:
        """Show the pair at row ``position`` (None: nothing selected)."""
        self.position = position
        body = self.query_one("#detail-body", Static)
        if position is None or not self.result.events:
            body.update("No event selected." if self.result.events else "This result has no events.")
            return
        pair = self.result.events[position]
        body.update(render_detail(self.result, pair))
        self.border_title = f"detail · event {pair.index}"
        self.scroll_home(animate=False)
