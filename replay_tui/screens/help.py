"""``?``: every key of the app, by screen (a test checks this list against the bindings)."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "everywhere",
        (
            (
                "q ctrl+q ctrl+c",
                "quit; the exit code is the verdict's (0 reproduced/what-if, 1 diverged, 2 error, 3 irreproducible)",
            ),
            ("?", "this help"),
            (
                "s",
                "state: memory tree, replay cache, pending intents, continuation, versions, tool cache",
            ),
            ("i", "intents ledger: staged/released, traced vs replayed"),
            ("o", "outputs: sizes and digests; payloads as text or hex"),
            ("e", "export the report (Markdown and JSON) and say where"),
            ("[ ]", "previous / next activation of the same key (a bundle's, or the traced ones)"),
            ("ctrl+p", "command palette: every action by name"),
            ("escape", "back to the timeline (from state, intents, outputs, help)"),
        ),
    ),
    (
        "timeline",
        (
            ("↓ j / ↑ k", "next / previous event"),
            ("pgdn / pgup", "a page down / up"),
            ("home g / end G", "first / last event"),
            ("space →", "step mode: advance one event (rows not yet reached are dimmed)"),
            ("←", "step mode: go back one event"),
            ("n / N", "next / previous differing or cache-missed row"),
            ("d", "jump to the first divergence (or the cache miss)"),
            (
                "/",
                "search the values (and names) for a text, jump to the next match (enter again: the one after)",
            ),
            ("f", "filter rows by text, or by kind with kind:LLM (enter applies, empty clears)"),
            ("v", "the selected event's values, whole (the detail pane cuts long ones)"),
            ("escape", "leave step mode, then clear the filter"),
            ("c", "copy the selected event (traced and replayed, JSON) via OSC 52"),
            ("tab", "move focus: timeline, detail, step"),
            ("mouse", "click a row to select it; wheel scrolls"),
        ),
    ),
    (
        "tables and trees (state, intents, outputs)",
        (
            ("↓ j / ↑ k", "next / previous row"),
            ("g / G", "first / last row"),
        ),
    ),
    (
        "state",
        (
            ("1 2 3 4 5 6", "memory, cache, pending, continuation, versions, tool cache tabs"),
            ("enter / space", "open or close a memory tree node"),
        ),
    ),
    (
        "values (v)",
        (
            ("m", "load the next part of a long value (scrolling past the end does too)"),
            ("escape v", "back to the main screen"),
        ),
    ),
    (
        "outputs",
        (
            ("t / enter", "show the selected payload as text (controls escaped)"),
            ("x", "show the selected payload as a hex dump"),
        ),
    ),
    (
        "help",
        (
            ("↓ j / ↑ k", "scroll down / up"),
            ("g / G", "top / bottom"),
            ("escape ? enter", "close this help"),
        ),
    ),
)


SEQ_KEYS = "[ ]"
"""The row of ``HELP`` that is left out when there is no other activation to switch to."""


KEY_COLUMN_WIDTH = max(len(key) for _, keys in HELP for key, _ in keys)
"""The key column is as wide as the longest key, never as a section's title."""


def help_table(*, seq_switching: bool = True) -> Group:
    """All of ``HELP``: each section's title on a line of its own above its table of keys
    (a title in the key column made it 45 of 80 columns wide); without ``[ ]`` when they
    do nothing (the footer hides them then too)."""
    parts: list[Text | Table] = []
    for section, keys in HELP:
        parts.append(Text(section, style="bold underline"))
        table = Table(box=None, expand=True, padding=(0, 2, 0, 0), show_header=False)
        table.add_column("key", style="bold cyan", no_wrap=True, width=KEY_COLUMN_WIDTH)
        table.add_column("what it does", ratio=1)
        for key, what in keys:
            if key == SEQ_KEYS and not seq_switching:
                continue
            table.add_row(Text(key), Text(what))
        parts.append(table)
        parts.append(Text(""))
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """A modal over the current screen; any of escape, ? or enter closes it."""

    # A modal screen sees none of the app's keys: the ones this help lists as "everywhere"
    # are bound again here (q quit from the help only after it was closed).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "app.quit", "Quit"),
        Binding("escape,question_mark,enter", "app.pop_screen", "Close"),
        Binding("s", "app.show('state')", "State", show=False),
        Binding("i", "app.show('intents')", "Intents", show=False),
        Binding("o", "app.show('outputs')", "Outputs", show=False),
        Binding("e", "app.export", "Export", show=False),
        Binding("left_square_bracket", "app.switch_seq(-1)", "Prev seq", show=False),
        Binding("right_square_bracket", "app.switch_seq(1)", "Next seq", show=False),
        Binding("down,j", "scroll('down')", "Down", show=False),
        Binding("up,k", "scroll('up')", "Up", show=False),
        Binding("g", "scroll('home')", "Top", show=False),
        Binding("G", "scroll('end')", "Bottom", show=False),
    ]

    def __init__(self, *, seq_switching: bool = True) -> None:
        super().__init__()
        self.seq_switching = seq_switching
        """``[`` / ``]`` switch activations here (else the help leaves them out)."""

    def action_scroll(self, where: str) -> None:
        box = self.query_one("#help-box", VerticalScroll)
        {
            "down": box.scroll_down,
            "up": box.scroll_up,
            "home": box.scroll_home,
            "end": box.scroll_end,
        }[where](animate=False)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(Text("beam-agents-replay tui — keys", style="bold"), id="help-title")
            yield Static(help_table(seq_switching=self.seq_switching))
