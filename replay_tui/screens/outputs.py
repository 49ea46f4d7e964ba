"""Outputs: sizes and digests; a payload is shown as text or hex only when asked for."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from beam_agents.replay.result import BlobDigest, ReplayResult
from replay_tui.render.state import OUTPUT_COLUMNS, output_rows, payload_as_hex, payload_as_text
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import VerdictBanner
from replay_tui.widgets.keyed import KeyedDataTable


class OutputsScreen(Screen[None]):
    """Reported, not diffed: the outputs and the post-activation memory blob."""

    FOOTER_FIRST = ("app.pop_screen",)
    """Back comes right after q and ? in the footer (``KeysFooter``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("t", "view('text')", "View text"),
        Binding("x", "view('hex')", "View hex"),
    ]

    def __init__(self, result: ReplayResult) -> None:
        super().__init__()
        self.result = result
        self.view_mode: str | None = None

    def compose(self) -> ComposeResult:
        yield VerdictBanner(self.result, id="verdict")
        yield KeyedDataTable(id="outputs-table", cursor_type="row")
        with VerticalScroll(id="payload"):
            yield Static(
                Text("Select a row and press t for text or x for hex.", style="dim"),
                id="payload-body",
            )
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*OUTPUT_COLUMNS)
        rows = output_rows(self.result)
        table.add_rows(rows)
        if not rows:
            self.query_one("#payload-body", Static).update(
                Text("This activation produced no outputs.", style="dim")
            )
        table.focus()

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
        self.action_view(self.view_mode or "text")

    def _selected(self) -> tuple[str, BlobDigest] | None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        if row < 0 or table.row_count == 0:
            return None
        if row < len(self.result.outputs):
            return f"outputs[{row}]", self.result.outputs[row]
        if self.result.memory is not None:
            return "memory blob", self.result.memory
        return None

    def action_view(self, mode: str) -> None:
        selected = self._selected()
        body = self.query_one("#payload-body", Static)
        if selected is None:
            body.update(Text("Nothing selected.", style="dim"))
            return
        name, blob = selected
        self.view_mode = mode
        title = Text(
            f"{name} as {mode}  ·  {blob.size} bytes  ·  sha256={blob.sha256}\n", style="bold"
        )
        body.update(title + (payload_as_text(blob) if mode == "text" else payload_as_hex(blob)))
        self.query_one("#payload", VerticalScroll).scroll_home(animate=False)
