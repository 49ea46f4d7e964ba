"""The words every surface uses for a verdict, a key and a moment: one label set.

The headless report, ``ls``, the Markdown report and the TUI name a verdict, show
an entity key and print an activation clock the same way; each surface only styles
them (the TUI in colour, Markdown in code spans).
"""

from __future__ import annotations

from datetime import UTC, datetime

from beam_agents.replay.reporting.escape import is_safe
from beam_agents.replay.result import ReplayResult, StopCause, Verdict

__all__ = ["VERDICT_TITLES", "duration", "key_label", "key_text", "not_judged", "utc_time"]

VERDICT_TITLES: dict[Verdict, str] = {
    Verdict.REPRODUCED: "REPRODUCED",
    Verdict.WHAT_IF: "WHAT-IF",
    Verdict.FORK: "FORK (a counterfactual, not a reproduction)",
    Verdict.DIVERGED: "DIVERGED",
    Verdict.IRREPRODUCIBLE: "IRREPRODUCIBLE",
    Verdict.USAGE_ERROR: "ERROR",
}
"""A verdict as a title (the TUI's banner, the Markdown report's heading)."""


def not_judged(result: ReplayResult) -> str:
    """What the verdict did not judge, for its line (``not judged: read 'notes', which seq 9
    rewrote``); empty for a verdict that judged what it says. So a replay that only matched
    because it read something other than the original can never read as a plain verdict."""
    if result.stop is not StopCause.MEMORY_UNSEEN or not result.unseen_reads:
        return ""
    first = result.unseen_reads[0]
    more = len(result.unseen_reads) - 1
    return f"not judged: {first.text}" + (f" (and {more} more)" if more else "")


def duration(ms: int) -> str:
    """A span of milliseconds as ``2 h 05 min``, ``3 min 20 s``, ``4.2 s`` or ``35 ms``
    (negative: ``-`` before it)."""
    if ms < 0:
        return "-" + duration(-ms)
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    hours, minutes = seconds // 3600, (seconds % 3600) // 60
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24:02d} h"


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
