"""Line layout helpers: folding, word wrapping and columns, by cell width."""

from __future__ import annotations

from rich.text import Text

from replay_tui.render.layout import columns, fold, indent, wrap


def test_fold_cuts_at_line_feeds_then_at_the_width_keeping_styles() -> None:
    text = Text("abcdefgh\nij")
    text.stylize("red", 2, 4)
    lines = fold(text, 3)
    assert [line.plain for line in lines] == ["abc", "def", "gh", "ij"]
    assert lines[0].spans and lines[1].spans


def test_fold_counts_wide_characters_as_two_cells() -> None:
    assert [line.plain for line in fold(Text("日本語テキスト"), 4)] == ["日本", "語テ", "キス", "ト"]


def test_wrap_breaks_prose_at_spaces() -> None:
    assert [line.plain.rstrip() for line in wrap(Text("one two three four"), 9)] == ["one two", "three", "four"]


def test_columns_line_up_folded_cells() -> None:
    lines = columns([Text("k"), Text("abcdefgh"), Text("xy")], (2, 4, 4))
    assert [line.plain for line in lines] == ["k  abcd xy", "   efgh "]


def test_indent_prefixes_every_line() -> None:
    assert [line.plain for line in indent([Text("a"), Text("b")], "  ")] == ["  a", "  b"]


def test_columns_can_wrap_at_words() -> None:
    lines = columns([Text("x"), Text("#1 lookup ok")], (1, 9), words=True)
    assert [line.plain for line in lines] == ["x #1 lookup", "  ok"]
