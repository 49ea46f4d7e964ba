"""One event's values, whole: every value the detail pane cuts, one key (``v``) away."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import ReplayResult, Value
from replay_tui.render.detail import MARKS
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import VerdictBanner


def whole_values_text(index: int, values: list[Value]) -> Text:
    """Every value of event ``index`` whole, literal (escapes shown), line breaks kept."""
    text = Text(
        f"event {index}: {len(values)} value{'s' if len(values) != 1 else ''}\n\n", style="bold"
    )
    if not values:
        text.append("The re-run captured no value for this event.", style="dim")
    for value in values:
        label, style = MARKS[value.mark]
        text.append(label, style=style)
        text.append(f"  {escape(value.path)}", style="bold")
        if value.digest:
            text.append(f"  sha256 {escape(value.digest)}", style="dim")
        if value.traced_digest and value.traced_digest != value.digest:
            text.append(f"  traced {escape(value.traced_digest)}", style="dim")
        text.append("\n")
        text.append(escape(value.text, multiline=True))
        text.append("\n\n")
    return text


class ValuesScreen(Screen[None]):
    """The selected event's values in full (the detail pane cuts long ones)."""

    FOOTER_FIRST = ("app.pop_screen",)
    """Back comes right after q and ? in the footer (``KeysFooter``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,v", "app.pop_screen", "Back")]

    def __init__(self, result: ReplayResult, index: int, values: list[Value]) -> None:
        super().__init__()
        self.result = result
        self.index = index
        self.values = values

    def compose(self) -> ComposeResult:
        yield VerdictBanner(self.result, id="verdict")
        with VerticalScroll(id="values"):
            yield Static(whole_values_text(self.index, self.values), id="values-body")
        yield KeysFooter()
