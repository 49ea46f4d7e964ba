"""Literal rendering: no input string can style, move or clear the terminal."""

from __future__ import annotations

import pytest

from replay_tui.render.literal import (
    clip,
    duration,
    key_hex,
    key_printable,
    literal,
    literal_bytes,
    literal_text,
    utc_time,
)


def test_escape_and_controls_become_visible_escapes() -> None:
    assert literal("\x1b[2J") == "\\x1b[2J"
    assert literal("a\x00b\x07c\x7f\x9b") == "a\\x00b\\x07c\\x7f\\x9b"
    assert literal("line\nnext\ttab\rret") == "line\\nnext\\ttab\\rret"


def test_bidi_and_invisible_formatting_characters_are_escaped() -> None:
    assert literal("abc\u202eevil\u2066\u200b\ufeff") == "abc\\u202eevil\\u2066\\u200b\\ufeff"


def test_multiline_keeps_line_feeds_but_escapes_the_rest() -> None:
    assert literal("a\nb\x1b[1m\r", multiline=True) == "a\nb\\x1b[1m\\r"


def test_printable_text_and_markup_pass_through_unchanged() -> None:
    assert literal("[bold red]x[/] ünïcødé ✓") == "[bold red]x[/] ünïcødé ✓"


def test_literal_text_is_never_parsed_as_markup() -> None:
    text = literal_text("[bold red]x[/]\x1b[2J")
    assert text.plain == "[bold red]x[/]\\x1b[2J"
    assert not text.spans


def test_invalid_utf8_bytes_show_as_hex_escapes() -> None:
    assert literal_bytes(b"ok\xff\x1b") == "ok\\xff\\x1b"


@pytest.mark.parametrize(
    ("key", "printable"),
    [
        (b"customer-42", "customer-42"),
        (b"\x00\x01binary", None),
        (b"\xff\xfe", None),
        (b"esc\x1b[2J", None),
        (b"", None),
    ],
)
def test_key_is_shown_as_text_only_when_printable(key: bytes, printable: str | None) -> None:
    assert key_printable(key) == printable
    assert key_hex(key) == key.hex()


def test_utc_time_of_the_seed_clock() -> None:
    assert utc_time(1_734_000_000_000) == "2024-12-12 10:40:00.000 UTC"
    assert utc_time(10**20) == "out of range"


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
