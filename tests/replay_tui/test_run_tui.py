"""``run_tui`` and the loading path: the replay runs in a thread, input stays live, codes match."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import real_results
from textual.pilot import Pilot

from beam_agents.replay import engine
from beam_agents.replay.result import ReplayResult
from replay_tui import app as app_module
from replay_tui.app import INTERRUPTED_EXIT_CODE, ReplayApp, run_tui
from replay_tui.screens.error import ErrorScreen
from replay_tui.screens.loading import LoadingScreen
from replay_tui.screens.main import MainScreen

WIDE = (160, 48)


async def wait_for(pilot: Pilot[Any], condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for the app"
        await pilot.pause(0.05)


async def test_options_replay_in_a_thread_then_show_the_result() -> None:
    app = ReplayApp(options=real_results.diverged_inputs().options())
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.result is not None and app.result.exit_code == 1
        await pilot.press("q")
    assert app.return_code == 1


async def test_usage_error_from_the_engine_shows_the_error_screen() -> None:
    app = ReplayApp(options=real_results.usage_error_inputs().options())
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorScreen))
        await pilot.press("q")
    assert app.return_code == 2


def blocking_replay(release: threading.Event, result: ReplayResult | None = None) -> Callable[[Any], ReplayResult]:
    def replay(options: Any, *, on_planned: Any = None) -> ReplayResult:
        release.wait(30)
        if result is None:
            raise RuntimeError("engine bug \x1b[2J")
        return result

    return replay


async def test_loading_screen_stays_responsive_and_q_quits_without_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    monkeypatch.setattr(engine, "replay", blocking_replay(release))
    app = ReplayApp(options=real_results.reproduced_inputs().options())
    try:
        async with app.run_test(size=WIDE) as pilot:
            await pilot.pause(0.3)
            assert isinstance(app.screen, LoadingScreen)
            elapsed = str(app.screen.query_one("#loading-elapsed").render())
            assert elapsed.endswith("q quits") and " s " in elapsed
            await pilot.press("question_mark")  # input is handled while the replay runs
            await pilot.press("escape", "q")
    finally:
        release.set()
    assert app.return_code == INTERRUPTED_EXIT_CODE


async def test_loading_screen_lists_the_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(engine, "replay", blocking_replay(release))
    app = ReplayApp(options=real_results.reproduced_inputs().options())
    try:
        async with app.run_test(size=WIDE) as pilot:
            await pilot.pause(0.2)
            inputs = str(app.screen.query_one("#loading-inputs").render())
            assert "replay_agents:AGENT" in inputs and "replay_agents:TOOLS" in inputs
            assert "snapshot" in inputs and "bytes>" in inputs
            await pilot.press("q")
    finally:
        release.set()


async def test_an_engine_crash_is_an_error_screen_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    release.set()
    monkeypatch.setattr(engine, "replay", blocking_replay(release))
    app = ReplayApp(options=real_results.reproduced_inputs().options())
    async with app.run_test(size=WIDE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorScreen))
        message = str(app.screen.query_one("#error-message").render())
        assert "RuntimeError" in message and "engine bug \\x1b[2J" in message
        await pilot.press("q")
    assert app.return_code == 2


def test_app_needs_a_result_or_options() -> None:
    with pytest.raises(ValueError, match="ReplayResult or ReplayOptions"):
        ReplayApp()


@pytest.mark.parametrize(("scenario", "code"), [("reproduced", 0), ("diverged", 1), ("cache-miss", 3)])
def test_run_tui_returns_the_code_headless_would(
    monkeypatch: pytest.MonkeyPatch, real: Callable[[str], ReplayResult], scenario: str, code: int
) -> None:
    original_run = ReplayApp.run

    async def quit_when_shown(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, MainScreen))
        await pilot.press("q")

    def headless_run(self: ReplayApp, **kwargs: Any) -> Any:
        return original_run(self, headless=True, size=WIDE, auto_pilot=quit_when_shown)

    monkeypatch.setattr(ReplayApp, "run", headless_run)
    options = real_results.SCENARIOS[scenario]().options()
    assert run_tui(options) == code == real(scenario).exit_code
    assert engine.replay(options).exit_code == code


def test_run_tui_never_reports_a_verdict_code_when_textual_stops_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ReplayApp, "run", lambda self, **kwargs: None)
    assert run_tui(real_results.reproduced_inputs().options()) == 2
    assert app_module.USAGE_EXIT_CODE == 2


def test_an_app_that_never_ran_leaves_no_replay_holding_the_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_tui starts the replay before Textual runs. When Textual stops on its own, the
    replay still ends: its messages are kept for an app that never runs, never waited on
    from inside the engine's guard (which blocks processes for the whole interpreter: the
    guard held open by a waiting thread made every later subprocess in the suite fail)."""
    monkeypatch.setattr(ReplayApp, "run", lambda self, **kwargs: None)
    inputs = dataclasses.replace(real_results.reproduced_inputs(), seq=2)
    assert run_tui(inputs.options()) == 2
    replays = [t for t in threading.enumerate() if t.name == "replay"]
    for thread in replays:
        thread.join(60)
    assert not any(t.is_alive() for t in replays)
    # processes are allowed again: the guard is down
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
