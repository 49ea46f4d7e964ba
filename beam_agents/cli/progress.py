"""Progress on standard error for a command that takes more than a second.

``ls`` over a gigabyte of traces and ``check`` over many bundles used to say nothing
until they were done. A ``Progress`` shows, on a terminal only and only once the work
has run for ``DELAY_S``, one line it rewrites in place (``ls: 1,234,567 trace events
read, 12 s``) at most ``UPDATES_PER_S`` times a second, and erases it when the work ends,
so nothing of it stays in the output. Standard error that is not a terminal (a log, a
pipe, CI) gets nothing: a script reads the same output with or without it.
``BEAM_AGENTS_REPLAY_PROGRESS=1`` shows it anyway (``0``: never).
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["DELAY_S", "PROGRESS_ENV", "Progress"]

DELAY_S = 1.0
UPDATES_PER_S = 4
PROGRESS_ENV = "BEAM_AGENTS_REPLAY_PROGRESS"


def _wanted(stream: TextIO) -> bool:
    forced = os.environ.get(PROGRESS_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A counter's progress line for ``command``: call it with the count so far."""

    def __init__(self, command: str, what: str, stream: TextIO | None = None) -> None:
        self.command = command
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _wanted(self.stream)
        self.started = time.monotonic()
        self._next = self.started + DELAY_S
        self.shown = False
        """A line is on the terminal (``clear`` erases it)."""

    def __call__(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1 / UPDATES_PER_S
        line = f"{self.command}: {done:,} {self.what}, {now - self.started:.0f} s"
        try:
            self.stream.write(f"\r\x1b[K{line}")
            self.stream.flush()
        except OSError:
            self.enabled = False
            return
        self.shown = True

    def clear(self) -> None:
        """Erase the line (before anything else is written to the terminal)."""
        if self.shown:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except OSError:
                pass
            self.shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.clear()
