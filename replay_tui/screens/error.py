"""The error screen: a usage error (or an engine crash) said plainly, never a traceback."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from beam_agents.replay.result import ReplayResult
from replay_tui.render.header import header_lines, verdict_banner
from replay_tui.render.literal import literal_text
from replay_tui.widgets.footer import KeysFooter

USAGE_EXIT_CODE = 2


class ErrorScreen(Screen[None]):
    """What went wrong, the full message, and that ``q`` exits with code 2."""

    def __init__(
        self, *, result: ReplayResult | None = None, crash: tuple[str, str] | None = None
    ) -> None:
        super().__init__()
        self.result = result
        self.crash = crash

    def compose(self) -> ComposeResult:
        if self.result is not None:
            yield Static(verdict_banner(self.result), id="verdict", classes="-usage_error")
        else:
            banner = Text(" ERROR ", style="bold white on magenta")
            banner.append(f"  exit {USAGE_EXIT_CODE}  ", style="bold")
            banner.append("the replay engine raised instead of returning a result")
            yield Static(banner, id="verdict", classes="-usage_error")
        with VerticalScroll(id="error-body"):
            yield Static(self._message(), id="error-message")
            if self.result is not None:
                yield Static(Text("\n").join(header_lines(self.result.header)), id="error-header")
            yield Static(
                Text(f"Press q to quit (exit code {USAGE_EXIT_CODE}).", style="bold"),
                id="error-hint",
            )
        yield KeysFooter()

    def _message(self) -> Text:
        text = Text()
        if self.crash is not None:
            error_type, message = self.crash
            text.append(literal_text(error_type, "bold red"))
            text.append("\n")
            text.append(literal_text(message, multiline=True))
            text.append(
                "\n\nThis is a bug in beam-agents-replay or below it, not a verdict on the activation.",
                style="dim",
            )
            return text
        assert self.result is not None
        text.append(
            literal_text(self.result.error or self.result.reason or "(no message)", multiline=True)
        )
        return text
