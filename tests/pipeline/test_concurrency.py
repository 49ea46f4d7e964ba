"""``AgentConfig(max_in_flight=N)``: other keys' activations run while one waits on its model.

What must not change: per key, one activation at a time in stream order, and every
output, trace, snapshot and error byte for byte what the serial mode (``max_in_flight=1``)
gives; an activation in flight when its bundle fails is run again and committed once.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents import SHOP_AGENT, SHOP_TOOLS, make_slow_provider
from fault_dofns import PEAK, CrashOnceDoFn, FaultsInFlightDoFn, OverlapTrackingDoFn, reset_overlap
from pipeline_harness import RUNNERS, T0, Collected, Step, run_agent, run_dofn
from test_transform import (
    EXPORT_HEAVY_SCRIPT,
    HOUR,
    SUITE_CONFIG,
    SUITE_SCRIPT,
    Watermark,
    intent_of,
)

from beam_agents import AgentConfig
from beam_agents.pipeline.agent_dofn import AgentDoFn
from beam_agents.testing import event_envelope, export_request_envelope, tool_result_envelope

pytestmark = pytest.mark.slow

CONCURRENT = dataclasses.replace(SUITE_CONFIG, max_in_flight=8)


def everything(got: Collected) -> dict[str, list[Any]]:
    """Every output, as ``(entity_key, bytes)`` pairs sorted (bundle order means nothing)."""
    return {
        "traces": sorted(got.traces),
        "outputs": sorted(got.outputs),
        "intents": sorted(got.intents),
        "approvals": sorted(got.approvals),
        "snapshots": sorted(got.snapshots),
        "errors": sorted(
            (e.entity_key, e.code, e.reason, e.envelope_id, e.raw) for e in got.errors
        ),
    }


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_suite_gives_the_same_bytes_serial_and_concurrent(runner: str, tmp_path: Path) -> None:
    # Streaming, the script arrives as one bundle: many keys in it, so lanes really overlap.
    serial = run_agent(runner, SUITE_SCRIPT, tmp_path, config=SUITE_CONFIG)
    concurrent = run_agent(
        runner, SUITE_SCRIPT, tmp_path, config=CONCURRENT, streaming_bundles=True
    )
    assert everything(concurrent) == everything(serial)
    assert len(serial.traces) > 60 and len(serial.snapshots) > 10  # the suite really ran


def streaming_timer_script() -> list[Step]:
    key = b"k-stream"
    deadline = T0 + HOUR
    return [
        event_envelope(key, "refund", b"A1", time_ms=T0),
        export_request_envelope(key, "before-deadline", time_ms=T0 + 1),
        event_envelope(key, "echo", b"waits", time_ms=T0 + 2),
        Watermark(deadline + 1),
        export_request_envelope(key, "after-deadline", time_ms=deadline + 2),
        tool_result_envelope(key, intent_of(key, 1), payload=b"late", time_ms=deadline + 3),
        event_envelope(key, "act", b"o1", time_ms=deadline + 4),
        tool_result_envelope(key, intent_of(key, 4), time_ms=deadline + 5),
        export_request_envelope(key, "done", time_ms=deadline + 6),
    ]


@pytest.mark.parametrize("script", ["export_heavy", "timers"])
def test_streaming_timers_and_exports_give_the_same_bytes(script: str, tmp_path: Path) -> None:
    steps = EXPORT_HEAVY_SCRIPT if script == "export_heavy" else streaming_timer_script()
    serial = run_agent("streaming", steps, tmp_path, config=SUITE_CONFIG)
    concurrent = run_agent("streaming", steps, tmp_path, config=CONCURRENT, streaming_bundles=True)
    assert everything(concurrent) == everything(serial)
    assert serial.snapshots


KEYS = [f"k-{i:02d}".encode() for i in range(24)]


def many_keys_script() -> list[Step]:
    """Each key: two model calls, then an export that must see both."""
    steps: list[Step] = []
    for round_ in range(2):
        steps += [
            event_envelope(k, "echo", f"r{round_}".encode(), time_ms=T0 + round_) for k in KEYS
        ]
    steps += [export_request_envelope(k, "end", time_ms=T0 + 9) for k in KEYS]
    return steps


def slow_config(max_in_flight: int) -> AgentConfig:
    return AgentConfig(provider_factory=make_slow_provider, max_in_flight=max_in_flight)


@pytest.mark.parametrize("runner", ["batch", "streaming", "fnapi"])
def test_other_keys_run_while_one_waits_and_each_key_runs_one_at_a_time(
    runner: str, tmp_path: Path
) -> None:
    reset_overlap()
    config = slow_config(8)
    dofn = OverlapTrackingDoFn(SHOP_AGENT, SHOP_TOOLS, config)
    got = run_dofn(runner, dofn, many_keys_script(), tmp_path, streaming_bundles=True)
    assert 1 < PEAK["all"] <= 8
    assert PEAK["per_key"] == 1
    for key in KEYS:
        assert got.outputs_of(key) == [b"1:echo:r0:ok:r0", b"2:echo:r1:ok:r1"]
    snapshots = [s for _, s in got.snapshots]
    assert len(snapshots) == len(KEYS)
    assert all(_seq_of(s) == 2 for s in snapshots)  # each export saw both activations


def test_serial_mode_runs_one_activation_at_a_time(tmp_path: Path) -> None:
    reset_overlap()
    dofn = OverlapTrackingDoFn(SHOP_AGENT, SHOP_TOOLS, slow_config(1))
    run_dofn("batch", dofn, many_keys_script()[: len(KEYS)], tmp_path)
    assert PEAK["all"] == 1


def _seq_of(snapshot_bytes: bytes) -> int:
    from beam_agents._protos import StateSnapshot

    return StateSnapshot.FromString(snapshot_bytes).seq


@pytest.mark.parametrize("runner", ["batch", "streaming"])
@pytest.mark.parametrize("max_in_flight", [1, 4])
def test_a_bundle_that_fails_with_activations_in_flight_reruns_them_and_commits_each_once(
    runner: str, max_in_flight: int, tmp_path: Path
) -> None:
    """The worker 'dies' right after k-05's first activation ran (others in flight or done).

    The runner retries the bundle: every activation of it runs again, and what comes out
    is exactly what a run without the crash gives, nothing lost, nothing twice.
    """
    steps = many_keys_script()
    config = slow_config(max_in_flight)
    attempts = tmp_path / "attempts.txt"
    in_flight = tmp_path / "in-flight.txt"
    crashing = CrashOnceDoFn(
        SHOP_AGENT,
        SHOP_TOOLS,
        config,
        crash_key=b"k-05",
        crash_seq=1,
        attempts_file=str(attempts),
        in_flight_file=str(in_flight),
        marker=str(tmp_path / "crashed"),
    )
    got = run_dofn(runner, crashing, steps, tmp_path, streaming_bundles=True)
    assert (tmp_path / "crashed").exists()  # the crash happened

    clean_dofn = OverlapTrackingDoFn(SHOP_AGENT, SHOP_TOOLS, config)
    clean = run_dofn(runner, clean_dofn, steps, tmp_path, streaming_bundles=True)
    assert everything(got) == everything(clean)
    assert Counter(_seq_of(s) for _, s in got.snapshots) == {2: len(KEYS)}
    tried = Counter(attempts.read_text().split())
    assert tried[f"{b'k-05'.hex()}:1"] == 2  # run, lost with its bundle, run again
    assert set(tried.values()) == {1, 2}
    later = [f"{k.hex()}:1" for k in KEYS[6:]]
    if max_in_flight == 1:
        # One at a time: what ran before k-05 in the bundle ran again; nothing after it had.
        assert not {name for name, n in tried.items() if n == 2} & set(later)
    else:
        # Others were in flight when k-05's commit failed: not lost (each is committed by
        # its own key's firing), and what the failed bundle had committed ran again.
        assert in_flight.read_text().split()
        assert any(tried[name] == 1 for name in later)
    assert got.error_codes() == []


@pytest.mark.parametrize("runner", ["batch", "streaming"])
def test_failed_bundles_and_dead_workers_lose_nothing_and_double_nothing(
    runner: str, tmp_path: Path
) -> None:
    """Activations in flight across bundle boundaries (streaming: one element a bundle),
    while bundles fail after starting one, after committing one, and the worker dies with
    several in flight: every activation is committed exactly once, in each key's order,
    and the outputs are byte for byte those of a serial run without a fault."""
    steps = many_keys_script()
    first, second = KEYS[3], KEYS[7]
    attempts = tmp_path / "attempts.txt"
    markers = tmp_path / "markers"
    markers.mkdir()
    faulty = FaultsInFlightDoFn(
        SHOP_AGENT,
        SHOP_TOOLS,
        slow_config(8),
        attempts_file=str(attempts),
        marker_dir=str(markers),
        fail_start=frozenset({(first, 1), (second, 2)}),
        fail_commit=frozenset({(first, 2), (KEYS[11], 1)}),
        kill_at=frozenset({(KEYS[5], 1), (KEYS[20], 2)}),
    )
    # Streaming: each element its own bundle, so activations outlive the bundle that
    # started them; batch: one bundle, committed by later timer bundles.
    got = run_dofn(runner, faulty, steps, tmp_path)
    serial = run_dofn(runner, AgentDoFn(SHOP_AGENT, SHOP_TOOLS, slow_config(1)), steps, tmp_path)
    assert everything(got) == everything(serial)
    # Each (key, seq) traced once: committed once (a failure or restart would show twice).
    traced = Counter((e.entity_key, e.seq) for e in got.events if e.index == 0)
    assert set(traced.values()) == {1} and len(traced) == 2 * len(KEYS)
    assert Counter(_seq_of(s) for _, s in got.snapshots) == {2: len(KEYS)}
    for key in KEYS:
        assert got.outputs_of(key) == [b"1:echo:r0:ok:r0", b"2:echo:r1:ok:r1"]
    # The faults happened, and what they lost ran again.
    assert {p.name.split("-")[0] for p in markers.iterdir()} >= {"start", "commit", "kill"}
    tried = Counter(attempts.read_text().split())
    # Its commit was lost: run again (more often when the failed bundle held other keys'
    # commits too, or the worker died meanwhile: how bundles group keys is the runner's).
    assert tried[f"{KEYS[11].hex()}:1"] >= 2
    assert tried[f"{first.hex()}:2"] >= 2
    assert set(tried) == {f"{k.hex()}:{n}" for k in KEYS for n in (1, 2)}
    assert max(tried.values()) <= 1 + 6  # once, plus once per fault at most
    assert got.error_codes() == []
