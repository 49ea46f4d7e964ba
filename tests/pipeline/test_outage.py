"""A provider outage through the real pipeline: nothing lost, everything accounted for, replayed.

1,000 customer messages over 100 keys go through ``RunAgent`` with the OpenAI provider
against a local OpenAI-compatible server that answers 429 and 503 to every request
whose activation clock falls in an outage window of event time, and answers normally
outside it. With a retry policy of 4 attempts (waits of about 30 s, 60 s, 120 s),
a message first tried early in the outage is dead-lettered after its last attempt, one
tried late in it recovers; a few messages hit a bug in the agent (dead-lettered at
once). Checked, on the BundleBasedDirectRunner in streaming mode (a TestStream whose
watermark follows the messages, so retries fire as event time passes) and on the
FnApiRunner (batch: the retries fire once the input has ended):

- every envelope ends exactly once: committed (its reply on ``.outputs``) or
  dead-lettered (its record on ``.errors``, with its bytes); none is left waiting;
  the counts are printed;
- every failed attempt ran inside the outage (or hit the bug), every commit outside it;
  every ``retries_exhausted`` record lists ``max_attempts`` attempts, all in the outage;
- the provider's HTTP attempts in Beam's metrics are the requests the server received;
- every failed seq replays, through ``beam-agents-replay``, to its traced failure: a bug
  reproduces (exit 0); a provider failure runs, event for event, up to the traced failed
  model call, and stops there (exit 3: its answer was never cached), naming the error;
- once the provider is back, the dead letters re-published from their JSON records
  commit (the bug's fail again, as they must until the agent is fixed).

No wall time is asserted anywhere: the outage is a window of event time.
"""

from __future__ import annotations

import functools
import io
import json
import subprocess
import sys
from collections import Counter
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

import outage_agents
from apache_beam.metrics.metric import MetricsFilter
from pipeline_harness import (
    OUTPUT_NAMES,
    Collected,
    Watermark,
    collect,
    new_pipeline,
    read_collected,
    source,
)
from wire_server import Received, Reply, wire_server

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent
from beam_agents.cli import main
from beam_agents.dead_letter import ErrorRecord
from beam_agents.providers import OpenAIChatProvider
from beam_agents.retry import RetryPolicy
from beam_agents.testing import event_envelope, export_request_envelope
from beam_agents.trace_stream import write_trace_stream
from beam_agents.trace_view import ActivationFailed, ActivationStart, LlmCall

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
KEYS = 100
PER_KEY = 10
SPACING_MS = 100_000
"""A key's messages are this far apart in event time (keys are interleaved within it)."""
OUTAGE = (T0 + 200_000, T0 + 500_000)
POLICY = RetryPolicy(max_attempts=4, initial_backoff_ms=30_000, max_backoff_ms=120_000, jitter=0.1)
PROVIDER = "outage-openai"
EXPORT_MS = T0 + 50_000_000
"""The exports, long after every retry is due."""


def in_outage(ms: int) -> bool:
    return OUTAGE[0] <= ms < OUTAGE[1]


def serve(received: Received) -> Reply:
    """The model service: 429 and 503 (alternately, by the second) during the outage."""
    at = int(received.body["messages"][-1]["content"].rsplit("at=", 1)[1])
    if in_outage(at):
        # A millisecond's Retry-After: the provider's own quick retry does not sleep long.
        if (at // 1000) % 2:
            return Reply({"error": {"message": "overloaded", "type": "server_error"}}, 503,
                         headers={"retry-after-ms": "1"})  # fmt: skip
        return Reply({"error": {"message": "slow down", "type": "requests"}}, 429,
                     headers={"retry-after-ms": "1"})  # fmt: skip
    return completion(at)


def completion(at: int) -> Reply:
    return Reply(
        {
            "id": f"chatcmpl-{at}",
            "object": "chat.completion",
            "model": "support-model-q4",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": f"ok {at}"},
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 2},
        }
    )


