"""End to end: an agent whose recorded read-only tool reads a real local HTTP service runs on
Beam (RunAgent, BundleBasedDirectRunner, file:// sinks), is exported, and replays ``reproduced``
with the service stopped; a changed argument is irreproducible, naming the argument."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
import recorded_agents as rec
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, StateSnapshot
from beam_agents.blobs import load_tool_cache
from beam_agents.testing import event_envelope, export_request_envelope

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
KEY = b"customer-http"
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def ask(order_id: str, at: int) -> AgentEnvelope:
    return event_envelope(KEY, "ask", order_id.encode(), time_ms=at)


FIRST = ask("A1", T0)
SECOND = ask("B7", T0 + 1_000)


def run_pipeline(root: Path, max_in_flight: int = 1) -> int:
    """Run the script on Beam against a fresh order service; returns the requests it answered."""
    service = rec.OrderService()
    service.orders["A1"] = {"order_id": "A1", "status": "shipped"}
    service.orders["B7"] = {"order_id": "B7", "status": "packed"}
    rec.SERVICE_URL = service.url
    config = AgentConfig(
        provider_factory=rec.make_provider,
        traces_to=f"file://{root / 'traces'}",
        snapshots_to=f"file://{root / 'snapshots'}",
        max_in_flight=max_in_flight,
    )
    script = [FIRST, SECOND, export_request_envelope(KEY, "e2e", time_ms=T0 + 2_000)]
    try:
        with beam.Pipeline(
            runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])
        ) as p:
            _ = (
                p
                | beam.Create([e.SerializeToString() for e in script], reshuffle=False)
                | RunAgent(rec.AGENT, rec.TOOLS, config)
            )
    finally:
        service.stop()  # stopped before any replay runs
        rec.SERVICE_URL = "http://127.0.0.1:9"  # and nothing would answer there either
    return service.requests


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("recorded-e2e")
    requests = run_pipeline(root)
    (root / "first.pb").write_bytes(FIRST.SerializeToString())
    (root / "second.pb").write_bytes(SECOND.SerializeToString())
    return root, requests


def argv(root: Path, event: str, *extra: str, agent: str = "recorded_agents:AGENT") -> list[str]:
    (snapshot,) = (root / "snapshots").glob(f"{KEY.hex()}-*-e2e.pb")
    return [
        "--snapshot",
        str(snapshot),
        "--traces",
        str(root / "traces"),
        "--event",
        str(root / event),
        "--agent",
        agent,
        "--registry",
        "recorded_agents:TOOLS",
        *extra,
    ]


def test_the_snapshot_carries_the_recorded_results(run: tuple[Path, int]) -> None:
    root, requests = run
    assert requests == 2, "the pipeline ran the recorded tool for real, once per call"
    (path,) = (root / "snapshots").glob(f"{KEY.hex()}-*-e2e.pb")
    snapshot = StateSnapshot.FromString(path.read_bytes())
    cache, _ = load_tool_cache(snapshot.tool_cache)
    assert sorted(e.tool for e in cache.entries_by_recency()) == ["read_order", "read_order"]


def test_replays_reproduced_with_the_service_stopped(run: tuple[Path, int]) -> None:
    root, _ = run
    for event, seq in (("first.pb", "1"), ("second.pb", "2")):
        done = subprocess.run(
            [SCRIPT, *argv(root, event, "--seq", seq)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "reproduced" in done.stdout
        assert "served from the tool cache" in done.stdout, done.stdout


def test_a_changed_argument_is_irreproducible_naming_it(run: tuple[Path, int]) -> None:
    root, _ = run
    done = subprocess.run(
        [SCRIPT, *argv(root, "second.pb", agent="recorded_agents:AGENT_OTHER_ARGS")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "irreproducible" in done.stdout
    assert "read_order" in done.stdout and "argument 'order_id' differs" in done.stdout


def test_concurrent_lanes_record_the_same_bytes(
    run: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root, _ = run
    lanes = tmp_path_factory.mktemp("recorded-e2e-lanes")
    assert run_pipeline(lanes, max_in_flight=4) == 2
    (serial,) = (root / "snapshots").glob("*.pb")
    (concurrent,) = (lanes / "snapshots").glob("*.pb")
    assert concurrent.read_bytes() == serial.read_bytes()
