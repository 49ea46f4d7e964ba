"""Markup and escape sequences from the inputs are shown literally, on every screen.

The hostile string holds Rich markup (``[bold red]x[/]``), a clear-screen
(``\\x1b[2J``), an OSC 52 clipboard write and a bidi override, and it sits in
the key, names, memory keys and values, intents, outputs and error messages.
"""

from __future__ import annotations

import html
import re

import tui_results

from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp
from replay_tui.screens.error import ErrorScreen
from replay_tui.screens.main import MainScreen

WIDE = (200, 60)
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def screen_text(app: ReplayApp) -> str:
    """What the terminal shows, as text (from Textual's SVG of the screen)."""
    svg = app.export_screenshot()
    text = re.sub(r"<[^>]+>", "", svg)
    return html.unescape(text).replace("\xa0", " ")


def assert_literal(text: str) -> None:
    assert not RAW_CONTROL.search(text), "a control character reached the screen"
    assert "[bold red]x[/]" in text, "markup from the input was interpreted, not shown"
    assert "\\x1b[2J" in text, "the escape sequence is not shown as text"


async def test_main_screen_shows_hostile_strings_literally(injection: ReplayResult) -> None:
    app = ReplayApp(injection)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        text = screen_text(app)
        assert_literal(text)
        assert "\\u202eevil" in text
        # The key is binary-ish (it holds ESC): hex only, never decoded onto the screen.
        assert b"\x1b[2J[bold]k[/]".hex() in text


async def test_state_screen_memory_tree_shows_hostile_keys_and_values_literally(
    injection: ReplayResult,
) -> None:
    app = ReplayApp(injection)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s")
        await pilot.pause()
        text = screen_text(app)
        assert_literal(text)
        assert "[link=http://evil]y[/link]" in text


async def test_intents_and_outputs_show_hostile_strings_literally(injection: ReplayResult) -> None:
    app = ReplayApp(injection)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("i")
        assert_literal(screen_text(app))
        await pilot.press("o", "t")
        assert_literal(screen_text(app))
        await pilot.press("x")
        text = screen_text(app)
        assert not RAW_CONTROL.search(text)
        assert "32 4a 1b 5d 35 32" in text  # "2J" ESC "]52", as hex


async def test_error_screen_shows_a_hostile_message_literally() -> None:
    app = ReplayApp(tui_results.injection_error_result())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, ErrorScreen)
        assert_literal(screen_text(app))
        await pilot.press("q")
    assert app.return_code == 2


async def test_notifications_and_clipboard_do_not_interpret_markup(injection: ReplayResult) -> None:
    app = ReplayApp(injection)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("c")
        # The clipboard gets the pair as --json encodes it: its strings escaped as on the
        # terminal, so what is pasted from it cannot drive a terminal either.
        assert "\x1b" not in app.clipboard and "\u202e" not in app.clipboard
        assert "[bold red]x[/] \\\\x1b[2J" in app.clipboard
        await pilot.press("f", *"[bold", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = screen_text(app)
        assert "filter '[bold'" in text
