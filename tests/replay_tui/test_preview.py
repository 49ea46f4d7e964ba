"""The first rows before the replay (``replay_tui/preview.py``) and an idle app that writes
nothing (issue 27: first rows of a 100,000-event activation took seconds, the time the
replay spent reading the traces whole; the idle app kept writing to the terminal)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any

import pytest
import real_results
from test_seq_switch import wait_for

from beam_agents.replay import engine
from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp
from replay_tui.screens.loading import LoadingScreen
from replay_tui.screens.main import MainScreen
from replay_tui.widgets.timeline import Timeline

SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES)
async def test_the_first_traced_rows_are_painted_before_the_replay_reads_the_traces(
    size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --seq, the activation's first traced events are on screen while the engine has
    not even started (it is held here), named as the trace's and not yet judged."""
    gate = threading.Event()
    real_replay = engine.replay

    def held(options: Any, **kwargs: Any) -> ReplayResult:
        gate.wait(30)
        return real_replay(options, **kwargs)

    monkeypatch.setattr(engine, "replay", held)
    inputs = dataclasses.replace(real_results.diverged_inputs(), seq=2)
    app = ReplayApp(options=inputs.options())
    try:
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: len(app.screen.query("#preview-timeline")) > 0)
            assert isinstance(app.screen, LoadingScreen) and app.result is None
            await pilot.pause()
            text = app.export_screenshot().replace("&#160;", " ")
            assert "START" in text and "seq 2" in text and "reading the traces" in text
            gate.set()
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
            await pilot.press("q")
    finally:
        gate.set()
    assert app.exit_code == 1


async def test_the_plans_rows_replace_the_first_rows_under_the_same_cursor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = threading.Event()
    real_replay = engine.replay

    def held(options: Any, **kwargs: Any) -> ReplayResult:
        gate.wait(30)
        return real_replay(options, **kwargs)

    monkeypatch.setattr(engine, "replay", held)
    inputs = dataclasses.replace(real_results.diverged_inputs(), seq=2)
    app = ReplayApp(options=inputs.options())
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: len(app.screen.query("#preview-timeline")) > 0)
            timeline = app.screen.query_one("#preview-timeline", Timeline)
            traced = timeline.model.traced  # type: ignore[attr-defined]
            timeline.focus()
            await pilot.press("j", "j")
            assert timeline.position == 2
            screen = app.screen
            assert isinstance(screen, LoadingScreen)
            # the plan's header and rows (the same activation's: here, the same events)
            screen.show_planned(real_results.real_result("diverged").header, traced)
            await pilot.pause()
            assert app.screen.query_one("#preview-timeline", Timeline) is timeline
            assert timeline.position == 2
            assert "replaying…" in str(timeline.border_title)
            gate.set()
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
            await pilot.press("q")
    finally:
        gate.set()


class CountingApp(ReplayApp):
    """The app, counting the frames it hands the driver (every write to the terminal)."""

    frames = 0

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)
        self.frames += 1


async def _settled(app: CountingApp, pilot: Any, quiet: float, longest: float) -> None:
    """Until every message is handled and then ``quiet`` seconds pass without a frame (at
    most ``longest`` seconds: an app that keeps painting never settles). On a loaded
    machine the main screen's last widgets can take a while to mount: not idle yet."""
    end = time.monotonic() + longest
    while time.monotonic() < end:
        await pilot.pause()
        before = app.frames
        await asyncio.sleep(quiet)
        if app.frames == before:
            return


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", ["reproduced", "diverged"])
async def test_the_app_opened_through_the_replay_writes_nothing_while_nothing_changes(
    name: str, size: tuple[int, int]
) -> None:
    """Opened as the CLI opens it (the loading screen first, the result over it): once the
    result is on screen and settled, no frame at all for seconds. A spinner or clock left
    running under the result (the loading screen's) writes many a second."""
    inputs = getattr(real_results, f"{name}_inputs")()
    app = CountingApp(options=inputs.options())
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await _settled(app, pilot, quiet=1.0, longest=20.0)
        before = app.frames
        await asyncio.sleep(2.0)
        assert app.frames == before, f"{app.frames - before} frames while nothing changed"
        await pilot.press("q")
