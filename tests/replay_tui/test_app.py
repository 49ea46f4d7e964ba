"""The app as an operator uses it: every key, every screen, the exit codes (Pilot, headless)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, Static, TabbedContent, Tree

from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp
from replay_tui.screens.error import ErrorScreen
from replay_tui.screens.help import HelpScreen
from replay_tui.screens.intents import IntentsScreen
from replay_tui.screens.main import MainScreen
from replay_tui.screens.outputs import OutputsScreen
from replay_tui.screens.state import StateScreen
from replay_tui.screens.values import ValuesScreen
from replay_tui.widgets.detail import DetailPane
from replay_tui.widgets.lines_pane import LinesPane
from replay_tui.widgets.step import StepPane
from replay_tui.widgets.timeline import Timeline

WIDE = (160, 48)
Real = Callable[[str], ReplayResult]


def timeline(app: ReplayApp) -> Timeline:
    return app.screen.query_one(Timeline)


def static_text(widget: Static) -> str:
    return str(widget.render())


def screen_text(app: ReplayApp) -> str:
    """What the terminal shows, as text (from Textual's SVG of the screen)."""
    import html
    import re

    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


def selected(app: ReplayApp) -> int | None:
    return timeline(app).position


async def test_opens_on_the_first_divergence_with_the_timeline_focused(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert app.focused is timeline(app)
        assert result.first_divergence is not None
        assert selected(app) == result.first_divergence.index
        assert app.screen.query_one(DetailPane).position == result.first_divergence.index
        assert app.screen.query_one(StepPane).position == result.first_divergence.index


async def test_opens_on_the_cache_miss_when_nothing_diverged(real: Real) -> None:
    result = real("cache-miss")
    assert result.cache_miss is not None
    async with ReplayApp(result).run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert selected(pilot.app) == result.cache_miss.event_index  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keys", "expected"), [(("j",), 1), (("down",), 1), (("j", "j", "k"), 1), (("up",), 0)]
)
async def test_j_k_and_arrows_move_the_selection(
    real: Real, keys: tuple[str, ...], expected: int
) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press(*keys)
        assert selected(app) == expected
        assert app.screen.query_one(DetailPane).position == expected


async def test_home_end_and_pages(real: Real) -> None:
    result = real("reproduced")
    app = ReplayApp(result)
    last = len(result.events) - 1
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("G")
        assert selected(app) == last
        await pilot.press("g")
        assert selected(app) == 0
        await pilot.press("end")
        assert selected(app) == last
        await pilot.press("home")
        assert selected(app) == 0
        await pilot.press("pagedown")
        assert selected(app) == last  # fewer rows than a page
        await pilot.press("pageup")
        assert selected(app) == 0


async def test_step_mode_space_and_right_advance_left_goes_back(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("space")
        tl = timeline(app)
        assert tl.step_mode and selected(app) == 1
        await pilot.press("right", "right")
        assert selected(app) == 3
        await pilot.press("left")
        assert selected(app) == 2
        step = app.screen.query_one(StepPane)
        assert step.position == 2
        assert "after event 2" in str(step.border_title)
        assert "step mode" in static_text(app.screen.query_one("#status", Static))
        await pilot.press("escape")
        assert not tl.step_mode


async def test_n_and_shift_n_walk_the_differing_rows(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    notable = [p.index for p in result.events if p.differs]
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("g", "n")
        assert selected(app) == notable[0]
        await pilot.press("n")
        assert selected(app) == notable[1]
        await pilot.press("N")
        assert selected(app) == notable[0]


async def test_d_jumps_back_to_the_first_divergence(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("G", "d")
        assert result.first_divergence is not None
        assert selected(app) == result.first_divergence.index


async def test_d_without_a_divergence_says_so(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("j", "d")
        assert selected(app) == 1
        assert any("No divergence" in message for _, message in app.notices)


async def test_f_filters_the_timeline_and_escape_clears_it(real: Real) -> None:
    result = real("reproduced")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f")
        box = app.screen.query_one("#filter", Input)
        assert box.has_focus
        await pilot.press(*"kind:llm", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        tl = timeline(app)
        llm = [
            i for i, p in enumerate(result.events) if p.traced is not None and p.traced.kind == 2
        ]
        assert tl.filtered and tl.shown_count == len(llm)
        assert selected(app) in llm
        assert tl.has_focus
        await pilot.press("escape")
        assert not tl.filtered and tl.shown_count == len(result.events)


async def test_slash_searches_the_values_and_jumps_to_the_match(real: Real) -> None:
    result = real("diverged")  # lookup_order now answers "lost in transit"
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("g", "slash")
        assert app.screen.query_one("#search", Input).has_focus
        await pilot.press(*"LOST IN TRANSIT", "enter")
        await app.workers.wait_for_complete()  # the search runs in a worker
        await pilot.pause()
        tool = next(p.index for p in result.events if p.differs)
        assert selected(app) == tool  # the row whose result value holds it; no row hidden
        assert not timeline(app).filtered
        status = static_text(app.screen.query_one("#status", Static))
        assert f"search 'LOST IN TRANSIT': event {tool}" in status
        detail = screen_text(app)
        assert "≠ differs" in detail and "lost in transit" in detail
        await pilot.press("slash", *"no-such-value-anywhere", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "no event's values or name hold it" in static_text(
            app.screen.query_one("#status", Static)
        )


async def test_the_search_answer_is_on_screen_at_80_columns(real: Real) -> None:
    """The status line is cut at the screen's width: the answer to the search just made comes
    right after the position, before the standing notes (it was last, and at 80 columns it read
    "search 'LOST IN TRANSIT': event" with the event cut off, "no" for "no event's ...")."""
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", "slash", *"LOST IN TRANSIT", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        tool = next(p.index for p in result.events if p.differs)
        assert selected(app) == tool
        assert f"search 'LOST IN TRANSIT': event {tool}" in screen_text(app)
        await pilot.press("slash", *"no-such-value", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "search 'no-such-value': no event's values" in screen_text(app)


async def test_v_shows_the_selected_events_values_whole(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("d", "v")
        await pilot.pause()
        assert isinstance(app.screen, ValuesScreen)
        body = "\n".join(line.plain for line in app.screen.query_one("#values", LinesPane).lines)
        assert "result" in body and "lost in transit" in body and "≠ differs" in body
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_filter_matching_nothing_says_so(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f", *"zzz-nothing", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert timeline(app).shown_count == 0
        assert "no row matches" in static_text(app.screen.query_one("#status", Static))
        await pilot.press("n")  # jumping to a hidden row clears the filter
        assert not timeline(app).filtered or selected(app) is None


@pytest.mark.parametrize(
    ("key", "screen"), [("s", StateScreen), ("i", IntentsScreen), ("o", OutputsScreen)]
)
async def test_s_i_o_open_their_screen_and_the_same_key_closes_it(
    real: Real, key: str, screen: type
) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press(key)
        assert isinstance(app.screen, screen)
        await pilot.press(key)
        assert isinstance(app.screen, MainScreen)
        await pilot.press(key, "escape")
        assert isinstance(app.screen, MainScreen)


async def test_switching_between_state_intents_and_outputs_keeps_one_level(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s", "i", "o")
        assert isinstance(app.screen, OutputsScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_state_screen_shows_memory_tree_cache_and_tabs(real: Real) -> None:
    result = real("reproduced")
    assert result.state is not None
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s")
        tree = app.screen.query_one("#memory-tree", Tree)
        labels = {str(node.label).split(" ")[0] for node in tree.root.children}
        assert labels == set(result.state.memory)
        tabs = app.screen.query_one(TabbedContent)
        for key, tab in [
            ("2", "cache"),
            ("3", "pending"),
            ("4", "continuation"),
            ("5", "versions"),
            ("1", "memory"),
        ]:
            await pilot.press(key)
            assert tabs.active == tab
        cache = app.screen.query_one("#cache-table", DataTable)
        assert cache.row_count == len(result.state.cache_entries)


async def until(pilot: Any, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait (in the app's loop) until ``condition()``; fail past ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


async def test_every_table_and_tree_moves_with_j_k_g_shift_g(real: Real) -> None:
    """The timeline's keys work in the state tables, the memory tree, intents and outputs."""
    from replay_tui.widgets.keyed import KeyedDataTable, KeyedTree

    result = real("reproduced")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s")
        # The screen and its focus arrive after a refresh or two: on a loaded machine, later.
        await until(
            pilot, lambda: isinstance(app.screen, StateScreen) and app.screen.focused is not None
        )
        tree = app.screen.query_one("#memory-tree", Tree)
        assert isinstance(tree, KeyedTree) and tree.has_focus and tree.last_line >= 2
        await pilot.press("j")
        assert tree.cursor_line == 1
        await pilot.press("G")
        assert tree.cursor_line == tree.last_line
        await pilot.press("k")
        assert tree.cursor_line == tree.last_line - 1
        await pilot.press("g")
        assert tree.cursor_line == 0
        tables = list(app.screen.query(DataTable))
        assert tables and all(isinstance(t, KeyedDataTable) for t in tables)
        await pilot.press("2")
        cache = app.screen.query_one("#cache-table", DataTable)
        cache.focus()
        await pilot.pause()
        assert cache.row_count >= 2
        await pilot.press("G")
        assert cache.cursor_row == cache.row_count - 1
        await pilot.press("k")
        assert cache.cursor_row == cache.row_count - 2
        await pilot.press("g")
        assert cache.cursor_row == 0
        await pilot.press("j")
        assert cache.cursor_row == 1
        for key, screen in (("i", IntentsScreen), ("o", OutputsScreen)):
            await pilot.press(key)
            await until(
                pilot, lambda s=screen: isinstance(app.screen, s) and app.screen.focused is not None
            )
            table = app.screen.query_one(DataTable)
            assert isinstance(table, KeyedDataTable) and table.has_focus
            await pilot.press("G")
            assert table.cursor_row == table.row_count - 1
            await pilot.press("g")
            assert table.cursor_row == 0


async def test_help_scrolls_with_j_k_g_shift_g(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=(100, 16)) as pilot:
        await pilot.press("question_mark")
        box = app.screen.query_one("#help-box")
        assert box.max_scroll_y > 2  # the help is taller than this terminal
        await pilot.press("j", "j")
        assert box.scroll_y == 2
        await pilot.press("k")
        assert box.scroll_y == 1
        await pilot.press("G")
        assert box.scroll_y == box.max_scroll_y
        await pilot.press("g")
        assert box.scroll_y == 0


async def test_a_filter_of_one_row_says_1_row(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("f", *"kind:activation_start", "enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert timeline(app).shown_count == 1
        status = static_text(app.screen.query_one("#status", Static))
        assert ": 1 row" in status and "1 rows" not in status


async def test_intents_screen_lists_the_ledger(real: Real) -> None:
    result = real("reproduced")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("i")
        table = app.screen.query_one(DataTable)
        assert table.row_count == len(result.intents) > 0
        assert str(table.get_row_at(0)[1]) == result.intents[0].intent_id


async def test_outputs_screen_shows_payload_as_text_and_hex_on_request(real: Real) -> None:
    result = real("reproduced")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("o")
        body = app.screen.query_one("#payload-body", Static)
        assert "press t for text" in static_text(body)
        await pilot.press("t")
        assert "as text" in static_text(body)
        await pilot.press("x")
        assert "as hex" in static_text(body) and "00000000  " in static_text(body)
        await pilot.press("enter")
        assert "as hex" in static_text(body)


async def test_e_exports_both_reports_and_says_where(real: Real, tmp_path: Path) -> None:
    app = ReplayApp(real("diverged"), export_dir=tmp_path)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("e")
        written = sorted(p.name for p in tmp_path.iterdir())
        assert [Path(n).suffix for n in written] == [".json", ".md"]
        assert app.last_export is not None
        assert {p.name for p in app.last_export} == set(written)
        severity, message = app.notices[-1]
        assert severity == "information"
        assert all(str(path) in message for path in app.last_export)


async def test_e_into_an_unwritable_directory_reports_the_error(real: Real, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    app = ReplayApp(real("diverged"), export_dir=blocker / "sub")
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("e")
        severity, message = app.notices[-1]
        assert severity == "error" and message.startswith("Export failed")
        assert app.last_export is None


async def test_c_copies_the_selected_event_via_the_clipboard(real: Real) -> None:
    import json

    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("c")
        copied = json.loads(app.clipboard)
        assert result.first_divergence is not None
        assert copied["index"] == result.first_divergence.index
        assert copied["traced"]["name"] == copied["replayed"]["name"] == "lookup_order"


async def test_question_mark_opens_help_and_closes_it(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def test_help_lists_every_binding() -> None:
    from replay_tui.screens.help import HELP

    listed = {token for _, keys in HELP for key, _ in keys for token in key.split()}
    names = {
        "question_mark": "?",
        "slash": "/",
        "space": "space",
        "right": "→",
        "left": "←",
        "down": "↓",
        "up": "↑",
        "pagedown": "pgdn",
        "pageup": "pgup",
        "left_square_bracket": "[",
        "right_square_bracket": "]",
    }
    for owner in (
        ReplayApp,
        MainScreen,
        Timeline,
        StateScreen,
        OutputsScreen,
        IntentsScreen,
        HelpScreen,
        ValuesScreen,
    ):
        for binding in owner.BINDINGS:
            for key in binding.key.split(","):  # type: ignore[union-attr]
                shown = names.get(key, key)
                assert shown in listed, f"{owner.__name__}: key {key!r} is not in the help"


async def test_command_palette_runs_the_same_actions(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("G", "ctrl+p")
        await pilot.press(*"First divergence")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert result.first_divergence is not None
        assert selected(app) == result.first_divergence.index


async def test_clicking_a_row_selects_it(real: Real) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        tl = timeline(app)
        # Line 0 is the heading; data row 3 is line 4 of the timeline's content.
        await pilot.click(Timeline, offset=(10, 1 + 4))
        assert tl.has_focus
        assert selected(app) == 3


@pytest.mark.parametrize(
    ("scenario", "code"),
    [("reproduced", 0), ("diverged", 1), ("usage-error", 2), ("cache-miss", 3), ("what-if", 0)],
)
async def test_q_exits_with_the_verdicts_code(real: Real, scenario: str, code: int) -> None:
    result = real(scenario)
    assert result.exit_code == code
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("q")
    assert app.return_code == code
    assert app.return_value == code
    assert app.exit_code == code


async def test_q_from_a_sub_screen_also_exits_with_the_verdicts_code(real: Real) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s", "q")
    assert app.return_code == 1


async def test_usage_error_shows_the_message_and_no_incident_keys(real: Real) -> None:
    result = real("usage-error")
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        assert isinstance(app.screen, ErrorScreen)
        message = static_text(app.screen.query_one("#error-message", Static))
        assert result.error[:40] in message
        await pilot.press("s", "i", "o", "e")
        assert isinstance(app.screen, ErrorScreen)
        await pilot.press("q")
    assert app.return_code == 2


async def test_far_jump_on_a_huge_activation_indexes_in_a_worker() -> None:
    import tui_results

    result = tui_results.large_result(20_000)
    app = ReplayApp(result)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("G")
        step = app.screen.query_one(StepPane)
        assert step.position == 19_999
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = "\n".join(line.plain for line in step.lines)
        assert "after event 19999 of 20000" in text
        assert step.index.built == 20_000
        await pilot.press("k")
        assert "after event 19998" in "\n".join(line.plain for line in step.lines)


async def test_panes_are_laid_out_again_when_the_terminal_is_resized(real: Real) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(100, 30)) as pilot:
        detail = app.screen.query_one(DetailPane)
        narrow = max(line.cell_len for line in detail.lines)
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        wide = max(line.cell_len for line in detail.lines)
        assert narrow <= detail.size.width < 160 and wide > narrow
        assert all(line.cell_len <= detail.scrollable_content_region.width for line in detail.lines)


async def test_focus_moves_to_the_panes_and_arrows_scroll_them(real: Real) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("tab")
        detail = app.screen.query_one(DetailPane)
        assert detail.has_focus
        await pilot.press("down", "down")
        assert detail.scroll_offset.y == 2
        assert selected(app) == real("diverged").first_divergence.index  # type: ignore[union-attr]


async def test_the_timeline_title_counts_one_event_in_the_singular() -> None:
    from dataclasses import replace

    import tui_results

    full = tui_results.reproduced_result()
    one = replace(full, events=tuple(full.events)[:1], events_reached_only=True)
    for result, title in (
        (one, "timeline · 1 event"),
        (full, f"timeline · {len(full.events)} events"),
    ):
        app = ReplayApp(result)
        async with app.run_test(size=WIDE):
            assert str(timeline(app).border_title) == title
