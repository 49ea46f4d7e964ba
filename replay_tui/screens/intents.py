"""The intents ledger: what the trace says was staged and released, beside what the re-run did."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Static

from beam_agents.replay.result import ReplayResult
from replay_tui.render.state import intent_columns, intent_rows
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import VerdictBanner
from replay_tui.widgets.keyed import KeyedDataTable


class IntentsScreen(Screen[None]):
    """One row per intent; a disagreement between trace and re-run is marked ≠ in red."""

    FOOTER_FIRST = ("app.pop_screen",)
    """Back comes right after q and ? in the footer (``KeysFooter``)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, result: ReplayResult) -> None:
        super().__init__()
        self.result = result

    def compose(self) -> ComposeResult:
        yield VerdictBanner(self.result, id="verdict")
        intents = self.result.intents
        staged = sum(1 for i in intents if i.replayed_staged)
        released = sum(1 for i in intents if i.replayed_released)
        summary = Text(f"{len(intents)} intents", style="bold")
        who = "fork" if self.result.fork is not None else "re-run"
        summary.append(f"  ·  {who} staged {staged}, released {released}", style="dim")
        yield Static(summary, id="intents-summary")
        yield KeyedDataTable(id="intents-table", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*intent_columns(forked=self.result.fork is not None))
        fork = self.result.fork
        unreached = fork is not None and fork.ended_at is not None
        table.add_rows(intent_rows(self.result.intents, unreached=unreached))
        table.focus()
