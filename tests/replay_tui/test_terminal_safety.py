"""The TUI's last net (``replay_tui.terminal_safety``): raw input text never reaches the terminal.

A widget given a hostile string that did not pass the escaper still writes no raw
control, bidi or invisible character: the terminal output Textual would write (its
compositor's full update, as the driver gets it) is checked byte by byte.
"""

from __future__ import annotations

from rich.text import Text
from terminal_output import assert_terminal_safe, terminal_output
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from replay_tui.terminal_safety import install, installed

RAW = "clip\x1b]52;c;ZXZpbA==\x07 \u202eevil\u2066 \x9b2J bell\x07 tag\U000e0041 zwsp\u200b end"


class _Raw(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(Text(RAW), id="static")
        yield DataTable(id="table")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("raw")
        table.add_row(Text(RAW))


async def test_raw_text_in_a_widget_reaches_the_terminal_neutralized() -> None:
    install()
    assert installed()
    app = _Raw()
    async with app.run_test(size=(120, 10)) as pilot:
        await pilot.pause()
        out = terminal_output(app)
        assert "clip" in out and "evil" in out and "end" in out
        assert_terminal_safe(out)
        assert "\ufffd" in out  # where the raw characters were
