"""One event's values, whole: every value the detail pane cuts, one key (``v``) away.

A value can be megabytes (a model's answer, a tool's result, an output). Laying all of
it out at once froze the TUI for 30–60 s and the keys pressed meanwhile were lost. So
the screen shows the head of each value (``HEAD_CHARS``) and loads the rest on demand,
``MORE_CHARS`` at a time (``m``, or scrolling past the end of what is loaded); only the
lines on screen are rendered (``LinesPane``), and loading more lays out only the lines
that are new. Every value whole, exact, is in the JSON file ``e`` writes (docs/tui.md,
"A giant value").
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen

from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import ReplayResult, Value
from replay_tui.render.detail import MARKS
from replay_tui.render.layout import fold
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import VerdictBanner
from replay_tui.widgets.lines_pane import LinesPane

__all__ = ["HEAD_CHARS", "MORE_CHARS", "ValueBody", "ValuesScreen"]

HEAD_CHARS = 16_384
"""Characters of each value laid out when the screen opens."""

MORE_CHARS = 65_536
"""Characters more that one ``m`` (or scrolling past the end) loads of a cut value."""


def _value_heading(value: Value) -> Text:
    label, style = MARKS[value.mark]
    line = Text()
    line.append(label, style=style)
    line.append(f"  {escape(value.path)}", style="bold")
    if value.digest:
        line.append(f"  sha256 {escape(value.digest)}", style="dim")
    if value.traced_digest and value.traced_digest != value.digest:
        line.append(f"  traced {escape(value.traced_digest)}", style="dim")
    return line


def _title(index: int, values: list[Value]) -> Text:
    return Text(
        f"event {index}: {len(values)} value{'s' if len(values) != 1 else ''}", style="bold"
    )


class ValueBody:
    """One value's text, laid out up to ``shown`` characters at one width.

    The lines laid out so far are kept when more is loaded (those before the last line
    feed, and the full-width lines of a long line of printable ASCII, which more text
    cannot change): only the part after them is escaped and folded again.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.shown = min(len(text), HEAD_CHARS)
        self._width = -1
        self._done: list[Text] = []
        """The lines of ``text[:_done_upto]``."""
        self._done_upto = 0
        self._mid_line = False
        """``_done_upto`` is inside a line (after full-width lines), not after a line feed."""

    @property
    def cut(self) -> bool:
        """Part of the value is not loaded yet."""
        return self.shown < len(self.text)

    def more(self) -> None:
        """Load the next ``MORE_CHARS`` characters."""
        self.shown = min(len(self.text), self.shown + MORE_CHARS)

    def lines(self, width: int) -> list[Text]:
        if width != self._width:
            self._width, self._done, self._done_upto, self._mid_line = width, [], 0, False
        last_break = self.text.rfind("\n", self._done_upto, self.shown)
        if last_break >= 0:
            self._keep(self.text[self._done_upto : last_break])
            self._done_upto, self._mid_line = last_break + 1, False
        tail = self.text[self._done_upto : self.shown]
        whole = len(tail) // width * width
        if whole and tail[:whole].isascii() and tail[:whole].isprintable():
            # One cell per character and nothing to escape: its full-width lines are final.
            self._keep(tail[:whole])
            self._done_upto, self._mid_line, tail = self._done_upto + whole, True, tail[whole:]
        ends_line = self._done_upto and not self._mid_line  # after a line feed: a line
        return [*self._done, *(self._fold(tail) if tail or ends_line else [])]

    def _keep(self, part: str) -> None:
        if part or not self._mid_line:  # an empty rest of a line is no line of its own
            self._done.extend(self._fold(part))

    def _fold(self, part: str) -> list[Text]:
        return fold(Text(escape(part, multiline=True)), self._width)


class ValuesScreen(Screen[None]):
    """The selected event's values in full (the detail pane cuts long ones): the head of
    each at once, the rest on demand."""

    FOOTER_FIRST = ("app.pop_screen", "more")
    """Back, then More, come right after q and ? in the footer (``KeysFooter``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,v", "app.pop_screen", "Back"),
        Binding("m", "more", "More"),
    ]

    DEFAULT_CSS = """
    ValuesScreen #values {
        height: 1fr;
    }
    """

    def __init__(self, result: ReplayResult, index: int, values: list[Value]) -> None:
        super().__init__()
        self.result = result
        self.index = index
        self.values = values
        self.bodies = [ValueBody(value.text) for value in values]
        self._spans: list[tuple[int, int]] = []
        """Per value, the lines its block takes in the pane (first, past its last)."""

    def compose(self) -> ComposeResult:
        yield VerdictBanner(self.result, id="verdict")
        yield LinesPane(id="values")
        yield KeysFooter()

    def on_mount(self) -> None:
        pane = self.query_one("#values", LinesPane)
        pane.set_content(self._build)
        pane.focus()

    def _build(self, width: int) -> list[Text]:
        lines = [_title(self.index, self.values), Text()]
        if not self.values:
            lines.append(Text("The re-run captured no value for this event.", style="dim"))
        spans = []
        for value, body in zip(self.values, self.bodies, strict=True):
            first = len(lines)
            lines.extend(fold(_value_heading(value), width))
            lines.extend(body.lines(width))
            if body.cut:
                left = len(body.text) - body.shown
                lines.append(
                    Text(
                        f"… {left:,} more characters of {len(body.text):,} not loaded: m "
                        f"(or scrolling on) loads the next {MORE_CHARS:,}",
                        style="bold yellow",
                    )
                )
            spans.append((first, len(lines)))
            lines.append(Text())
        self._spans = spans
        return lines

    def action_more(self) -> None:
        """Load more of the cut value at (or after) the top of the pane; else the last
        cut one above it."""
        pane = self.query_one("#values", LinesPane)
        top = int(pane.scroll_offset.y)
        cut = [i for i, body in enumerate(self.bodies) if body.cut]
        if not cut:
            self.notify("Every value is loaded whole.", timeout=3)
            return
        spans = self._spans  # empty until the pane first laid the values out
        below = [i for i in cut if i >= len(spans) or spans[i][1] > top]
        chosen = below[0] if below else cut[-1]
        self.bodies[chosen].more()
        pane.refresh_content()

    def on_lines_pane_scrolled_to_end(self, message: LinesPane.ScrolledToEnd) -> None:
        """Scrolling past the end of what is loaded loads more of the last cut value."""
        if self.bodies and self.bodies[-1].cut:
            self.bodies[-1].more()
            self.query_one("#values", LinesPane).refresh_content()
