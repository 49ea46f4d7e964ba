"""The ``in_flight`` timer's firings, driven by hand: a bundle that fires the timers of many
keys whose activations are still running holds the runner's thread for one wait at most,
not one per key, and commits each activation once its result is there.

Beam's state cells and timers are stood in for by in-memory ones (what the DoFn sees of
them is ``read``/``write``/``clear`` and ``set``/``clear``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from agents import SHOP_AGENT, SHOP_TOOLS, answer
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp

from beam_agents import AgentConfig
from beam_agents._protos import LlmRequest
from beam_agents.pipeline import agent_dofn
from beam_agents.pipeline.agent_dofn import AgentDoFn
from beam_agents.testing import ScriptedProvider, event_envelope

T0 = 1_734_000_000_000
KEYS = [f"customer-{i}".encode() for i in range(5)]
GATE = threading.Event()
"""Every model call waits for it: the activations stay in flight until the test opens it."""


def gated_answer(request: LlmRequest) -> str:
    GATE.wait(timeout=60)
    return answer(request)


def make_gated_provider() -> ScriptedProvider:
    return ScriptedProvider(gated_answer)


class Cell:
    """A state cell in memory."""

    def __init__(self) -> None:
        self.value: Any = None

    def read(self) -> Any:
        return self.value

    def write(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Timer:
    """A timer in memory: where it is set (None: cleared or never set)."""

    def __init__(self) -> None:
        self.at: Timestamp | None = None

    def set(self, at: Timestamp) -> None:
        self.at = at

    def clear(self) -> None:
        self.at = None


CELLS = (
    "seq_cell", "memory_cell", "llm_cache_cell", "continuation_cell", "pending_cell",
    "resume_history_cell", "tool_cache_cell", "inbox_cell", "hold_cell", "in_flight_at_cell",
)  # fmt: skip
TIMERS = ("timer", "retry_timer", "in_flight_timer")


def key_state() -> dict[str, Any]:
    return {**{name: Cell() for name in CELLS}, **{name: Timer() for name in TIMERS}}


def outputs(emitted: Any) -> list[Any]:
    """The main outputs (``(key, bytes)``) among what one call emitted."""
    found = []
    for element in emitted:
        value = getattr(element, "value", element)  # a WindowedValue from a commit
        if not hasattr(element, "tag"):
            found.append(value)
    return found


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A DoFn with one activation in flight for each of ``KEYS`` (all waiting on GATE)."""
    GATE.clear()
    dofn = AgentDoFn(
        SHOP_AGENT, SHOP_TOOLS, AgentConfig(provider_factory=make_gated_provider, max_in_flight=8)
    )
    dofn.setup()
    states = {key: key_state() for key in KEYS}
    dofn.start_bundle()
    for key in KEYS:
        raw = event_envelope(key, "echo", b"r0", time_ms=T0).SerializeToString()
        emitted = list(
            dofn.process((key, raw), timestamp=Timestamp(micros=T0 * 1000),
                         window=GlobalWindow(), **states[key])
        )  # fmt: skip
        assert emitted == []  # started, not committed: the bundle ends at once
        assert states[key]["in_flight_timer"].at is not None
    yield dofn, states
    GATE.set()
    dofn.teardown()


def test_a_bundle_of_unfinished_activations_waits_once_not_once_per_key(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dofn, states = started
    poll_s = 2.0
    monkeypatch.setattr(agent_dofn, "_COMMIT_POLL_S", poll_s)
    dofn.start_bundle()
    began = time.perf_counter()
    for key in KEYS:
        states[key]["in_flight_timer"].clear()
        assert list(dofn.on_in_flight(key=key, window=GlobalWindow(), **states[key])) == []
        # Not there yet: the firing sets the timer again, and the key still holds it.
        assert states[key]["in_flight_timer"].at is not None
        assert states[key]["hold_cell"].value
    held = time.perf_counter() - began
    # One wait of poll_s for the whole bundle (it waited 5 x poll_s, one per key, before);
    # the slack is poll_s for five firings over in-memory cells.
    assert poll_s <= held < 2 * poll_s, held


def test_each_activation_is_committed_by_the_first_firing_after_it_finished(
    started: Any,
) -> None:
    dofn, states = started
    GATE.set()
    deadline = time.monotonic() + 60
    while any(not future.done() for future in list(dofn._started)):
        assert time.monotonic() < deadline, "the activations did not finish"
        time.sleep(0.01)
    dofn.start_bundle()
    for key in KEYS:
        got = outputs(dofn.on_in_flight(key=key, window=GlobalWindow(), **states[key]))
        assert got == [(key, b"1:echo:r0:ok:r0")]
        assert states[key]["seq_cell"].value == 1
        assert not states[key]["hold_cell"].value  # committed: the key holds nothing
    dofn.start_bundle()
    for key in KEYS:  # a second firing (a timer set again by a retried bundle) commits nothing
        assert list(dofn.on_in_flight(key=key, window=GlobalWindow(), **states[key])) == []
        assert states[key]["seq_cell"].value == 1
