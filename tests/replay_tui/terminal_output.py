"""What the TUI writes to the terminal, and the check that nothing in it came from an input raw."""

from __future__ import annotations

import re
import unicodedata

from textual.app import App

from beam_agents.replay.reporting.escape import UNSAFE_CATEGORIES

# Textual's own sequences: CSI (colours, cursor moves, modes) and OSC 8 hyperlinks it adds.
_TEXTUAL_SEQUENCES = re.compile(r"\x1b\[[0-9;?:<=>]*[ -/]*[@-~]|\x1b\]8;[^\x1b\x07]*(?:\x1b\\|\x07)")


def terminal_output(app: App[object]) -> str:
    """The bytes (as text) Textual's driver would get to paint the whole screen now."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(app.console)


def assert_terminal_safe(output: str) -> None:
    """Nothing but Textual's own escape sequences, line feeds and printable text."""
    text = _TEXTUAL_SEQUENCES.sub("", output)
    bad = sorted(
        {
            f"U+{ord(c):04X}"
            for c in text
            if c != "\n" and unicodedata.category(c) in UNSAFE_CATEGORIES
        }
    )
    assert not bad, f"raw characters reached the terminal: {bad[:20]}"
