"""RunAgent writing to kafka://: what the topics hold is what .traces and .snapshots carried."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from beam_agents import AgentConfig
from beam_agents.errors import SinkError
from beam_agents.testing import event_envelope, export_request_envelope

from .peers import KafkaMockCluster, closed_port, consume_all

# The pipeline tests' harness and agents, also for the SDK worker processes of
# the multi-process runner (which import them by module name).
_PIPELINE_TESTS = str(Path(__file__).resolve().parents[1] / "pipeline")
if _PIPELINE_TESTS not in sys.path:
    sys.path.insert(0, _PIPELINE_TESTS)

from agents import make_provider  # noqa: E402
from pipeline_harness import KEY, OTHER, T0, run_agent  # noqa: E402

pytestmark = pytest.mark.slow
RUNS_BEAM = True  # Beam's runners keep threads of their own (see conftest's thread guard)

SCRIPT = [
    event_envelope(KEY, "echo", b"a", time_ms=T0),
    export_request_envelope(KEY, "r1", time_ms=T0 + 1),
    event_envelope(OTHER, "fail", b"", time_ms=T0),
    event_envelope(KEY, "refund", b"A1", time_ms=T0 + 2),
    export_request_envelope(KEY, "r2", time_ms=T0 + 3),
    export_request_envelope(OTHER, "r1", time_ms=T0 + 4),
]


@pytest.fixture
def worker_path(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([_PIPELINE_TESTS, *paths]))


@pytest.mark.parametrize("runner", ["batch", "fnapi_multi"])
def test_the_topics_hold_exactly_what_the_outputs_carried(
    runner: str, kafka_cluster: KafkaMockCluster, tmp_path: Path, worker_path: None
) -> None:
    traces, snapshots = f"pipeline-traces-{runner}", f"pipeline-snapshots-{runner}"
    kafka_cluster.create_topic(traces)
    kafka_cluster.create_topic(snapshots)
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to=f"kafka://{kafka_cluster.bootstrap}/{traces}",
        snapshots_to=f"kafka://{kafka_cluster.bootstrap}/{snapshots}",
        sink_options={"timeout_s": "20", "compression.type": "lz4"},
    )
    got = run_agent(runner, SCRIPT, tmp_path, config=config)

    assert len(got.snapshots) == 3 and len(got.traces) >= 6
    on_traces = consume_all(kafka_cluster.bootstrap, traces, len(got.traces))
    on_snapshots = consume_all(kafka_cluster.bootstrap, snapshots, len(got.snapshots))
    assert sorted((m.key(), m.value()) for m in on_traces) == sorted(got.traces)
    assert sorted((m.key(), m.value()) for m in on_snapshots) == sorted(got.snapshots)


def test_an_unreachable_broker_fails_the_pipeline_with_the_sink_error(
    tmp_path: Path, worker_path: None
) -> None:
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to=f"kafka://127.0.0.1:{closed_port()}/traces",
        sink_options={"timeout_s": "1"},
    )
    with pytest.raises(Exception) as caught:  # the runner wraps the bundle's error
        run_agent("batch", SCRIPT[:1], tmp_path, config=config)
    assert "SinkError" in repr(caught.value) or isinstance(caught.value, SinkError)
    assert "not delivered within timeout_s=1" in str(caught.value)