def messages() -> list[AgentEnvelope]:
    """Every message in event-time order; about one in a hundred hits the agent's bug."""
    out = []
    for n in range(PER_KEY):
        for k in range(KEYS):
            name = f"m-{k:03d}-{n}"
            text = f"bug {name}" if (k * PER_KEY + n) % 97 == 13 else name
            out.append(
                event_envelope(
                    f"customer-{k:03d}".encode(),
                    "message",
                    text.encode(),
                    time_ms=T0 + n * SPACING_MS + k * 700,
                    envelope_id=name,
                )
            )
    return out


@dataclass
class Run:
    collected: Collected
    received: int
    """Requests the server received."""
    counters: dict[str, int]
    workdir: Path
    envelopes: dict[str, AgentEnvelope]
    runner: str


def run_outage(runner: str, workdir: Path) -> Run:
    envelopes = messages()
    steps: list[Any] = []
    for n, envelope in enumerate(envelopes):
        if n % 10 == 0:
            steps.append(Watermark(envelope.event_time_ms))
        steps.append(envelope)
    steps.append(Watermark(EXPORT_MS - 1))
    steps += [
        export_request_envelope(f"customer-{k:03d}".encode(), "after-outage", time_ms=EXPORT_MS)
        for k in range(KEYS)
    ]
    out_dir = workdir / "collected"
    with wire_server() as server:
        server.respond = serve
        config = AgentConfig(
            provider_factory=functools.partial(
                OpenAIChatProvider,
                api_key="sk-outage-test-key-0000",
                base_url=f"{server.url}/v1",
                name=PROVIDER,
                max_retries=1,  # one quick retry inside the call, then the key's policy
                timeout_s=60,
                deadline_s=120,
            ),
            retry=POLICY,
            traces_to=(workdir / "traces").as_uri(),
            snapshots_to=(workdir / "snapshots").as_uri(),
        )
        p = new_pipeline(runner)
        outs = source(p, runner, steps, streaming_bundles=True) | RunAgent(
            outage_agents.AGENT, outage_agents.TOOLS, config
        )
        for name in OUTPUT_NAMES:
            collect(getattr(outs, name), out_dir, name)
        result = p.run()
        result.wait_until_finish()
        received = len(server.received)
    counters = {
        r.key.metric.name: int(r.committed)
        for r in result.metrics().query(MetricsFilter().with_namespace("beam_agents"))["counters"]
    }
    collected = Collected(*(read_collected(out_dir, name) for name in OUTPUT_NAMES))
    return Run(
        collected, received, counters, workdir, {e.envelope_id: e for e in envelopes}, runner
    )


@dataclass(frozen=True)
class Activation:
    key: bytes
    seq: int
    envelope_id: str
    start_ms: int
    failed: bool
    events: tuple[TraceEvent, ...]


def activations(collected: Collected) -> list[Activation]:
    by_seq: dict[tuple[bytes, int], list[TraceEvent]] = {}
    for event in collected.events:
        by_seq.setdefault((event.entity_key, event.seq), []).append(event)
    return [
        Activation(
            key=key,
            seq=seq,
            envelope_id=ActivationStart.of(events[0]).envelope_id or "",
            start_ms=events[0].start_ms,
            failed=events[-1].kind == TraceEvent.ACTIVATION_FAILED,
            events=tuple(events),
        )
        for (key, seq), events in sorted(by_seq.items())
    ]


