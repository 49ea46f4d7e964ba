"""The words every surface uses for a verdict, a key and a moment: one label set.

The headless report, ``ls``, the Markdown report and the TUI name a verdict, show
an entity key and print an activation clock the same way; each surface only styles
them (the TUI in colour, Markdown in code spans).
"""

from __future__ import annotations

from datetime import UTC, datetime

from beam_agents.replay.reporting.escape import is_safe
from beam_agents.replay.result import Verdict

__all__ = ["VERDICT_TITLES", "key_label", "key_text", "utc_time"]

VERDICT_TITLES: dict[Verdict, str] = {
    Verdict.REPRODUCED: "REPRODUCED",
    Verdict.WHAT_IF: "WHAT-IF",
    Verdict.DIVERGED: "DIVERGED",
    Verdict.IRREPRODUCIBLE: "IRREPRODUCIBLE",
    Verdict.USAGE_ERROR: "ERROR",
}
"""A verdict as a title (the TUI's banner, the Markdown report's heading)."""


def key_text(entity_key: bytes) -> str | None:
    """The entity key as text when it is valid UTF-8 made of printable characters that
    need no escape, else None (a key is always shown as its hex; this is the extra)."""
    try:
        text = entity_key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or not text.isprintable() or not is_safe(text):
        return None
    return text


def key_label(entity_key: bytes) -> str:
    """The key's hex, and its text in parentheses when it has one (``key_text``)."""
    text = key_text(entity_key)
    return entity_key.hex() if text is None else f"{entity_key.hex()} ({text})"


def utc_time(ms: int) -> str:
    """Epoch milliseconds as ``2024-12-12 10:40:00.000 UTC`` (or a note when out of range)."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return "out of range"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"
