"""Literal rendering: no input string can style, move or clear the terminal."""

from __future__ import annotations

import pytest

from beam_agents.replay.reporting.escape import escape, escape_bytes
from replay_tui.render.literal import clip, duration, literal_text


def test_escape_and_controls_become_visible_escapes() -> None:
    assert escape("\x1b[2J") == "\\x1b[2J"
    assert escape("a\x00b\x07c\x7f\x9b") == "a\\x00b\\x07c\\x7f\\x9b"
    assert escape("line\nnext\ttab\rret") == "line\\nnext\\ttab\\rret"


def test_bidi_and_invisible_formatting_characters_are_escaped() -> None:
    assert escape("abc\u202eevil\u2066\u200b\ufeff") == "abc\\u202eevil\\u2066\\u200b\\ufeff"


def test_multiline_keeps_line_feeds_but_escapes_the_rest() -> None:
    assert escape("a\nb\x1b[1m\r", multiline=True) == "a\nb\\x1b[1m\\r"


def test_printable_text_and_markup_pass_through_unchanged() -> None:
    assert escape("[bold red]x[/] ünïcødé ✓") == "[bold red]x[/] ünïcødé ✓"


def test_literal_text_is_never_parsed_as_markup() -> None:
    text = literal_text("[bold red]x[/]\x1b[2J")
    assert text.plain == "[bold red]x[/]\\x1b[2J"
    assert not text.spans


def test_invalid_utf8_bytes_show_as_hex_escapes() -> None:
    assert escape_bytes(b"ok\xff\x1b") == "ok\\xff\\x1b"


@pytest.mark.parametrize(
    ("ms", "shown"),
    [(850, "850ms"), (12_300, "12.3s"), (192_000, "3m 12s"), (7_500_000, "2h 05m"), (-60_000, "-1m 00s"),
     (3 * 86_400_000, "3d 00h")],
)
def test_duration_units(ms: int, shown: str) -> None:
    assert duration(ms) == shown


def test_clip_marks_a_cut_with_an_ellipsis() -> None:
    assert clip("abcdef", 4) == "abc…"
    assert clip("abc", 4) == "abc"
    assert clip("abc", 0) == ""
