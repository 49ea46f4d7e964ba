"""Shown while the replay runs in its thread: a spinner, the inputs, the time spent."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Center, Vertical
from textual.screen import Screen
from textual.widgets import LoadingIndicator, Static

from beam_agents.replay.reporting.escape import escape
from replay_tui.widgets.footer import KeysFooter


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

    def on_mount(self) -> None:
        self._tick()
        self._clock = self.set_interval(0.1, self._tick)

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
        self.query_one("#loading-elapsed", Static).update(
            Text(f"{elapsed:.1f} s  ·  offline, network blocked  ·  q quits", style="dim")
        )
