"""Every class of code point the one escaper must show visibly, for the tests of each surface."""

from __future__ import annotations

import unicodedata

from beam_agents.replay.reporting.escape import UNSAFE_CATEGORIES

CLASSES: dict[str, tuple[str, ...]] = {
    "C0 controls": tuple(chr(c) for c in range(0x00, 0x20)),
    "ESC sequence (clear screen, retitle)": ("\x1b",),
    "DEL": ("\x7f",),
    "C1 controls (incl. CSI 0x9b)": tuple(chr(c) for c in range(0x80, 0xA0)),
    "bidi embeddings/overrides U+202A-E": tuple(chr(c) for c in range(0x202A, 0x202F)),
    "bidi isolates U+2066-9": tuple(chr(c) for c in range(0x2066, 0x206A)),
    "bidi marks U+200E/F, U+061C": ("\u200e", "\u200f", "\u061c"),
    "tag characters U+E0000-E007F": tuple(chr(c) for c in range(0xE0000, 0xE0080)),
    "soft hyphen": ("\u00ad",),
    "zero-width and word joiners, BOM": ("\u200b", "\u200c", "\u200d", "\u2060", "\u2064", "\ufeff"),
    "line/paragraph separators": ("\u2028", "\u2029"),
    "lone surrogates": ("\ud800", "\udbff", "\udc00", "\udfff"),
    "private use": ("\ue000", "\uf8ff", "\U000f0000", "\U0010fffd"),
    "other format chars (Arabic, Syriac, interlinear, shorthand)": (
        "\u0600", "\u070f", "\ufff9", "\U0001bca0", "\U0001d173",
    ),
    "invisible but printable (CGJ, Hangul fillers, variation selectors)": (
        "\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\ufe00", "\U000e0100", "\U000e01ef",
    ),
}

EVERY_HOSTILE = "".join(c for chars in CLASSES.values() for c in chars)

SAFE = "plain ASCII, héllo wörld, 日本語, عربي, 👍🏽 ❤️ \\x1b (a literal backslash)"
"""Text that must pass every surface unchanged."""


def visible_escape(char: str) -> str:
    """How the escaper shows ``char``."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def is_hostile(char: str) -> bool:
    return unicodedata.category(char) in UNSAFE_CATEGORIES or char in EVERY_HOSTILE


def assert_no_hostile(text: str, *, allow_newlines: bool = True) -> None:
    """No character of any hostile class reached the surface; it still encodes as UTF-8."""
    bad = [
        f"U+{ord(c):04X}" for c in text if is_hostile(c) and not (allow_newlines and c == "\n")
    ]
    assert not bad, f"raw characters reached the surface: {bad[:20]}"
    text.encode("utf-8")
