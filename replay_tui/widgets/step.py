"""The step pane: the activation as it stood after the selected event, both sides."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from beam_agents.replay.result import ReplayResult
from replay_tui.messages import StepPictureReady
from replay_tui.render.step import StepIndex, render_step

SYNC_EXTEND_ROWS = 4096
"""Reading up to this many new rows happens inline (well under a frame); more goes to a worker."""


class StepPane(VerticalScroll, can_focus=True):
    """Asks ``StepIndex`` for a picture; far jumps on huge activations index in a thread."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = StepIndex(result.events)
        self.position: int | None = None
        self.border_title = "step"

    def compose(self) -> ComposeResult:
        yield Static(id="step-body")

    def show(self, position: int | None) -> None:
        """Picture the activation after row ``position``."""
        self.position = position
        body = self.query_one("#step-body", Static)
        if position is None or not len(self.index):
            body.update("Nothing to step through.")
            return
        self.border_title = f"step · after event {position}"
        if position < self.index.built or (
            position - self.index.built < SYNC_EXTEND_ROWS and self.index.try_extend_to(position)
        ):
            body.update(render_step(self.index.picture(position)))
            return
        body.update(f"indexing events up to {position}…")
        self._extend_in_background(position)

    @work(thread=True, exclusive=True, group="step-index")
    def _extend_in_background(self, position: int) -> None:
        self.index.extend_to(position)
        self.post_message(StepPictureReady(position))

    def on_step_picture_ready(self, message: StepPictureReady) -> None:
        message.stop()
        if self.position is not None and self.position < self.index.built:
            self.show(self.position)
