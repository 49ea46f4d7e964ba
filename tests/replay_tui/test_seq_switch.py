"""``[`` and ``]``: the incident view switches to another activation of the same bundle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import real_results  # noqa: F401  (puts tests/replay on sys.path)
from incident_history import Incident
from textual.pilot import Pilot

from beam_agents.replay.incidents.bundle import bundle_options, load_bundle
from replay_tui.app import ReplayApp
from replay_tui.screens.main import MainScreen

WIDE = (160, 48)


async def wait_for(pilot: Pilot[Any], condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


def shown_seq(app: ReplayApp) -> int | None:
    if not isinstance(app.screen, MainScreen) or app.result is None:
        return None
    return app.result.header.seq


async def test_brackets_switch_between_the_bundles_activations() -> None:
    bundle = load_bundle(Incident().make(all_seqs=True))
    app = ReplayApp(options=bundle_options(bundle, seq=2, import_recorded=True), seqs=bundle.seqs)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: shown_seq(app) == 2)
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: shown_seq(app) == 3)
        assert app.result is not None and app.result.verdict.value == "reproduced"
        await pilot.press(
            "left_square_bracket",
        )
        await wait_for(pilot, lambda: shown_seq(app) == 2)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: shown_seq(app) == 1)
        await pilot.press("left_square_bracket")  # wraps around
        await wait_for(pilot, lambda: shown_seq(app) == 4)
        assert len(app.screen_stack) == 2  # the loading screen, and the result over it
        await pilot.press("q")
    assert app.return_code == 0


async def test_one_activation_or_a_finished_result_has_nowhere_to_switch(real: Any) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert app.result is real("reproduced") and isinstance(app.screen, MainScreen)
        assert app.check_action("switch_seq", (1,)) is False
        await pilot.press("q")


def help_keys(app: ReplayApp) -> list[str]:
    from replay_tui.screens.help import HelpScreen, help_table

    assert isinstance(app.screen, HelpScreen)
    from rich.table import Table

    group = help_table(seq_switching=app.screen.seq_switching)
    tables = [part for part in group.renderables if isinstance(part, Table)]
    return [str(cell) for table in tables for cell in table.columns[0].cells]


async def test_help_lists_the_brackets_only_where_they_switch(real: Any) -> None:
    app = ReplayApp(real("reproduced"))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("question_mark")
        keys = help_keys(app)
        assert "?" in keys and "[ ]" not in keys  # the footer hides them too
    bundle = load_bundle(Incident().make(all_seqs=True))
    app = ReplayApp(options=bundle_options(bundle, seq=2, import_recorded=True), seqs=bundle.seqs)
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: shown_seq(app) == 2)
        await pilot.press("question_mark")
        assert "[ ]" in help_keys(app)
