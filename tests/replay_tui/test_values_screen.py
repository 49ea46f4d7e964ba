"""``v`` on a giant value: the head shown at once, the rest loaded on demand, keys handled.

Before, the values screen laid every value out whole: on a 1 MB value it froze for
17 s (30-60 s in the issue's report) and the keys pressed meanwhile were lost. These
drive the app through Textual's pilot at 80x24 and 160x48 with a value of several MB.
"""

from __future__ import annotations

import dataclasses

import pytest
import tui_results
from rich.text import Text

from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import Mark, ReplayResult, Value
from replay_tui.app import ReplayApp
from replay_tui.render.layout import fold
from replay_tui.screens.main import MainScreen
from replay_tui.screens.values import HEAD_CHARS, MORE_CHARS, ValueBody, ValuesScreen
from replay_tui.widgets.lines_pane import LinesPane

SIZES = [(80, 24), (160, 48)]

LINE = 40
"""Characters of each numbered line of the giant value (its line feed included)."""


def giant_text(chars: int) -> str:
    """``chars`` characters of numbered lines: ``row 0000123 ...`` (each ``LINE`` long)."""
    rows = [f"row {i:07d} " + "x" * (LINE - 13) + "\n" for i in range(chars // LINE)]
    return "".join(rows)


def row(i: int) -> str:
    return f"row {i:07d} "


def giant_result(*texts: str) -> ReplayResult:
    """A reproduced result whose first event (selected on opening) carries ``texts``."""
    base = tui_results.reproduced_result()
    index = base.events[0].index
    values = tuple(
        Value(
            event_index=index,
            path=f"result[{n}]",
            value=text,
            text=text,
            mark=Mark.VERIFIED,
            digest="ab" * 32,
            traced_digest="ab" * 32,
        )
        for n, text in enumerate(texts)
    )
    return dataclasses.replace(base, values=values)


def pane_text(app: ReplayApp) -> str:
    return "\n".join(line.plain for line in app.screen.query_one("#values", LinesPane).lines)


def shown_text(app: ReplayApp) -> str:
    """What the terminal shows, as text (from Textual's SVG of the screen)."""
    import html
    import re

    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


@pytest.mark.parametrize("size", SIZES)
async def test_v_on_a_giant_value_shows_its_head_and_keeps_handling_keys(
    size: tuple[int, int],
) -> None:
    text = giant_text(4_000_000)
    app = ReplayApp(giant_result(text))
    async with app.run_test(size=size) as pilot:
        # Typed ahead, without waiting for the screen: every key must be handled.
        await pilot.press("v", "m", "m")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ValuesScreen)
        body = screen.bodies[0]
        assert body.shown == HEAD_CHARS + 2 * MORE_CHARS  # each "m" loaded the next part
        await pilot.press("end")  # scrolling past the end of the last value loads more
        await pilot.pause()
        assert body.shown == HEAD_CHARS + 3 * MORE_CHARS
        loaded = pane_text(app)
        assert row(0) in loaded and row(body.shown // LINE - 1) in loaded
        assert row(len(text) // LINE - 1) not in loaded  # the rest is not laid out
        left = len(text) - body.shown
        assert f"… {left:,} more characters of {len(text):,} not loaded" in loaded
        pane = screen.query_one("#values", LinesPane)
        assert pane.max_scroll_y > 0 and pane.scroll_offset.y > 0  # "end" scrolled it
        await pilot.press("home")
        await pilot.pause()
        assert pane.scroll_offset.y == 0
        assert row(0) in shown_text(app)  # the head is on screen, not only laid out
        await pilot.press("escape", "j")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert app.screen.query_one("Timeline").position == 1  # type: ignore[attr-defined]


async def test_scrolling_past_the_end_loads_more_of_the_last_value() -> None:
    text = giant_text(2_000_000)
    app = ReplayApp(giant_result("short", text))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ValuesScreen)
        assert not screen.bodies[0].cut and screen.bodies[1].shown == HEAD_CHARS
        await pilot.press("end")
        await pilot.pause()
        assert screen.bodies[1].shown == HEAD_CHARS + MORE_CHARS
        pane = screen.query_one("#values", LinesPane)
        kept = pane.scroll_offset.y
        assert kept > 0  # loading more kept the place being read
        await pilot.press("end")
        await pilot.pause()
        assert screen.bodies[1].shown == HEAD_CHARS + 2 * MORE_CHARS


async def test_m_loads_the_cut_value_at_the_top_of_the_screen() -> None:
    first, second = giant_text(1_000_000), giant_text(1_000_000)
    app = ReplayApp(giant_result(first, second))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v", "m")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ValuesScreen)
        assert [b.shown for b in screen.bodies] == [HEAD_CHARS + MORE_CHARS, HEAD_CHARS]
        # "end" loads more of the last value (scrolled past its end); then the first value's
        # lines are above the screen, and "m" loads more of the one at the top: the second.
        await pilot.press("end", "m")
        await pilot.pause()
        assert [b.shown for b in screen.bodies] == [
            HEAD_CHARS + MORE_CHARS,
            HEAD_CHARS + 2 * MORE_CHARS,
        ]


async def test_a_value_loaded_whole_says_nothing_more_is_to_load() -> None:
    app = ReplayApp(giant_result("a small value"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v", "m")
        await pilot.pause()
        assert "more characters" not in pane_text(app)
        assert "a small value" in pane_text(app)


MIXED = ("short\n\n" + "a long line of data \x1b[2J\u202e " * 40 + "\n" + "tail without a feed ") * 2_000
ONE_LINE = ("question 0 " * 2_000 + "\x1b]52;c;AAAA\x07 and wide 全角 text ") * 40
EXACT = ("x" * 80 + "\n" + "y" * 160) * 3_000  # lines of exactly the width, and of twice it


@pytest.mark.parametrize("text", [MIXED, ONE_LINE, EXACT], ids=["mixed", "one-line", "exact"])
@pytest.mark.parametrize("width", [7, 80])
def test_loading_in_parts_lays_out_what_laying_out_the_whole_loaded_part_does(
    text: str, width: int
) -> None:
    """The lines kept across loads (before the last line feed, full-width lines of a long
    ASCII line) plus the new ones are the lines of the whole loaded part: escaped
    (controls shown), folded at the width."""
    body = ValueBody(text)
    for _ in range(4):
        got = [line.plain for line in body.lines(width)]
        whole = [line.plain for line in fold(Text(escape(text[: body.shown], multiline=True)), width)]
        assert got == whole
        assert "\x1b" not in "".join(got)
        body.more()
    assert body.shown == min(len(text), HEAD_CHARS + 4 * MORE_CHARS)
    assert ("\\x1b" in "".join(line.plain for line in body.lines(width))) == (text is not EXACT)