def check_accounting(run: Run) -> tuple[list[Activation], list[ErrorRecord]]:
    got = run.collected
    ran = activations(got)
    committed = Counter(a.envelope_id for a in ran if not a.failed)
    dead = Counter(e.envelope_id for e in got.errors)
    waiting = [i for i in run.envelopes if committed[i] + dead[i] == 0]
    failed_attempts = [a for a in ran if a.failed]
    print(
        f"\n{len(run.envelopes)} envelopes over {KEYS} keys: {sum(committed.values())} committed, "
        f"{sum(dead.values())} dead-lettered ({Counter(str(e.code) for e in got.errors)}), "
        f"{len(waiting)} waiting; {len(ran)} activations, {len(failed_attempts)} failed; "
        f"{run.received} requests to the provider"
    )
    # Exactly one end for every envelope, and nothing left waiting.
    assert waiting == []
    assert all(committed[i] + dead[i] == 1 for i in run.envelopes), [
        i for i in run.envelopes if committed[i] + dead[i] != 1
    ]
    assert set(committed) | set(dead) == set(run.envelopes)
    # A reply for every committed envelope, and only for those.
    replies = sorted(o.decode().split(":")[0] for _, o in got.outputs)
    expected = sorted(f"reply to {run.envelopes[i].event.payload.decode()}" for i in committed)
    assert replies == expected
    # The outage decided every provider failure, and nothing else failed but the bug.
    for a in ran:
        bug = run.envelopes[a.envelope_id].event.payload.startswith(b"bug")
        if a.failed and not bug:
            assert in_outage(a.start_ms), a
        if not a.failed:
            assert not in_outage(a.start_ms) and not bug, a
    for record in got.errors:
        envelope = run.envelopes[record.envelope_id]
        assert record.raw == envelope.SerializeToString() and record.resendable
        assert record.seq == record.attempts[-1].seq
        if envelope.event.payload.startswith(b"bug"):
            assert (record.code, len(record.attempts)) == ("activation_failed", 1)
            assert record.error_type == "ValueError"
        else:
            assert record.code == "retries_exhausted"
            assert len(record.attempts) == POLICY.max_attempts
            assert all(in_outage(a.now_ms) and a.transient for a in record.attempts)
            assert [a.wait_ms > 0 for a in record.attempts] == [True, True, True, False]
    # Both ends happened: some recovered after failing, some ran out of attempts.
    recovered = {a.envelope_id for a in failed_attempts} & set(committed)
    assert recovered and any(e.code == "retries_exhausted" for e in got.errors)
    # Retries are visible where operators look (Beam metrics), the provider's attempts too.
    # (Not on the streaming DirectRunner, whose counters of a stateful DoFn fed by a
    # TestStream are not summed over its bundles: it reports 1 activation for 40, with the
    # code of before this change too; the FnApiRunner's are.)
    if run.runner == "streaming":
        return ran, list(got.errors)
    counters = run.counters
    assert counters[f"provider_attempts.{PROVIDER}"] == run.received
    assert counters["activation_failures"] == len(failed_attempts)
    assert counters["dead_letters"] == len(got.errors)
    assert counters["activation_retries"] == len(failed_attempts) - len(got.errors)
    return ran, list(got.errors)


def _split_traces(run: Run) -> Path:
    """One trace stream per key (the sink's files hold every key): small replay inputs."""
    out = run.workdir / "traces-by-key"
    out.mkdir()
    by_key: dict[bytes, list[TraceEvent]] = {}
    for event in run.collected.events:
        by_key.setdefault(event.entity_key, []).append(event)
    for key, events in by_key.items():
        write_trace_stream(out / f"{key.hex()}.pb", events)
    return out


def replay_failed_seqs(run: Run, ran: list[Activation]) -> int:
    """Replay every failed seq a snapshot covers; return how many were replayed."""
    traces = _split_traces(run)
    snapshots = {
        StateSnapshot.FromString(path.read_bytes()).entity_key: path
        for path in (run.workdir / "snapshots").glob("*.pb")
    }
    events_dir = run.workdir / "events"
    events_dir.mkdir()
    replayed = 0
    outcomes: Counter[str] = Counter()
    for a in ran:
        if not a.failed:
            continue
        snapshot = snapshots[a.key]
        if StateSnapshot.FromString(snapshot.read_bytes()).seq < a.seq:
            continue  # exported before this attempt ran (the batch runner's exports)
        event = events_dir / f"{a.envelope_id}.pb"
        event.write_bytes(run.envelopes[a.envelope_id].SerializeToString())
        argv = [
            "--snapshot", str(snapshot), "--traces", str(traces / f"{a.key.hex()}.pb"),
            "--event", str(event), "--seq", str(a.seq), "--json",
            "--agent", "outage_agents:AGENT", "--registry", "outage_agents:TOOLS",
        ]  # fmt: skip
        out = io.StringIO()
        with redirect_stdout(out):
            code = main(argv)
        report = json.loads(out.getvalue())
        traced_error = ActivationFailed.of(a.events[-1]).error_type
        assert traced_error, a
        if run.envelopes[a.envelope_id].event.payload.startswith(b"bug"):
            # Agent code failed before any model call: it reproduces exactly.
            assert code == 0 and report["verdict"] == "reproduced", report
            outcomes["bug reproduced"] += 1
        else:
            # The traced failure is a model call that failed: the re-run matches every event
            # before it, reaches that call and stops there (its answer never existed).
            assert code == 3 and report["verdict"] == "irreproducible", report
            miss = report["cache_miss"]
            call = a.events[miss["event_index"]]
            assert call.kind == TraceEvent.LLM_CALL
            assert LlmCall.of(call).error_type == traced_error
            assert "failed here too" in report["reason"] and traced_error in report["reason"]
            before = report["events"][: miss["event_index"]]
            assert before and not any(pair["differs"] for pair in before), report
            outcomes["outage call reached"] += 1
        replayed += 1
    print(f"replayed {replayed} failed seqs: {dict(outcomes)}")
    return replayed


