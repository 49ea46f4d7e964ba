"""End to end: real RunAgent pipelines (DirectRunner, file:// sinks, export requests) feed the CLI.

One batch pipeline runs a script over several keys, one key per scenario, and
exports each key where the scenario needs it; a streaming pipeline fires a HITL
timeout between two elements. The CLI then replays from the sink's files
exactly as an operator would: ``--snapshot`` one snapshot file, ``--traces``
the trace directory, ``--event`` the envelope's bytes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
import replay_agents as ra
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream as ScriptedStream
from apache_beam.transforms.window import TimestampedValue

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent
from beam_agents.cli import main
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_stream import read_trace_stream, write_trace_stream

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
HOUR_MS = 3_600_000
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")

K_ASK = b"customer-ask"
K_BOOM = b"customer-boom"
K_LATE = b"customer-late"
K_RESUME = b"customer-resume"
K_PENDING = b"customer-pending"
K_DECIDE = b"customer-decide"
K_RATE = b"customer-rate"
K_OLDER = b"customer-older"
K_TIMEOUT = b"customer-timeout"


def intent_id(key: bytes, seq: int, ordinal: int = 0) -> str:
    from beam_agents.context import derive_intent_id

    return derive_intent_id(key, seq, ordinal)


def ask(key: bytes, text: str, at: int, type: str = "ask") -> AgentEnvelope:
    return event_envelope(key, type, text.encode(), time_ms=at)


# Each scenario's envelopes, in the order one key sees them.
ENVELOPES: dict[str, AgentEnvelope] = {
    "ask1": ask(K_ASK, "where is A1?", T0),
    "ask2": ask(K_ASK, "and A2?", T0 + 1000),
    "boom": ask(K_BOOM, "crash", T0, "boom"),
    "late": ask(K_LATE, "crash later", T0, "boom_late"),
    "refund": ask(K_RESUME, "refund please", T0, "refund"),
    "approve": approval_envelope(
        K_RESUME, intent_id(K_RESUME, 1), approved=True, time_ms=T0 + 1000
    ),
    "result": tool_result_envelope(
        K_RESUME, intent_id(K_RESUME, 1), time_ms=T0 + 2000, payload=b"{}"
    ),
    "p_refund": ask(K_PENDING, "refund please", T0, "refund"),
    "p_approve": approval_envelope(
        K_PENDING, intent_id(K_PENDING, 1), approved=True, time_ms=T0 + 1000
    ),
    "d_refund": ask(K_DECIDE, "refund please", T0, "refund"),
    "rate": ask(K_RATE, "rate?", T0, "rate"),
    "o_first": ask(K_OLDER, "one", T0),
    "o_second": ask(K_OLDER, "two", T0 + 2000),
}
PENDING_RESULT = tool_result_envelope(
    K_PENDING, intent_id(K_PENDING, 1), time_ms=T0 + 5000, payload=b"{}"
)
PENDING_REJECTION = approval_envelope(
    K_DECIDE, intent_id(K_DECIDE, 1), approved=False, approver="ops", time_ms=T0 + 5000
)

BATCH_SCRIPT: list[AgentEnvelope] = [
    ENVELOPES["ask1"],
    ENVELOPES["ask2"],
    export_request_envelope(K_ASK, "e2e", time_ms=T0 + 2000),
    ENVELOPES["boom"],
    export_request_envelope(K_BOOM, "e2e", time_ms=T0 + 1000),
    ENVELOPES["late"],
    export_request_envelope(K_LATE, "e2e", time_ms=T0 + 1000),
    ENVELOPES["refund"],
    ENVELOPES["approve"],
    ENVELOPES["result"],
    export_request_envelope(K_RESUME, "e2e", time_ms=T0 + 3000),
    ENVELOPES["p_refund"],
    ENVELOPES["p_approve"],
    export_request_envelope(K_PENDING, "e2e", time_ms=T0 + 2000),
    ENVELOPES["d_refund"],
    export_request_envelope(K_DECIDE, "e2e", time_ms=T0 + 1000),
    ENVELOPES["rate"],
    export_request_envelope(K_RATE, "e2e", time_ms=T0 + 1000),
    ENVELOPES["o_first"],
    export_request_envelope(K_OLDER, "early", time_ms=T0 + 1000),
    ENVELOPES["o_second"],
]


@dataclass(frozen=True)
class Run:
    """The sink directories of one pipeline run."""

    root: Path
    traces: Path
    snapshots: Path

    def snapshot(self, key: bytes, request_id: str = "e2e") -> Path:
        (path,) = self.snapshots.glob(f"{key.hex()}-*-{request_id}.pb")
        return path

    def event(self, name: str, envelope: AgentEnvelope | None = None) -> Path:
        path = self.root / f"{name}.event.pb"
        path.write_bytes((envelope or ENVELOPES[name]).SerializeToString())
        return path


def _config(root: Path) -> AgentConfig:
    return AgentConfig(
        provider_factory=ra.make_provider,
        traces_to=f"file://{root / 'traces'}",
        snapshots_to=f"file://{root / 'snapshots'}",
    )


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("e2e-batch")
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])) as p:
        _ = (
            p
            | beam.Create([e.SerializeToString() for e in BATCH_SCRIPT], reshuffle=False)
            | RunAgent(ra.AGENT, ra.TOOLS, _config(root))
        )
    return Run(root, root / "traces", root / "snapshots")


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A key that suspends, whose HITL timer fires, and is exported after the timeout."""
    root = tmp_path_factory.mktemp("e2e-streaming")
    refund = ask(K_TIMEOUT, "refund please", T0, "refund")
    export = export_request_envelope(K_TIMEOUT, "e2e", time_ms=T0 + 2 * HOUR_MS)
    stream = (
        ScriptedStream()
        .add_elements([TimestampedValue(refund.SerializeToString(), T0 / 1000)])
        .advance_watermark_to((T0 + HOUR_MS + 1000) / 1000)
        .add_elements([TimestampedValue(export.SerializeToString(), (T0 + 2 * HOUR_MS) / 1000)])
        .advance_watermark_to((T0 + 3 * HOUR_MS) / 1000)
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions(flags=[], streaming=True)
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        _ = p | stream | RunAgent(ra.AGENT, ra.TOOLS, _config(root))
    return Run(root, root / "traces", root / "snapshots")


def replay(
    run: Run,
    key: bytes,
    event: Path | None,
    *extra: str,
    snapshot: Path | None = None,
    traces: Path | None = None,
    agent: str = "replay_agents:AGENT",
    registry: str = "replay_agents:TOOLS",
) -> list[str]:
    argv = [
        "--snapshot",
        str(snapshot or run.snapshot(key)),
        "--traces",
        str(traces or run.traces),
        "--agent",
        agent,
        "--registry",
        registry,
        *extra,
    ]
    if event is not None:
        argv += ["--event", str(event)]
    return argv


def cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def header(out: str) -> list[str]:
    return out.splitlines()[:6]


# --------------------------------------------------------------------------- 0


def test_a_completed_activation_reproduces_with_no_provider_call(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(replay(batch, K_ASK, batch.event("ask2")), capsys)
    assert (code, err) == (0, "")
    assert header(out) == [
        "beam-agents-replay 1.0.0a1",
        "  agent:  replay_agents:AGENT",
        f"  key:    {K_ASK.hex()}  seq: 2  now_ms: {T0 + 1000}",
        "  kind:   start",
        "reproduced",
        "  provider calls: 0",
    ]
    # The output and the memory writes are checked against the digests the pipeline traced
    # on ACTIVATION_END (the blind writes replay from any later snapshot).
    lines = out.splitlines()
    assert lines[6].endswith("(matches the traced digest)")
    assert lines[7].startswith("  memory blob: ")
    assert lines[8].startswith("  memory writes: 2 key(s) set, 0 deleted, sha256=")
    assert lines[8].endswith("(matches the traced digest)")


def test_seq_picks_an_older_activation(batch: Run, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(replay(batch, K_ASK, batch.event("ask1"), "--seq", "1"), capsys)
    assert code == 0
    assert f"  key:    {K_ASK.hex()}  seq: 1  now_ms: {T0}" in out


def test_a_failure_before_any_model_call_reproduces_fully(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(replay(batch, K_BOOM, batch.event("boom")), capsys)
    assert code == 0 and "\nreproduced\n" in out
    assert "fails with ValueError, as traced" in out


def test_a_suspended_then_resumed_activation_replays_as_resume(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(replay(batch, K_RESUME, batch.event("result")), capsys)
    assert code == 0, out
    assert "  kind:   resume" in out and "\nreproduced\n" in out
    assert "continuation: snapshot.resumed_from[seq=3]" in out
    for seq, name in ((1, "refund"), (2, "approve")):
        code, out, _ = cli(replay(batch, K_RESUME, batch.event(name), "--seq", str(seq)), capsys)
        assert code == 0, out


def _traces_as_collected_at_export(batch: Run, key: bytes, through_seq: int) -> Path:
    # The traces as collected when the snapshot was taken (before the batch runner's
    # end-of-input watermark fired the key's HITL timer).
    collected = batch.root / f"{key.hex()}-pending-traces.pb"
    events = [
        e
        for path in sorted(batch.traces.glob("*.pb"))
        for e in read_trace_stream(path, entity_key=key)
        if e.seq <= through_seq
    ]
    write_trace_stream(collected, events)
    return collected


def test_a_pending_resume_is_a_what_if(batch: Run, capsys: pytest.CaptureFixture[str]) -> None:
    collected = _traces_as_collected_at_export(batch, K_DECIDE, 1)
    code, out, err = cli(
        replay(batch, K_DECIDE, batch.event("decide", PENDING_REJECTION), traces=collected), capsys
    )
    assert code == 2 and "--what-if" in err and out == ""
    code, out, _ = cli(
        replay(
            batch, K_DECIDE, batch.event("decide", PENDING_REJECTION), "--what-if", traces=collected
        ),
        capsys,
    )
    assert code == 0, out
    assert "\nwhat-if\n" in out and "no traced outcome to diff" in out
    assert f"  key:    {K_DECIDE.hex()}  seq: 2  now_ms: {T0 + 5000}" in out


def test_a_pending_resume_needing_an_unminted_response_is_irreproducible(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    collected = _traces_as_collected_at_export(batch, K_PENDING, 2)
    code, out, _ = cli(
        replay(
            batch, K_PENDING, batch.event("pending", PENDING_RESULT), "--what-if", traces=collected
        ),
        capsys,
    )
    assert code == 3, out
    assert "\nirreproducible\n" in out and "what-if" in out and "not minted yet" in out
    assert f"  key:    {K_PENDING.hex()}  seq: 3  now_ms: {T0 + 5000}" in out


def test_a_hitl_timeout_replays_without_an_event(
    streaming: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(replay(streaming, K_TIMEOUT, None), capsys)
    assert code == 0, out
    assert f"  key:    {K_TIMEOUT.hex()}  seq: 2  now_ms: {T0 + HOUR_MS}" in out
    assert "  trigger: timeout" in out
    event = streaming.event("timeout", ask(K_TIMEOUT, "refund please", T0, "refund"))
    code, _, err = cli(replay(streaming, K_TIMEOUT, event, "--seq", "2"), capsys)
    assert code == 2 and "HITL timeout" in err


# --------------------------------------------------------------------------- 1


def test_a_changed_read_only_tool_result_diverges_at_that_tool_call(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        replay(batch, K_ASK, batch.event("ask2"), registry="replay_agents:TOOLS_CHANGED_LOOKUP"),
        capsys,
    )
    assert code == 1 and "\ndiverged\n" in out
    assert "  first divergence: event 1 TOOL_CALL 'lookup_order'" in out
    assert "attributes['beam_agents.result_sha256']: traced" in out


# --------------------------------------------------------------------------- 3


def test_a_changed_prompt_is_a_cache_miss_naming_the_message(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        replay(batch, K_ASK, batch.event("ask2"), agent="replay_agents:AGENT_NEW_PROMPT"), capsys
    )
    assert code == 3 and "\nirreproducible\n" in out
    assert "  cache miss: event 2 LLM_CALL" in out
    assert "    differs in:       messages[0]" in out


def test_a_failed_activation_replays_up_to_its_first_uncached_call(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(replay(batch, K_LATE, batch.event("late")), capsys)
    assert code == 3 and "  cache miss: event 2 LLM_CALL" in out
    assert "(same key: the response is gone)" in out and "never committed" in out


@pytest.fixture
def rate_service(monkeypatch: pytest.MonkeyPatch) -> Any:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.3)
    host, port = server.getsockname()[:2]
    monkeypatch.setenv(ra.NETWORK_TARGET_ENV, f"{host}:{port}")
    yield server
    server.close()


def test_a_tool_opening_a_socket_is_irreproducible_and_connects_nowhere(
    batch: Run, rate_service: socket.socket, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(
        replay(batch, K_RATE, batch.event("rate"), registry="replay_agents:TOOLS_ONLINE_RATE"),
        capsys,
    )
    host, port = rate_service.getsockname()[:2]
    assert code == 3 and "\nirreproducible\n" in out
    assert f"read-only tool 'fetch_rate' tried to reach {host}:{port}" in out
    with pytest.raises(TimeoutError):
        rate_service.accept()  # nothing ever connected


# --------------------------------------------------------------------------- 2


def test_a_snapshot_with_a_newer_schema_exits_2_naming_both_versions(
    batch: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = StateSnapshot.FromString(batch.snapshot(K_ASK).read_bytes())
    snapshot.state_schema_version = 9
    newer = batch.root / "newer.pb"
    newer.write_bytes(snapshot.SerializeToString())
    code, out, err = cli(replay(batch, K_ASK, batch.event("ask2"), snapshot=newer), capsys)
    assert (code, out) == (2, "")
    assert "schema version 9" in err and "(version 2)" in err and "upgrade beam-agents" in err


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("other key", "but the snapshot is of key"),
        (
            "other kind",
            "carries a tool_result, but the activation at seq 2 was triggered by an event",
        ),
        ("other envelope id", "was triggered by envelope_id"),
        ("other bytes", "different bytes"),
        ("no event", "--event is missing"),
        ("untraced seq", "--seq 7: the traces hold no activation"),
        ("older snapshot", "exported at seq 1, before the target activation (seq 2)"),
    ],
)
def test_inputs_that_do_not_belong_together_exit_2(
    batch: Run, case: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ask2 = ENVELOPES["ask2"]
    extra: list[str] = []
    key, event, snapshot = K_ASK, batch.event("ask2"), None
    if case == "other key":
        event = batch.event("x", ask(K_BOOM, "and A2?", T0 + 1000))
    elif case == "other kind":
        event = batch.event("x", tool_result_envelope(K_ASK, "in-x", time_ms=T0 + 1000))
    elif case == "other envelope id":
        changed = AgentEnvelope()
        changed.CopyFrom(ask2)
        changed.envelope_id = "ev-someone-else"
        event = batch.event("x", changed)
    elif case == "other bytes":
        changed = AgentEnvelope()
        changed.CopyFrom(ask2)
        changed.event.payload = b"and A3?"
        event = batch.event("x", changed)
    elif case == "no event":
        event = None
    elif case == "untraced seq":
        extra = ["--seq", "7"]
    elif case == "older snapshot":
        key, event = K_OLDER, batch.event("o_second")
        snapshot = batch.snapshot(K_OLDER, "early")
    code, out, err = cli(replay(batch, key, event, *extra, snapshot=snapshot), capsys)
    assert (code, out) == (2, ""), err
    assert needle in err
    assert err.startswith("beam-agents-replay: error:") and err.count("\n") == 1


def test_the_console_script_on_pipeline_files(batch: Run) -> None:
    argv = replay(batch, K_ASK, batch.event("ask2"))
    out = subprocess.run([SCRIPT, "--json", *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"verdict": "reproduced"' in out.stdout


def test_every_traced_activation_of_the_run_has_its_events_in_the_sink(batch: Run) -> None:
    # Guards the fixture: the scenarios above rely on these traces being complete.
    events = [e for path in batch.traces.glob("*.pb") for e in read_trace_stream(path)]
    ends = {
        (e.entity_key, e.seq)
        for e in events
        if e.kind in (TraceEvent.ACTIVATION_END, TraceEvent.ACTIVATION_FAILED)
    }
    assert (K_RESUME, 3) in ends and (K_ASK, 2) in ends and (K_LATE, 1) in ends


# --------------------------------------------------------------------------- incidents


def test_the_incident_workflow_on_the_pipelines_files(
    batch: Run, streaming: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ls, --events, bundle --all per exported key, and check, on a real RunAgent run."""
    from beam_agents.replay.inputs.envelopes import write_envelope_stream

    dump = tmp_path / "topic-dump.pb"
    timeout_refund = ask(K_TIMEOUT, "refund please", T0, "refund")
    with open(dump, "wb") as f:
        write_envelope_stream(
            f, [e.SerializeToString() for e in [*BATCH_SCRIPT, timeout_refund, PENDING_RESULT]]
        )
    code, out, _ = cli(["ls", "--traces", str(batch.traces), "--json"], capsys)
    listing = json.loads(out)
    assert code == 0 and listing["keys"] == 8
    traced = {(bytes.fromhex(r["entity_key"]), r["seq"]) for r in listing["rows"]}
    assert (K_LATE, 1) in traced and (K_RESUME, 3) in traced

    bundles = tmp_path / "bundles"
    bundles.mkdir()
    runs = [
        (batch, k, "e2e") for k in (K_ASK, K_BOOM, K_LATE, K_RESUME, K_PENDING, K_DECIDE, K_RATE)
    ]
    runs += [(batch, K_OLDER, "early"), (streaming, K_TIMEOUT, "e2e")]
    for run, key, request_id in runs:
        argv = ["bundle", "-o", str(bundles / f"{key.decode()}.bundle"), "--snapshot",
                str(run.snapshot(key, request_id)), "--traces", str(run.traces), "--events",
                str(dump), "--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS",
                "--all"]  # fmt: skip
        code, _, err = cli(argv, capsys)
        assert code == 0, err
    code, out, err = cli(["check", "--import-recorded", str(bundles), "--json", "--jobs", "2"], capsys)
    report = json.loads(out)
    rows = {
        (r["path"].rsplit("/", 1)[-1], r["seq"]): r for g in report["groups"] for r in g["rows"]
    }
    assert rows[("customer-late.bundle", 1)]["verdict"] == "irreproducible"
    assert rows[("customer-timeout.bundle", 2)]["verdict"] == "reproduced"  # a HITL timeout
    assert rows[("customer-resume.bundle", 3)]["verdict"] == "reproduced"
    assert rows[("customer-older.bundle", 1)]["verdict"] == "reproduced"
    assert code == report["exit_code"] == 3  # the late failure's discarded response
    # Each row is what the single replay of that activation, from the separate files, says.
    for run, key, request_id in runs:
        for (name, seq), row in rows.items():
            if name != f"{key.decode()}.bundle":
                continue
            code, _, _ = cli(
                replay(run, key, None, "--events", str(dump), "--seq", str(seq),
                       snapshot=run.snapshot(key, request_id)),
                capsys,
            )  # fmt: skip
            assert code == row["exit_code"], (name, seq, row)
