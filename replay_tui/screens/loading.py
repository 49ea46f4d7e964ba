"""Shown while the replay runs in its thread: a spinner, the inputs, the time spent; then,
as soon as the first traced events of a named activation are read (``preview``: before the
replay has read the traces whole), those rows; and once the engine has planned the
activation, its header and every traced event in the timeline (the replayed side says it
is replaying), so a 100,000-event activation shows its rows while it is read, re-run and
judged, not after."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Center, Vertical
from textual.screen import Screen
from textual.widgets import LoadingIndicator, Static

from beam_agents._protos import TraceEvent
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import ReplayHeader
from replay_tui.render.header import header_lines, styled_key
from replay_tui.render.timeline import PreviewModel
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.timeline import Timeline

if TYPE_CHECKING:  # the preview's readers load in the replay thread, not at start-up
    from replay_tui.preview import FirstRows


def describe_options(options: Any) -> Text:
    """The replay's inputs, one per line, from whatever the options object carries."""
    text = Text()
    for name in ("snapshot", "traces", "event", "agent", "registry", "seq", "hitl"):
        value = getattr(options, name, None)
        if value is None or value == ():
            continue
        shown = ", ".join(_source(v) for v in value) if isinstance(value, tuple) else _source(value)
        text.append(f"{name:>9}  ", style="bold")
        text.append(escape(shown) + "\n")
    return text


def _source(value: Any) -> str:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return str(value)


class LoadingScreen(Screen[None]):
    """The input stays live: ``q`` quits while the replay is still running."""

    def __init__(self, options: Any) -> None:
        super().__init__()
        self.options = options
        self._started = time.monotonic()
        self._planned: tuple[ReplayHeader, Sequence[TraceEvent]] | None = None
        self._first: FirstRows | None = None
        self._first_shown: FirstRows | None = None
        self._shown: str | None = None
        """Which rows the timeline shows: None, "first" (the preview's: the replay is still
        reading the traces) or "planned" (every traced event)."""

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Static(Text("Replaying the activation…", style="bold"), id="loading-title")
            yield LoadingIndicator(id="loading-spinner")
            yield Static(id="loading-elapsed")
            with Center():
                yield Static(describe_options(self.options), id="loading-inputs")
        yield KeysFooter()

    def restart(self, options: Any) -> None:
        """Show another replay's inputs and start the clock again (switching seq)."""
        self.options = options
        self._started = time.monotonic()
        self.query_one("#loading-inputs", Static).update(describe_options(options))
        for preview in self.query(".preview"):
            preview.remove()
        self._shown = None
        self.query_one("#loading-box").display = True

    def show_first(self, rows: FirstRows) -> None:
        """The first traced events of the activation, read before the replay read the
        traces whole (kept for ``on_mount`` when they come before this screen is composed)."""
        if not self.query("#loading-box"):
            self._first = rows
            return
        self._first = None
        if self._shown == "planned" or (self._shown == "first" and rows is self._first_shown):
            return  # the plan came first (every traced event is shown), or these are shown
        self._first_shown = rows
        count = len(rows.events)
        ended = rows.events[-1].kind in (TraceEvent.ACTIVATION_END, TraceEvent.ACTIVATION_FAILED)
        what = f"{count} traced event{'' if count == 1 else 's'}"
        line = Text("key ", style="bold")
        line.append_text(styled_key(rows.entity_key))
        line.append(f"   seq {rows.seq}", style="bold")
        self._show_rows(
            line,
            rows.events,
            f"timeline · {what if ended else 'the first ' + what} · reading the traces…",
        )
        self._shown = "first"
        self._tick()

    def show_planned(self, header: ReplayHeader, traced: Sequence[TraceEvent]) -> None:
        """The activation is planned: its header and traced events, while it is re-run
        (kept for ``on_mount`` when the plan comes before this screen is composed)."""
        if not self.query("#loading-box"):
            self._planned = (header, traced)
            return
        self._planned = None
        count = len(traced)
        self._show_rows(
            Text("\n").join(header_lines(header)),
            traced,
            f"timeline · {count} traced event{'' if count == 1 else 's'} · replaying…",
        )
        self._shown = "planned"
        self._tick()

    def _show_rows(self, header: Text, traced: Sequence[TraceEvent], title: str) -> None:
        """The header line(s) and a timeline of ``traced``: mounted the first time, then
        updated in place (the plan's rows replace the first rows under the same cursor)."""
        self.query_one("#loading-box").display = False
        model = PreviewModel(traced)
        shown = self.query("#preview-timeline").results(Timeline)
        timeline = next(shown, None)
        if timeline is not None:
            self.query_one("#preview-header", Static).update(header)
            timeline.replace_model(model)
        else:
            timeline = Timeline(model, id="preview-timeline", classes="preview")
            footer = self.query_one(KeysFooter)
            self.mount(Static(header, id="preview-header", classes="preview"), before=footer)
            self.mount(Static(id="preview-status", classes="preview"), before=footer)
            self.mount(timeline, before=footer)
        timeline.border_title = title

    def on_mount(self) -> None:
        ready = getattr(self.app, "first_rows", None)  # read while Textual started up
        if ready is not None and self._first is None:
            self._first = ready
        self._tick()
        self._clock = self.set_interval(0.1, self._tick)
        if self._first is not None:
            self.show_first(self._first)
        if self._planned is not None:
            self.show_planned(*self._planned)

    # The result is pushed over this screen, which stays below it (the default screen cannot
    # be switched away): its clock and spinner kept repainting under the main screen, 25
    # frames a second to an idle terminal. Both stop while it is covered.
    def on_screen_suspend(self) -> None:
        self._clock.pause()
        self.query_one("#loading-spinner", LoadingIndicator).display = False

    def on_screen_resume(self) -> None:
        self.query_one("#loading-spinner", LoadingIndicator).display = True
        self._tick()
        self._clock.resume()

    def _tick(self) -> None:
        elapsed = time.monotonic() - self._started
        line = Text(f"{elapsed:.1f} s  ·  offline, network blocked  ·  q quits", style="dim")
        for elapsed_line in self.query("#loading-elapsed").results(Static):
            elapsed_line.update(line)
        for status in self.query("#preview-status").results(Static):
            doing = (
                "reading the traces, then re-running and judging the activation…"
                if self._shown == "first"
                else "re-running and judging the activation…"
            )
            status.update(
                Text(
                    f"{doing}  {elapsed:.1f} s  ·  offline, network blocked  ·  the traced "
                    "events so far, nothing judged yet  ·  q quits",
                    style="dim",
                )
            )
