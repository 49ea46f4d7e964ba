"""The step pane: the activation as it stood after the selected event, both sides."""

from __future__ import annotations

from rich.text import Text
from textual import work

from beam_agents.replay.result import ReplayResult
from replay_tui.messages import StepPictureReady
from replay_tui.render.step import StepIndex, StepPicture, step_lines
from replay_tui.widgets.lines_pane import LinesPane

SYNC_EXTEND_ROWS = 4096
"""Reading up to this many new rows happens inline (well under a frame); more goes to a worker."""


class StepPane(LinesPane):
    """Asks ``StepIndex`` for a picture; far jumps on huge activations index in a thread."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = StepIndex(result.events)
        self.forked = result.fork is not None
        self.position: int | None = None
        self.border_title = "step"

    def show(self, position: int | None) -> None:
        """Picture the activation after row ``position``."""
        self.position = position
        if position is None or not len(self.index):
            self.set_text(Text("Nothing to step through.", style="dim"))
            return
        self.border_title = f"step · after event {position}"
        if position < self.index.built or (
            position - self.index.built < SYNC_EXTEND_ROWS and self.index.try_extend_to(position)
        ):
            self._show_picture(self.index.picture(position))
            return
        self.set_text(Text(f"indexing events up to {position}…", style="dim"))
        self._extend_in_background(position)

    def _show_picture(self, picture: StepPicture) -> None:
        self.set_content(lambda width: step_lines(picture, width, forked=self.forked))

    @work(thread=True, exclusive=True, group="step-index")
    def _extend_in_background(self, position: int) -> None:
        self.index.extend_to(position)
        self.post_message(StepPictureReady(position))

    def on_step_picture_ready(self, message: StepPictureReady) -> None:
        message.stop()
        if self.position is not None and self.position < self.index.built:
            self.show(self.position)
