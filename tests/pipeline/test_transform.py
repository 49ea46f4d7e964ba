"""RunAgent on real runners: one behavioural suite, run on every runner of pipeline_harness.

Most scenarios share one pipeline run per runner (each scenario uses its own key,
and keys are independent), so the suite costs four runs instead of forty.
Scenarios whose config differs, or that compare two runs, run on their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from agents import SHOP_AGENT, SHOP_TOOLS, make_provider, make_unpicklable_provider
from apache_beam.options.pipeline_options import PipelineOptions
from pipeline_harness import (
    CORE_RUNNERS,
    KEY,
    RUNNERS,
    T0,
    Collected,
    Step,
    Watermark,
    collect,
    new_pipeline,
    read_collected,
    run_agent,
)

from beam_agents import AgentConfig, HitlPolicy, RunAgent
from beam_agents._protos import TraceEvent
from beam_agents.blobs import load_llm_cache, load_memory
from beam_agents.context import derive_intent_id
from beam_agents.dead_letter import (
    INBOX_OVERFLOW,
    KEY_MISMATCH,
    MALFORMED_ENVELOPE,
    NO_BODY,
    REJECTED_TRIGGER,
)
from beam_agents.errors import ConfigError
from beam_agents.migrations import STATE_SCHEMA_VERSION
from beam_agents.pipeline import ErrorRecord
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_events import attributes_dict, kind_name
from beam_agents.trace_stream import write_trace_stream
from beam_agents.trace_view import ActivationFailed

pytestmark = pytest.mark.slow

HOUR = 3_600_000
HITL = HitlPolicy(intent_ttl_ms=24 * HOUR, hitl_timeout_ms=HOUR, approval_channel="refunds")
INBOX_LIMIT = 3
SUITE_CONFIG = AgentConfig(provider_factory=make_provider, hitl=HITL, inbox_limit=INBOX_LIMIT)


def intent_of(key: bytes, seq: int, ordinal: int = 0) -> str:
    return derive_intent_id(key, seq, ordinal)


def kinds(events: list[TraceEvent]) -> list[str]:
    return [kind_name(e.kind) for e in events]


def memory_of(collected: Collected, request_id: str) -> dict[str, object]:
    return load_memory(collected.snapshot(request_id).memory)[0]


# --------------------------------------------------------------------------- the scripts

K_EXPORT = b"k-export"
K_NEVER = b"k-never-seen"
K_FAIL = b"k-fail"
K_HITL = b"k-hitl"
K_REJECT = b"k-reject"
K_TIMEOUT = b"k-timeout"
K_INBOX = b"k-inbox"
K_OVERFLOW = b"k-overflow"
K_ERRORS = b"k-errors"
K_EARLY = b"k-early-result"
K_KEYED = b"k-keyed"

NO_BODY_ENVELOPE = event_envelope(K_ERRORS, "echo", time_ms=T0 + 12)
NO_BODY_ENVELOPE.ClearField("event")
EMPTY_KEY_ENVELOPE = event_envelope(b"", "echo", b"x", time_ms=T0 + 13)
FOREIGN_ENVELOPE = event_envelope(b"someone-else", "echo", b"x", time_ms=T0 + 11)
OVERFLOWING = event_envelope(K_OVERFLOW, "echo", b"e", time_ms=T0 + 4)


def export_script() -> list[Step]:
    return [
        event_envelope(K_EXPORT, "echo", b"a", time_ms=T0),
        export_request_envelope(K_EXPORT, "between", time_ms=T0 + 1),
        event_envelope(K_EXPORT, "echo", b"b", time_ms=T0 + 2),
        export_request_envelope(K_EXPORT, "after", time_ms=T0 + 3),
        export_request_envelope(K_NEVER, "never", time_ms=T0),
    ]


def failure_script() -> list[Step]:
    return [
        event_envelope(K_FAIL, "echo", b"a", time_ms=T0),
        export_request_envelope(K_FAIL, "before-failures", time_ms=T0 + 1),
        event_envelope(K_FAIL, "fail", b"", time_ms=T0 + 2),
        event_envelope(K_FAIL, "fail_call", b"x", time_ms=T0 + 3),
        export_request_envelope(K_FAIL, "after-failures", time_ms=T0 + 4),
        event_envelope(K_FAIL, "echo", b"c", time_ms=T0 + 5),
    ]


def hitl_script() -> list[Step]:
    refund = intent_of(K_HITL, 1)
    return [
        event_envelope(K_HITL, "refund", b"A1", time_ms=T0),
        export_request_envelope(K_HITL, "suspended", time_ms=T0 + 1),
        approval_envelope(K_HITL, refund, approved=True, approver="ops", time_ms=T0 + 2),
        tool_result_envelope(K_HITL, refund, payload=b"refunded", time_ms=T0 + 3),
        export_request_envelope(K_HITL, "done", time_ms=T0 + 4),
        # The intent is resolved: a second result for it is refused.
        tool_result_envelope(K_HITL, refund, payload=b"again", time_ms=T0 + 5),
    ]


def reject_and_timeout_script() -> list[Step]:
    return [
        event_envelope(K_REJECT, "refund", b"A2", time_ms=T0),
        approval_envelope(
            K_REJECT, intent_of(K_REJECT, 1), approved=False, reason="too much", time_ms=T0 + 1
        ),
        # Nobody answers: the HITL timer resumes it when the watermark passes the deadline
        # (here, when the input ends).
        event_envelope(K_TIMEOUT, "refund", b"A3", time_ms=T0),
    ]


def inbox_script() -> list[Step]:
    return [
        event_envelope(K_INBOX, "act", b"o1", time_ms=T0),
        event_envelope(K_INBOX, "echo", b"b", time_ms=T0 + 1),
        event_envelope(K_INBOX, "act", b"o2", time_ms=T0 + 2),
        event_envelope(K_INBOX, "echo", b"d", time_ms=T0 + 3),
        export_request_envelope(K_INBOX, "queued", time_ms=T0 + 4),
        # Resumes seq 1; then b (seq 3) runs and o2 (seq 4) suspends again; d keeps waiting.
        tool_result_envelope(K_INBOX, intent_of(K_INBOX, 1), payload=b"shipped", time_ms=T0 + 5),
        export_request_envelope(K_INBOX, "mid-drain", time_ms=T0 + 6),
        tool_result_envelope(K_INBOX, intent_of(K_INBOX, 4), payload=b"shipped", time_ms=T0 + 7),
        export_request_envelope(K_INBOX, "drained", time_ms=T0 + 8),
        event_envelope(K_OVERFLOW, "act", b"o", time_ms=T0),
        event_envelope(K_OVERFLOW, "echo", b"b", time_ms=T0 + 1),
        event_envelope(K_OVERFLOW, "echo", b"c", time_ms=T0 + 2),
        event_envelope(K_OVERFLOW, "echo", b"d", time_ms=T0 + 3),
        OVERFLOWING,
        tool_result_envelope(K_OVERFLOW, intent_of(K_OVERFLOW, 1), time_ms=T0 + 5),
    ]


def errors_script() -> list[Step]:
    return [
        event_envelope(K_ERRORS, "echo", b"a", time_ms=T0),
        export_request_envelope(K_ERRORS, "errors-before", time_ms=T0 + 1),
        b"\xff\xff\xff not an envelope",
        42,
        (K_ERRORS, FOREIGN_ENVELOPE.SerializeToString()),
        (K_ERRORS, 7),
        NO_BODY_ENVELOPE,
        EMPTY_KEY_ENVELOPE,
        tool_result_envelope(K_ERRORS, "in-nobody-staged-this", time_ms=T0 + 14),
        approval_envelope(K_ERRORS, "in-nobody-staged-this", approved=True, time_ms=T0 + 15),
        export_request_envelope(K_ERRORS, "errors-after", time_ms=T0 + 16),
        event_envelope(K_EARLY, "refund", b"A4", time_ms=T0),
        tool_result_envelope(K_EARLY, intent_of(K_EARLY, 1), payload=b"sneaky", time_ms=T0 + 1),
        export_request_envelope(K_EARLY, "early-after", time_ms=T0 + 2),
    ]


def keyed_script() -> list[Step]:
    """Kafka-shaped ``(key, bytes)`` elements, including a record that carried no key."""
    first = event_envelope(K_KEYED, "echo", b"k1", time_ms=T0)
    second = event_envelope(K_KEYED, "echo", b"k2", time_ms=T0 + 1)
    return [(K_KEYED, first.SerializeToString()), (None, second.SerializeToString())]


SUITE_SCRIPT: list[Step] = [
    *export_script(),
    *failure_script(),
    *hitl_script(),
    *reject_and_timeout_script(),
    *inbox_script(),
    *errors_script(),
    *keyed_script(),
]


@pytest.fixture(scope="module", params=CORE_RUNNERS)
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Collected:
    runner: str = request.param
    return run_agent(runner, SUITE_SCRIPT, tmp_path_factory.mktemp(runner), config=SUITE_CONFIG)


# --------------------------------------------------------------------------- exports


def test_export_between_two_activations_observes_the_state_after_the_first(
    suite: Collected,
) -> None:
    between = suite.snapshot("between")
    assert between.seq == 1
    assert between.snapshot_at_ms == T0 + 1
    assert between.entity_key == K_EXPORT
    assert between.state_schema_version == STATE_SCHEMA_VERSION
    assert memory_of(suite, "between") == {"count": 1, "last": "a"}
    assert len(load_llm_cache(between.llm_cache)[0]) == 1
    assert not between.HasField("continuation")
    assert list(between.pending) == []
    after = suite.snapshot("after")
    assert after.seq == 2
    assert memory_of(suite, "after") == {"count": 2, "last": "b"}
    assert len(load_llm_cache(after.llm_cache)[0]) == 2


def test_exports_move_no_seq_and_emit_exactly_one_snapshot_each(suite: Collected) -> None:
    assert suite.seqs(K_EXPORT) == [1, 2]
    assert suite.outputs_of(K_EXPORT) == [b"1:echo:a:ok:a", b"2:echo:b:ok:b"]
    ids = sorted(s.request_id for s in map(_parse_snapshot, suite.snapshots))
    assert len(ids) == len(set(ids))


def test_export_of_a_key_never_seen_is_an_empty_snapshot_at_seq_zero(suite: Collected) -> None:
    never = suite.snapshot("never")
    assert (never.seq, never.memory, never.llm_cache) == (0, b"", b"")
    assert suite.seqs(K_NEVER) == []


def _parse_snapshot(item: tuple[bytes, bytes]) -> object:
    from beam_agents._protos import StateSnapshot

    key, data = item
    snapshot = StateSnapshot.FromString(data)
    assert snapshot.entity_key == key
    return snapshot


# --------------------------------------------------------------------------- failures


def test_a_failed_activation_commits_nothing_but_its_seq_and_trace(suite: Collected) -> None:
    before = suite.snapshot("before-failures")
    after = suite.snapshot("after-failures")
    assert (before.seq, after.seq) == (1, 3)
    assert after.memory == before.memory  # "poisoned" was never committed
    assert after.llm_cache == before.llm_cache  # the staged insert of fail_call was dropped
    for seq in (2, 3):
        trace = suite.activation(K_FAIL, seq)
        assert kinds(trace)[0] == "ACTIVATION_START"
        assert kinds(trace)[-1] == "ACTIVATION_FAILED"
        assert attributes_dict(trace[-1])["error.type"] == "RuntimeError"
    assert "LLM_CALL" in kinds(suite.activation(K_FAIL, 3))
    # The next activation takes seq 4 and sees the pre-failure memory.
    assert suite.outputs_of(K_FAIL) == [b"1:echo:a:ok:a", b"4:echo:c:ok:c"]


# --------------------------------------------------------------------------- HITL


def test_hitl_round_trip_approval_release_result_resume_done(suite: Collected) -> None:
    refund = intent_of(K_HITL, 1)
    [requested] = suite.approvals_of(K_HITL)
    assert requested.intent_id == refund
    assert requested.requires_approval and requested.approval_channel == "refunds"
    assert requested.expires_at_ms == T0 + 24 * HOUR
    suspended = suite.snapshot("suspended")
    assert suspended.HasField("continuation")
    assert list(suspended.continuation.awaiting_intent_ids) == [refund]
    assert suspended.continuation.deadline_ms == T0 + HOUR
    assert [i.intent_id for i in suspended.pending] == [refund]
    # Released by the approval (seq 2), exactly once, and only then.
    assert [(i.intent_id, i.seq) for i in suite.intents_of(K_HITL)] == [(refund, 1)]
    assert kinds(suite.activation(K_HITL, 2))[-1] == "ACTIVATION_END"
    assert "INTENT_RELEASED" in kinds(suite.activation(K_HITL, 2))
    assert suite.outputs_of(K_HITL) == [b"3:result:OK:refunded"]
    done = suite.snapshot("done")
    assert done.seq == 3
    assert not done.HasField("continuation")
    assert list(done.pending) == []
    assert [r.seq for r in done.resumed_from] == [2, 3]
    assert list(done.resumed_from[-1].continuation.awaiting_intent_ids) == [refund]
    # No HITL timeout ran after the key finished: its timer was cleared.
    assert suite.seqs(K_HITL) == [1, 2, 3]


def test_a_rejection_resumes_the_agent_and_releases_nothing(suite: Collected) -> None:
    assert suite.outputs_of(K_REJECT) == [b"2:rejected:too much"]
    assert suite.intents_of(K_REJECT) == []
    assert len(suite.approvals_of(K_REJECT)) == 1
    assert suite.seqs(K_REJECT) == [1, 2]


def test_the_hitl_deadline_resumes_the_agent_with_a_timeout_on_the_timer_clock(
    suite: Collected,
) -> None:
    deadline = T0 + HOUR
    assert suite.outputs_of(K_TIMEOUT) == [f"2:timeout:{deadline}".encode()]
    start = suite.activation(K_TIMEOUT, 2)[0]
    assert kind_name(start.kind) == "ACTIVATION_START"
    assert start.start_ms == deadline
    attrs = attributes_dict(start)
    assert attrs["beam_agents.trigger"] == "timeout"
    assert attrs["beam_agents.deadline_ms"] == deadline
    assert suite.intents_of(K_TIMEOUT) == []


# --------------------------------------------------------------------------- inbox


def test_events_for_a_suspended_key_wait_and_run_in_arrival_order(suite: Collected) -> None:
    queued = suite.snapshot("queued")
    assert queued.seq == 1 and queued.HasField("continuation")
    mid = suite.snapshot("mid-drain")
    assert mid.seq == 4 and mid.HasField("continuation")
    assert list(mid.continuation.awaiting_intent_ids) == [intent_of(K_INBOX, 4)]
    assert suite.snapshot("drained").seq == 6
    assert suite.outputs_of(K_INBOX) == [
        b"2:result:OK:shipped",
        b"3:echo:b:ok:b",
        b"5:result:OK:shipped",
        b"6:echo:d:ok:d",
    ]
    # Each queued event ran on its own envelope's clock.
    assert suite.activation(K_INBOX, 3)[0].start_ms == T0 + 1
    assert suite.activation(K_INBOX, 4)[0].start_ms == T0 + 2
    assert suite.activation(K_INBOX, 6)[0].start_ms == T0 + 3


def test_inbox_overflow_goes_to_errors_and_the_queued_events_still_run(suite: Collected) -> None:
    [overflow] = [e for e in suite.errors if e.code == INBOX_OVERFLOW]
    assert overflow.entity_key == K_OVERFLOW
    assert overflow.raw == OVERFLOWING.SerializeToString()
    assert overflow.envelope_id == OVERFLOWING.envelope_id
    assert f"inbox_limit={INBOX_LIMIT}" in overflow.reason
    assert suite.outputs_of(K_OVERFLOW) == [
        b"2:result:OK:",
        b"3:echo:b:ok:b",
        b"4:echo:c:ok:c",
        b"5:echo:d:ok:d",
    ]


# --------------------------------------------------------------------------- errors


def _errors(suite: Collected, code: str) -> list[ErrorRecord]:
    return [e for e in suite.errors if e.code == code]


def test_each_refused_input_goes_to_errors_with_its_reason_and_raw_bytes(
    suite: Collected,
) -> None:
    malformed = _errors(suite, MALFORMED_ENVELOPE)
    raws = {e.raw for e in malformed}
    assert b"\xff\xff\xff not an envelope" in raws
    assert EMPTY_KEY_ENVELOPE.SerializeToString() in raws
    reasons = " | ".join(e.reason for e in malformed)
    assert "do not parse as an AgentEnvelope" in reasons
    assert "input element of type int" in reasons
    assert "value is a int" in reasons
    assert "empty entity_key" in reasons
    assert len(malformed) == 4

    [mismatch] = _errors(suite, KEY_MISMATCH)
    assert mismatch.raw == FOREIGN_ENVELOPE.SerializeToString()
    assert K_ERRORS.hex() in mismatch.reason and b"someone-else".hex() in mismatch.reason

    [no_body] = _errors(suite, NO_BODY)
    assert no_body.raw == NO_BODY_ENVELOPE.SerializeToString()
    assert no_body.entity_key == K_ERRORS

    rejected = {e.entity_key: e for e in _errors(suite, REJECTED_TRIGGER) if e.entity_key != K_HITL}
    assert "in-nobody-staged-this" in rejected[K_ERRORS].reason
    assert "still awaits approval" in rejected[K_EARLY].reason
    [again] = [e for e in _errors(suite, REJECTED_TRIGGER) if e.entity_key == K_HITL]
    assert "already-resolved" in again.reason
    assert len(_errors(suite, REJECTED_TRIGGER)) == 4  # result + approval + early + again


def test_refused_inputs_change_no_state(suite: Collected) -> None:
    before = suite.snapshot("errors-before")
    after = suite.snapshot("errors-after")
    assert after.seq == before.seq == 1
    assert (after.memory, after.llm_cache, list(after.pending)) == (
        before.memory,
        before.llm_cache,
        list(before.pending),
    )
    early = suite.snapshot("early-after")
    assert early.seq == 1 and early.HasField("continuation") and len(early.pending) == 1


def test_kafka_shaped_keyed_elements_are_accepted(suite: Collected) -> None:
    assert suite.outputs_of(K_KEYED) == [b"1:echo:k1:ok:k1", b"2:echo:k2:ok:k2"]


# --------------------------------------------------------------------------- own runs


def _without_exports(steps: list[Step]) -> list[Step]:
    from beam_agents._protos import AgentEnvelope

    return [
        s
        for s in steps
        if not (isinstance(s, AgentEnvelope) and s.WhichOneof("body") == "export_request")
    ]


EXPORT_HEAVY_SCRIPT: list[Step] = [
    export_request_envelope(KEY, "x0", time_ms=T0 - 1),
    event_envelope(KEY, "echo", b"a", time_ms=T0),
    export_request_envelope(KEY, "x1", time_ms=T0 + 1),
    export_request_envelope(KEY, "x1-again", time_ms=T0 + 1),
    event_envelope(KEY, "refund", b"A1", time_ms=T0 + 2),
    export_request_envelope(KEY, "x2", time_ms=T0 + 3),
    event_envelope(KEY, "echo", b"queued", time_ms=T0 + 4),
    export_request_envelope(KEY, "x3", time_ms=T0 + 5),
    export_request_envelope(KEY, "x3-again", time_ms=T0 + 5),
    # Left unanswered: the HITL timer fires at the end, then the queued event runs.
]


@pytest.mark.parametrize("runner", RUNNERS)
def test_exports_change_nothing_every_output_equals_a_run_without_them(
    runner: str, tmp_path: Path
) -> None:
    with_exports = run_agent(runner, EXPORT_HEAVY_SCRIPT, tmp_path, config=SUITE_CONFIG)
    without = run_agent(
        runner, _without_exports(EXPORT_HEAVY_SCRIPT), tmp_path, config=SUITE_CONFIG
    )
    # Same traces (so same SEQs, clocks, and the HITL timer firing at the same deadline),
    # same outputs, intents and approvals, byte for byte.
    assert sorted(with_exports.traces) == sorted(without.traces)
    assert sorted(with_exports.outputs) == sorted(without.outputs)
    assert sorted(with_exports.intents) == sorted(without.intents)
    assert sorted(with_exports.approvals) == sorted(without.approvals)
    assert with_exports.seqs(KEY) == [1, 2, 3, 4]  # echo, refund, timeout, queued echo
    assert without.snapshots == []
    # Back-to-back exports see identical state: the first wrote nothing.
    for first, second in (("x1", "x1-again"), ("x3", "x3-again")):
        a, b = with_exports.snapshot(first), with_exports.snapshot(second)
        b.request_id = a.request_id
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    assert with_exports.snapshot("x3").seq == 2  # the queued event did not take a seq


def test_streaming_timer_fires_when_the_watermark_passes_the_deadline(tmp_path: Path) -> None:
    refund = intent_of(KEY, 1)
    deadline = T0 + HOUR
    d3 = deadline + 4 + HOUR
    d5 = d3 + 3 + HOUR
    script: list[Step] = [
        event_envelope(KEY, "refund", b"A1", time_ms=T0),
        export_request_envelope(KEY, "before-deadline", time_ms=T0 + 1),
        Watermark(deadline + 1),
        export_request_envelope(KEY, "after-deadline", time_ms=deadline + 2),
        # Too late: the timeout already resolved the suspension.
        tool_result_envelope(KEY, refund, payload=b"late", time_ms=deadline + 3),
        event_envelope(KEY, "act", b"o1", time_ms=deadline + 4),  # seq 3 suspends until d3
        tool_result_envelope(KEY, intent_of(KEY, 3), time_ms=deadline + 5),  # seq 4 ends it
        Watermark(d3 + 1),  # past d3: nothing may fire for a suspension that ended
        export_request_envelope(KEY, "past-d3", time_ms=d3 + 2),
        event_envelope(KEY, "act", b"o2", time_ms=d3 + 3),  # seq 5 suspends until d5
    ]
    got = run_agent("streaming", script, tmp_path, config=SUITE_CONFIG)
    assert got.snapshot("before-deadline").HasField("continuation")
    after = got.snapshot("after-deadline")
    assert after.seq == 2 and not after.HasField("continuation") and list(after.pending) == []
    assert got.activation(KEY, 2)[0].start_ms == deadline
    [late] = got.errors
    assert late.code == REJECTED_TRIGGER and late.raw.endswith(b"late")
    past_d3 = got.snapshot("past-d3")
    assert past_d3.seq == 4 and not past_d3.HasField("continuation")
    # The final watermark fires d5's timer: seq 6 is its timeout, nothing else ran.
    assert got.seqs(KEY) == [1, 2, 3, 4, 5, 6]
    assert got.outputs_of(KEY) == [
        f"2:timeout:{deadline}".encode(),
        b"4:result:OK:",
        f"6:timeout:{d5}".encode(),
    ]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_base_exception_or_a_missing_return_fails_one_activation_not_the_pipeline(
    runner: str, tmp_path: Path
) -> None:
    """SystemExit from agent code failed the whole pipeline after 4 bundle attempts, and
    ``return None`` committed as if done. Each now fails its own activation: traced,
    dead-lettered with its bytes, nothing committed, and the key carries on."""
    kinds = ["exit", "interrupt", "genexit", "forget"]
    steps: list[Step] = [
        event_envelope(KEY, kind, b"x", time_ms=T0 + n, envelope_id=kind)
        for n, kind in enumerate(kinds)
    ]
    steps.append(event_envelope(KEY, "echo", b"still here", time_ms=T0 + 10))
    got = run_agent(runner, steps, tmp_path, config=AgentConfig(provider_factory=make_provider))
    failed = {e.seq: ActivationFailed.of(e).error_type for e in got.events
              if e.kind == TraceEvent.ACTIVATION_FAILED}  # fmt: skip
    assert failed == {
        1: "SystemExit",
        2: "KeyboardInterrupt",
        3: "GeneratorExit",
        4: "beam_agents.errors.AgentResultError",
    }
    assert sorted((e.envelope_id, e.seq, str(e.code)) for e in got.errors) == sorted(
        (kind, n + 1, "activation_failed") for n, kind in enumerate(kinds)
    )
    assert got.outputs_of(KEY) == [b"5:echo:still here:ok:still here"]


def test_an_activation_failed_by_a_base_exception_replays_to_its_traced_failure(
    tmp_path: Path,
) -> None:
    """Replay refused these (exit 2, "the pipeline would have lost its worker there") after
    the pipeline began to contain them: one implementation, two call sites, so replay
    contains them too and judges the failure the pipeline traced."""
    kinds = ["exit", "interrupt", "genexit", "forget"]
    envelopes = [
        event_envelope(KEY, kind, b"x", time_ms=T0 + n, envelope_id=kind)
        for n, kind in enumerate(kinds)
    ]
    steps: list[Step] = [*envelopes, export_request_envelope(KEY, "after", time_ms=T0 + 20)]
    got = run_agent("batch", steps, tmp_path, config=AgentConfig(provider_factory=make_provider))
    snapshot, traces = tmp_path / "snapshot.pb", tmp_path / "traces.pb"
    snapshot.write_bytes(got.snapshot("after").SerializeToString())
    write_trace_stream(traces, got.events)
    for seq, envelope in enumerate(envelopes, start=1):
        event = tmp_path / f"event-{seq}.pb"
        event.write_bytes(envelope.SerializeToString())
        out = subprocess.run(
            [
                str(Path(sys.executable).with_name("beam-agents-replay")),
                "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event),
                "--seq", str(seq), "--agent", "agents:SHOP_AGENT", "--registry", "agents:SHOP_TOOLS",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        )  # fmt: skip
        assert out.returncode == 0, (envelope.event.type, out.stdout, out.stderr)
        assert "\nreproduced\n" in out.stdout, out.stdout


@pytest.mark.parametrize("runner", ["batch", "fnapi_multi"])
def test_the_provider_is_built_on_the_worker_and_never_pickled(runner: str, tmp_path: Path) -> None:
    config = AgentConfig(provider_factory=make_unpicklable_provider)
    script = [event_envelope(KEY, "echo", b"a", time_ms=T0)]
    got = run_agent(runner, script, tmp_path, config=config)
    assert got.outputs_of(KEY) == [b"1:echo:a:ok:a"]


@pytest.mark.parametrize("runner", ["batch", "fnapi_multi"])
def test_an_agent_pickled_by_value_may_hold_and_use_messages(runner: str, tmp_path: Path) -> None:
    """A class defined in a script or function is pickled by value, with what it references."""
    from beam_agents import Agent, Done
    from beam_agents._protos import ToolResult
    from beam_agents.testing import chat_request

    request = chat_request("test-model", ("user", "status?"))

    class LocalAgent(Agent):
        def start(self, ctx: object, event: object) -> Done:
            answer = ctx.complete(request)  # type: ignore[attr-defined]
            status = ToolResult.Status.Name(ToolResult.OK)
            return Done(output=f"1:{status}:{answer.text}".encode())

    got = run_agent(runner, [event_envelope(KEY, "x", time_ms=T0)], tmp_path, agent=LocalAgent())
    assert got.outputs_of(KEY) == [b"1:OK:ok:status?"]


@pytest.mark.parametrize("runner", ["batch", "fnapi"])
def test_windowed_input_still_gives_one_history_per_key(runner: str, tmp_path: Path) -> None:
    import apache_beam as beam
    from apache_beam.transforms.window import FixedWindows, TimestampedValue

    envelopes = [
        event_envelope(KEY, "echo", b"a", time_ms=T0),
        event_envelope(KEY, "echo", b"b", time_ms=T0 + 60_000),  # another one-second window
    ]
    with new_pipeline(runner) as p:
        outs = (
            p
            | beam.Create(
                [
                    TimestampedValue(e.SerializeToString(), e.event_time_ms / 1000)
                    for e in envelopes
                ],
                reshuffle=False,
            )
            | beam.WindowInto(FixedWindows(1))
            | RunAgent(SHOP_AGENT, SHOP_TOOLS, SUITE_CONFIG)
        )
        collect(outs.outputs, tmp_path, "outputs")
    assert sorted(o for _, o in read_collected(tmp_path, "outputs")) == [
        b"1:echo:a:ok:a",
        b"2:echo:b:ok:b",
    ]


def test_run_agent_refuses_wrong_arguments_naming_them() -> None:
    with pytest.raises(ConfigError, match="agent must be an Agent"):
        RunAgent("not an agent", SHOP_TOOLS, SUITE_CONFIG)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="registry must be a ToolRegistry"):
        RunAgent(SHOP_AGENT, [], SUITE_CONFIG)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config must be an AgentConfig"):
        RunAgent(SHOP_AGENT, SHOP_TOOLS, {"traces_to": None})  # type: ignore[arg-type]


def test_traces_are_split_from_one_batch_per_activation_only_when_read() -> None:
    import apache_beam as beam

    def labels(pipeline: beam.Pipeline) -> list[str]:
        seen: list[str] = []

        class Visitor(beam.pipeline.PipelineVisitor):  # type: ignore[misc]
            def visit_transform(self, node: object) -> None:
                seen.append(node.full_label)  # type: ignore[attr-defined]

        pipeline.visit(Visitor())
        return seen

    p = new_pipeline("batch")
    outs = p | beam.Create([b""]) | RunAgent(SHOP_AGENT, SHOP_TOOLS, SUITE_CONFIG)
    assert not any("TraceEvents" in label for label in labels(p))
    first, again = outs.traces, outs.traces
    assert first is again
    assert [label for label in labels(p) if "TraceEvents" in label] == [
        "TraceEvents(RunAgent/AgentDoFn/ParDo(AgentDoFn))"
    ]
    assert "trace_batches" in outs._fields and "traces" not in outs._fields


def test_a_runner_without_state_and_timers_is_refused_in_one_paragraph() -> None:
    """Beam's Dask runner has no user state or timers: it died with a bare AssertionError."""
    pytest.importorskip("dask", reason="Beam's Dask runner needs dask (the dev group has it)")
    from apache_beam.runners.dask.dask_runner import DaskRunner

    pipeline = beam.Pipeline(runner=DaskRunner(), options=PipelineOptions(flags=[]))
    with pytest.raises(ConfigError) as caught, pipeline as p:
        _ = p | beam.Create([b"x"]) | RunAgent(SHOP_AGENT, SHOP_TOOLS, SUITE_CONFIG)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("RunAgent cannot run on DaskRunner:")
    assert "state" in message and "timer" in message and "FnApiRunner" in message