def test_an_outage_on_the_streaming_runner_loses_nothing_and_every_failure_replays(
    tmp_path: Path,
) -> None:
    run = run_outage("streaming", tmp_path)
    ran, _ = check_accounting(run)
    # Every key was exported after its last activation: every failed seq replays.
    failed = [a for a in ran if a.failed]
    assert replay_failed_seqs(run, ran) == len(failed)
    # And through the console script itself, for one of each kind.
    for a in [next(a for a in failed if b"bug" not in run.envelopes[a.envelope_id].event.payload)]:
        snapshot = next((tmp_path / "snapshots").glob(f"{a.key.hex()}-*.pb"))
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("beam-agents-replay")),
                "--snapshot",
                str(snapshot),
                "--traces",
                str(tmp_path / "traces"),
                "--event",
                str(tmp_path / "events" / f"{a.envelope_id}.pb"),
                "--seq",
                str(a.seq),
                "--agent",
                "outage_agents:AGENT",
                "--registry",
                "outage_agents:TOOLS",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=Path(__file__).parent,
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert "the original call failed here too" in done.stdout, done.stdout
    resend_dead_letters(run, tmp_path)


def serve_healthy(received: Received) -> Reply:
    """The model service once the outage is over (re-sent envelopes keep their clocks)."""
    return completion(int(received.body["messages"][-1]["content"].rsplit("at=", 1)[1]))


def resend_dead_letters(run: Run, workdir: Path) -> None:
    """Re-publish every resendable dead letter, read back from its JSON, once the provider
    is healthy: each ends committed, or (the bug's) dead-lettered again."""
    topic = [record.to_json_bytes() for record in run.collected.errors]  # the dead-letter topic
    records = [ErrorRecord.from_json_bytes(message) for message in topic]
    resent = [(r.entity_key, r.raw) for r in records if r.resendable]
    assert len(resent) == len(records)
    out_dir = workdir / "resent"
    with wire_server() as server:
        server.respond = serve_healthy
        config = AgentConfig(
            provider_factory=functools.partial(
                OpenAIChatProvider, api_key="unused", base_url=f"{server.url}/v1", name=PROVIDER
            ),
            retry=POLICY,
        )
        with new_pipeline("batch") as p:
            outs = source(p, "batch", resent) | RunAgent(
                outage_agents.AGENT, outage_agents.TOOLS, config
            )
            for name in OUTPUT_NAMES:
                collect(getattr(outs, name), out_dir, name)
    again = Collected(*(read_collected(out_dir, name) for name in OUTPUT_NAMES))
    bugs = {r.envelope_id for r in records if r.code == "activation_failed"}
    replied = {o.decode().split(":")[0].removeprefix("reply to ") for _, o in again.outputs}
    assert replied == {r.envelope_id for r in records} - bugs
    assert {e.envelope_id for e in again.errors} == bugs
    print(f"re-sent {len(resent)} dead letters: {len(replied)} committed, {len(bugs)} failed again")


def test_an_outage_on_the_fnapi_runner_loses_nothing(tmp_path: Path) -> None:
    run = run_outage("fnapi", tmp_path)
    ran, _ = check_accounting(run)
    # Batch: the exports were answered before the retries ran (the watermark jumps to the
    # end with the input); the failed first attempts they cover replay all the same.
    assert replay_failed_seqs(run, ran) > 0
