"""Fixtures of the TUI's tests: replay results from real replays, and hand-built ones.

``real`` results come from ``engine.replay`` over a key history run through
``run_activation`` (see ``real_results.py``); they are what the TUI shows in an
incident. Hand-built ones (``tui_results.py``) cover what real runs rarely
produce on demand: hostile strings everywhere, a 100,000-event activation.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import real_results
import tui_results

from beam_agents.replay.result import ReplayResult

SIZES = {"wide": (160, 48), "narrow": (100, 30)}


@pytest.fixture(scope="session")
def real() -> Callable[[str], ReplayResult]:
    """``real("diverged")``: the engine's result for that scenario (replayed once per session)."""
    cache: dict[str, ReplayResult] = {}

    def get(name: str) -> ReplayResult:
        if name not in cache:
            cache[name] = real_results.real_result(name)
        return cache[name]

    return get


@pytest.fixture
def injection() -> ReplayResult:
    """A diverged result with markup and escape sequences in every string it carries."""
    return tui_results.injection_result()
