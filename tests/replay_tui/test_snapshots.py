"""SVG snapshots of the screens an operator looks at first (``--snapshot-update`` to accept).

Results come from real replays, so a change in what the engine reports shows
up here as a visible diff in the snapshot report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp

SIZES = {"160x48": (160, 48), "100x30": (100, 30)}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scenario", ["diverged", "reproduced"])
def test_main_screen(snap_compare: Any, real: Callable[[str], ReplayResult], scenario: str, size: str) -> None:
    assert snap_compare(ReplayApp(real(scenario)), terminal_size=SIZES[size])


def test_main_screen_on_a_cache_miss(snap_compare: Any, real: Callable[[str], ReplayResult]) -> None:
    assert snap_compare(ReplayApp(real("cache-miss")), terminal_size=SIZES["160x48"])


def test_main_screen_in_step_mode(snap_compare: Any, real: Callable[[str], ReplayResult]) -> None:
    assert snap_compare(ReplayApp(real("reproduced")), press=["space", "space", "space"], terminal_size=SIZES["160x48"])


def test_error_screen(snap_compare: Any, real: Callable[[str], ReplayResult]) -> None:
    assert snap_compare(ReplayApp(real("usage-error")), terminal_size=SIZES["100x30"])


def test_state_screen(snap_compare: Any, real: Callable[[str], ReplayResult]) -> None:
    assert snap_compare(ReplayApp(real("reproduced")), press=["s"], terminal_size=SIZES["160x48"])
