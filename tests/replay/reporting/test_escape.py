"""The one escaper: every control, format, bidi, tag, invisible or surrogate character shown."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hostile_text import CLASSES, EVERY_HOSTILE, SAFE, assert_no_hostile, visible_escape

from beam_agents.replay.reporting.escape import UNSAFE_CATEGORIES, escape, escape_bytes, is_safe


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_is_shown_as_a_visible_escape(name: str) -> None:
    for char in CLASSES[name]:
        shown = escape(f"a{char}b")
        assert shown == f"a{visible_escape(char)}b", (name, f"U+{ord(char):04X}", shown)


def test_every_code_point_of_an_unsafe_category_is_escaped() -> None:
    unsafe = "".join(
        chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) in UNSAFE_CATEGORIES
    )
    shown = escape(unsafe)
    assert_no_hostile(shown, allow_newlines=False)
    assert shown.isascii()


def test_newlines_kept_only_when_multiline() -> None:
    assert escape("a\nb\x1b") == "a\\nb\\x1b"
    assert escape("a\nb\x1b", multiline=True) == "a\nb\\x1b"
    assert escape("a\r\n", multiline=True) == "a\\r\n"


def test_ordinary_text_passes_unchanged() -> None:
    assert escape(SAFE) == SAFE
    assert is_safe(SAFE)
    assert not is_safe("a\u202eb")
    # No-break and ideographic spaces are visible spacing, not hidden characters.
    assert escape("a\u00a0b\u3000c") == "a\u00a0b\u3000c"


def test_bytes_invalid_utf8_and_escapes() -> None:
    assert escape_bytes(b"ok\xff\x1b[2J") == "ok\\xff\\x1b[2J"
    assert escape_bytes("\u202e".encode()) == "\\u202e"


def test_escaped_text_of_everything_hostile_is_ascii() -> None:
    shown = escape(EVERY_HOSTILE)
    assert shown.isascii()
    assert_no_hostile(shown, allow_newlines=False)


def test_cli_usage_error_shows_a_hostile_path_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    from beam_agents.cli import main

    code = main(["convert-bq", "/nonexistent/\x1b]0;owned\x07\u202e.json"])
    err = capsys.readouterr().err
    assert code == 2
    assert "\x1b" not in err and "\u202e" not in err
    assert "\\x1b]0;owned\\x07\\u202e" in err
