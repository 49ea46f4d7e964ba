"""Issue #17: a start that suspends on an intent an *earlier* activation staged, approved *after* it.

A real ``RunAgent`` pipeline (BundleBasedDirectRunner, ``file://`` sinks) runs the
key's history; the CLI replays from the sink's files, as an operator would:

    seq 1  start  stages an approval-gated refund (pending)
    seq 2  start  stages a notify intent (released) and suspends awaiting both
    seq 3  resume the refund is approved (released; the key stays suspended)
    seq 4  resume the notify's tool_result: Done
    export

The snapshot's ``pending`` no longer holds the refund, but the pending intents
seq 2 saw are rebuilt from ``resumed_from`` (seq 3's record holds them exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
import pending_agents as pa
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, StateSnapshot
from beam_agents.cli import main
from beam_agents.context import derive_intent_id
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
KEY = b"customer-earlier-intent"
REFUND = derive_intent_id(KEY, 1, 0)
NOTE = derive_intent_id(KEY, 2, 0)

ENVELOPES = {
    "stage": event_envelope(KEY, "stage", b"refund A1", time_ms=T0),
    "wait": event_envelope(KEY, "wait", REFUND.encode(), time_ms=T0 + 1000),
    "approve": approval_envelope(KEY, REFUND, approved=True, approver="ops", time_ms=T0 + 2000),
    "noted": tool_result_envelope(KEY, NOTE, time_ms=T0 + 3000, payload=b"{}"),
}


@dataclass(frozen=True)
class Run:
    root: Path

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    def snapshot(self, request_id: str = "final") -> Path:
        (path,) = (self.root / "snapshots").glob(f"{KEY.hex()}-*-{request_id}.pb")
        return path

    def event(self, name: str) -> Path:
        path = self.root / f"{name}.event.pb"
        path.write_bytes(ENVELOPES[name].SerializeToString())
        return path


def run_pipeline(root: Path, steps: Sequence[AgentEnvelope]) -> Run:
    config = AgentConfig(
        provider_factory=pa.make_provider,
        traces_to=f"file://{root / 'traces'}",
        snapshots_to=f"file://{root / 'snapshots'}",
    )
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])) as p:
        _ = (
            p
            | beam.Create([e.SerializeToString() for e in steps], reshuffle=False)
            | RunAgent(pa.AGENT, pa.TOOLS, config)
        )
    return Run(root)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_pipeline(
        tmp_path_factory.mktemp("earlier-intent"),
        [
            ENVELOPES["stage"],
            ENVELOPES["wait"],
            ENVELOPES["approve"],
            ENVELOPES["noted"],
            export_request_envelope(KEY, "final", time_ms=T0 + 4000),
        ],
    )


def cli(
    run: Run, event: str, seq: int, capsys: pytest.CaptureFixture[str], **flags: str
) -> tuple[int, str, str]:
    argv = [
        "--snapshot",
        str(flags.get("snapshot", run.snapshot())),
        "--traces",
        str(flags.get("traces", run.traces)),
        "--event",
        str(run.event(event)),
        "--agent",
        flags.get("agent", "pending_agents:AGENT"),
        "--registry",
        "pending_agents:TOOLS",
        "--seq",
        str(seq),
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_scenario_ran_as_described(run: Run) -> None:
    snapshot = StateSnapshot.FromString(run.snapshot().read_bytes())
    assert snapshot.seq == 4
    assert not snapshot.pending and not snapshot.HasField("continuation")
    assert [r.seq for r in snapshot.resumed_from] == [3, 4]
    assert [i.intent_id for i in snapshot.resumed_from[0].pending] == [REFUND]


def test_the_start_that_suspends_on_an_earlier_intent_reproduces(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(run, "wait", 2, capsys)
    assert (code, err) == (0, ""), out
    assert "\nreproduced\n" in out
    assert "  kind:   start" in out


def test_every_activation_of_the_scenario_reproduces(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    for seq, name in enumerate(["stage", "wait", "approve", "noted"], start=1):
        code, out, _ = cli(run, name, seq, capsys)
        assert code == 0, (seq, out)


def test_a_changed_suspend_state_diverges_at_suspended(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(run, "wait", 2, capsys, agent="pending_agents:AGENT_OTHER_STATE")
    assert code == 1, out
    assert "  first divergence: event 3 SUSPENDED 'suspend'" in out
    assert "attributes['beam_agents.state_sha256']: traced" in out
