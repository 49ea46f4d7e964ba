"""The sink-writing DoFns: what .traces and .snapshots carried is what the file:// sinks hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import make_provider
from pipeline_harness import KEY, OTHER, RUNNERS, T0, run_agent

from beam_agents import AgentConfig, serialize_trace_event
from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.errors import SinkError
from beam_agents.pipeline.sink_writers import WriteSnapshots, WriteTraces
from beam_agents.sinks.file import snapshot_file_name
from beam_agents.testing import event_envelope, export_request_envelope
from beam_agents.trace_stream import read_trace_stream

SCRIPT = [
    event_envelope(KEY, "echo", b"a", time_ms=T0),
    export_request_envelope(KEY, "r1", time_ms=T0 + 1),
    event_envelope(OTHER, "fail", b"", time_ms=T0),
    event_envelope(KEY, "refund", b"A1", time_ms=T0 + 2),
    export_request_envelope(KEY, "r/2 with spaces", time_ms=T0 + 3),
    export_request_envelope(OTHER, "r1", time_ms=T0 + 4),
]


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_file_sinks_hold_exactly_the_bytes_the_outputs_carried(runner: str, tmp_path: Path) -> None:
    traces_dir, snaps_dir = tmp_path / "traces", tmp_path / "snaps"
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to=f"file://{traces_dir}",
        snapshots_to=f"file://{snaps_dir}",
    )
    got = run_agent(runner, SCRIPT, tmp_path, config=config)

    assert len(got.snapshots) == 3
    files = {p.name: p.read_bytes() for p in snaps_dir.glob("*.pb")}
    expected = {
        snapshot_file_name(StateSnapshot.FromString(data)): data for _, data in got.snapshots
    }
    assert files == expected
    assert f"{KEY.hex()}-1-r1.pb" in files

    written = sorted(
        serialize_trace_event(e)
        for path in traces_dir.glob("*.pb")
        for e in read_trace_stream(path)
    )
    assert written == sorted(data for _, data in got.traces)
    assert len(written) >= 8  # two keys, four activations (one failed, one timed out)


class FlakyWriter:
    """A sink writer whose flush fails: the DoFn must let the bundle fail, not drop records."""

    def __init__(self) -> None:
        self.written: list[Any] = []
        self.closed = False

    def open(self) -> None:
        pass

    def write_trace(self, event: TraceEvent, telemetry: object = None) -> None:
        self.written.append(event)

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        self.written.append(snapshot)

    def flush(self) -> None:
        raise SinkError("kafka://b:9092/t", "trace key=00 seq=1 index=0", "broker down")

    def close(self) -> None:
        self.closed = True


def test_a_failed_flush_fails_the_bundle_and_teardown_closes_the_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writer = FlakyWriter()
    monkeypatch.setattr(
        "beam_agents.pipeline.sink_writers.open_sink", lambda uri, role, options: writer
    )
    dofn = WriteTraces("kafka://b:9092/t", {})
    dofn.setup()
    event = TraceEvent(entity_key=KEY, seq=1, index=0)
    dofn.process((KEY, (serialize_trace_event(event),)))
    assert writer.written == [event]
    with pytest.raises(SinkError, match="broker down"):
        dofn.finish_bundle()
    dofn.teardown()
    assert writer.closed


def test_snapshot_writer_opens_its_sink_for_the_snapshots_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[tuple[str, str, dict[str, str]]] = []

    def fake_open(uri: str, role: str, options: dict[str, str]) -> FlakyWriter:
        opened.append((uri, role, options))
        return FlakyWriter()

    monkeypatch.setattr("beam_agents.pipeline.sink_writers.open_sink", fake_open)
    dofn = WriteSnapshots("file:///tmp/snaps", {"timeout_s": "5"})
    dofn.setup()
    assert opened == [("file:///tmp/snaps", "snapshots", {"timeout_s": "5"})]
