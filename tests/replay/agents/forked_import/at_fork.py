"""Registers a fork hook at import; outputs ``forked`` in a process forked after it."""

from __future__ import annotations

import os

from forked_import import OutputOnce

FORKED: list[bool] = []
os.register_at_fork(after_in_child=lambda: FORKED.append(True))


class AtFork(OutputOnce):
    def seen(self) -> bytes:
        return b"forked" if FORKED else b"fresh"


AGENT = AtFork()
