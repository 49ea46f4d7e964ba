"""AgentDoFn: which cells and timers each trigger touches, and old blobs migrated in the pipeline.

The first part calls the DoFn's Beam entry points (``process``, ``on_hitl_deadline``)
with recording stand-ins for Beam's state cells and timer, so every write and every
timer call can be asserted exactly. The last part runs real runners.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from agents import SHOP_AGENT, SHOP_TOOLS, ShopAgent, make_provider, make_unpicklable_provider
from apache_beam.internal import pickler
from apache_beam.pvalue import TaggedOutput
from apache_beam.utils.timestamp import Timestamp
from pipeline_harness import RUNNERS, SEED, T0, Watermark, run_dofn, run_seeded

from beam_agents import AgentConfig, HitlPolicy
from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent, VersionedBlob
from beam_agents.agent import Inbound, Outcome
from beam_agents.blobs import load_memory, unwrap_blob
from beam_agents.context import AgentContext, derive_intent_id
from beam_agents.dead_letter import STATE_UNREADABLE
from beam_agents.key_state import StateCells, load_snapshot
from beam_agents.key_step import Emit
from beam_agents.migrations import CURRENT_VERSIONS
from beam_agents.pipeline import ErrorRecord
from beam_agents.pipeline.agent_dofn import AgentDoFn
from beam_agents.telemetry import ActivationTelemetry
from beam_agents.testing import (
    PipelineKey,
    StepResult,
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)

KEY = b"customer-42"
HOUR = 3_600_000
CONFIG = AgentConfig(
    provider_factory=make_provider,
    hitl=HitlPolicy(hitl_timeout_ms=HOUR, approval_channel="refunds"),
)
CELL_NAMES = (
    "seq",
    "memory",
    "llm_cache",
    "continuation",
    "pending",
    "resume_history",
    "tool_cache",
    "inbox",
    "hold",
)


class RecordingCell:
    """Stands in for a Beam ReadModifyWriteState: holds a value, records every write."""

    def __init__(self) -> None:
        self.value: Any = None
        self.writes: list[Any] = []

    def read(self) -> Any:
        return self.value

    def write(self, value: Any) -> None:
        self.value = value
        self.writes.append(value)

    def clear(self) -> None:
        self.value = None
        self.writes.append("<cleared>")


class RecordingTimer:
    """Stands in for a Beam timer: records set/clear calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def set(self, timestamp: Timestamp) -> None:
        self.calls.append(("set", timestamp.micros // 1000))

    def clear(self) -> None:
        self.calls.append(("clear", None))


class FakeKey:
    """One key's cells and timer, driven through the DoFn's Beam entry points."""

    def __init__(self, dofn: AgentDoFn) -> None:
        self.dofn = dofn
        self.cells = {name: RecordingCell() for name in CELL_NAMES}
        self.timer = RecordingTimer()
        self.retry_timer = RecordingTimer()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {f"{name}_cell": cell for name, cell in self.cells.items()}
        params["timer"] = self.timer
        params["retry_timer"] = self.retry_timer
        return params

    def send(self, envelope: Any) -> dict[str, list[Any]]:
        raw = envelope.SerializeToString()
        return _by_tag(self.dofn.process((KEY, raw), **self._params()))

    def fire(self, at_ms: int) -> dict[str, list[Any]]:
        fired = Timestamp(micros=at_ms * 1000)
        return _by_tag(self.dofn.on_hitl_deadline(key=KEY, fired_at=fired, **self._params()))

    def fire_retry(self, at_ms: int) -> dict[str, list[Any]]:
        fired = Timestamp(micros=at_ms * 1000)
        return _by_tag(self.dofn.on_retry_due(key=KEY, fired_at=fired, **self._params()))

    def writes(self) -> dict[str, list[Any]]:
        return {name: list(cell.writes) for name, cell in self.cells.items()}


def _by_tag(outputs: Any) -> dict[str, list[Any]]:
    tagged: dict[str, list[Any]] = {}
    for item in outputs:
        if isinstance(item, TaggedOutput):
            tagged.setdefault(item.tag, []).append(item.value)
        else:
            tagged.setdefault(AgentDoFn.TAG_OUTPUTS, []).append(item)
    return tagged


def new_key(config: AgentConfig = CONFIG, agent: Any = SHOP_AGENT) -> FakeKey:
    dofn = AgentDoFn(agent, SHOP_TOOLS, config)
    dofn.setup()
    return FakeKey(dofn)


def suspended_key() -> FakeKey:
    key = new_key()
    key.send(event_envelope(KEY, "refund", b"A1", time_ms=T0))
    return key


# --------------------------------------------------------------------------- exports


def test_an_export_writes_no_cell_sets_no_timer_and_moves_no_seq() -> None:
    key = suspended_key()
    writes, timer_calls = key.writes(), list(key.timer.calls)
    out = key.send(export_request_envelope(KEY, "r1", time_ms=T0 + 5))
    assert key.writes() == writes
    assert key.timer.calls == timer_calls
    [(exported_key, data)] = out[AgentDoFn.TAG_SNAPSHOTS]
    assert exported_key == KEY and set(out) == {AgentDoFn.TAG_SNAPSHOTS}
    snapshot = StateSnapshot.FromString(data)
    assert snapshot.seq == 1 and snapshot.request_id == "r1" and snapshot.snapshot_at_ms == T0 + 5
    assert snapshot.memory == key.cells["memory"].value
    assert snapshot.llm_cache == key.cells["llm_cache"].value
    assert snapshot.HasField("continuation")
    assert data == snapshot.SerializeToString(deterministic=True)


def test_an_export_still_answers_when_this_binary_cannot_load_the_state() -> None:
    key = new_key()
    too_new = VersionedBlob(kind="memory", schema_version=99, body=b"{}").SerializeToString()
    key.cells["memory"].value = too_new
    out = key.send(export_request_envelope(KEY, "r1", time_ms=T0))
    [(_, data)] = out[AgentDoFn.TAG_SNAPSHOTS]
    assert StateSnapshot.FromString(data).memory == too_new


# --------------------------------------------------------------------------- commits


def test_an_activation_writes_seq_and_only_the_cells_that_changed() -> None:
    key = new_key()
    key.send(event_envelope(KEY, "echo", b"a", time_ms=T0))
    writes = key.writes()
    assert writes["seq"] == [1]
    assert len(writes["memory"]) == 1 and len(writes["llm_cache"]) == 1
    # Not suspended, no intents: continuation stays empty, the inbox is not touched.
    assert writes["continuation"] == [] and writes["inbox"] == []
    assert key.timer.calls == []


def test_a_failed_activation_writes_only_seq() -> None:
    key = new_key()
    key.send(event_envelope(KEY, "echo", b"a", time_ms=T0))
    before = key.writes()
    out = key.send(event_envelope(KEY, "fail_call", b"x", time_ms=T0 + 1))
    after = key.writes()
    assert after["seq"] == [*before["seq"], 2]
    assert {n: w for n, w in after.items() if n != "seq"} == {
        n: w for n, w in before.items() if n != "seq"
    }
    assert AgentDoFn.TAG_OUTPUTS not in out
    [(batch_key, trace, _)] = out[AgentDoFn.TAG_TRACE_BATCHES]  # one element per activation
    assert batch_key == KEY and len(trace) >= 2


def test_each_trace_batch_carries_the_activations_wall_times_beside_its_unchanged_trace() -> None:
    """The side channel: real times next to the trace, never in it (the trace bytes are the
    Beam-free step's, which measures nothing)."""
    envelopes = [
        event_envelope(KEY, "echo", b"a", time_ms=T0),
        event_envelope(KEY, "fail_call", b"x", time_ms=T0 + 1),
    ]
    key = new_key()
    before = time.time_ns()
    batches = [b for e in envelopes for b in key.send(e)[AgentDoFn.TAG_TRACE_BATCHES]]
    after = time.time_ns()
    step = PipelineKey(SHOP_AGENT, SHOP_TOOLS, CONFIG, entity_key=KEY)
    from_step = [b for e in envelopes for b in step.send(e).of(Emit.TRACE_BATCHES)]
    assert [(k, events) for k, events, _ in batches] == [tuple(b) for b in from_step]
    for (_, events, raw), name in zip(batches, ("ShopAgent", "ShopAgent"), strict=True):
        telemetry = ActivationTelemetry.decode(raw)
        assert telemetry is not None and telemetry.agent_name == name
        assert telemetry.provider_name == make_provider().name
        assert len(telemetry.spans) == len(events)
        root = telemetry.span_unix_ns(0)
        assert root is not None and before <= root[0] <= root[1] <= after
        for index in range(1, len(events)):
            span = telemetry.span_unix_ns(index)
            assert span is not None and root[0] <= span[0] <= span[1] <= root[1]
    assert 1 in ActivationTelemetry.decode(batches[0][2]).llm_calls  # type: ignore[union-attr]


def test_a_step_running_several_activations_gives_each_trace_batch_its_own_wall_times() -> None:
    """A resume that drains the inbox runs three activations in one step: each trace batch
    carries the telemetry of its own activation (found by its SEQ, in order), none other's."""
    key = new_key()
    shipped = derive_intent_id(KEY, 1, 0)
    key.send(event_envelope(KEY, "act", b"o-1", time_ms=T0))  # seq 1 suspends on `shipped`
    key.send(event_envelope(KEY, "echo", b"queued-1", time_ms=T0 + 1))
    key.send(event_envelope(KEY, "fail_call", b"x", time_ms=T0 + 2))
    resumed = tool_result_envelope(KEY, shipped, payload=b"sent", time_ms=T0 + 3)
    batches = key.send(resumed)[AgentDoFn.TAG_TRACE_BATCHES]
    assert len(batches) == 3  # the resume, then the two queued events
    seqs = [TraceEvent.FromString(events[0]).seq for _, events, _ in batches]
    assert seqs == [2, 3, 4]
    counts = [len(events) for _, events, _ in batches]
    assert len(set(counts)) > 1  # different lengths: a mix-up would show below
    for _, events, raw in batches:
        telemetry = ActivationTelemetry.decode(raw)
        assert telemetry is not None and len(telemetry.spans) == len(events)


def test_a_refused_trigger_writes_nothing() -> None:
    key = suspended_key()
    writes = key.writes()
    out = key.send(tool_result_envelope(KEY, "in-unknown", time_ms=T0 + 1))
    [error] = out[AgentDoFn.TAG_ERRORS]
    assert isinstance(error, ErrorRecord) and "in-unknown" in error.reason
    assert key.writes() == writes


def test_a_state_this_binary_cannot_load_refuses_the_trigger_and_keeps_the_state() -> None:
    key = new_key()
    too_new = VersionedBlob(kind="memory", schema_version=99, body=b"{}").SerializeToString()
    key.cells["memory"].value = too_new
    envelope = event_envelope(KEY, "echo", b"a", time_ms=T0)
    out = key.send(envelope)
    [error] = out[AgentDoFn.TAG_ERRORS]
    assert error.code == STATE_UNREADABLE
    assert "version 99" in error.reason and error.raw == envelope.SerializeToString()
    assert all(w == [] for w in key.writes().values())


# --------------------------------------------------------------------------- HITL timer


def test_suspending_sets_the_timer_at_the_deadline_and_ending_it_clears_it() -> None:
    key = suspended_key()
    assert key.timer.calls == [("set", T0 + HOUR)]
    refund = derive_intent_id(KEY, 1, 0)
    # Approved: the intent is released but the key still awaits its result: timer kept.
    key.send(approval_envelope(KEY, refund, approved=True, time_ms=T0 + 1))
    assert key.timer.calls == [("set", T0 + HOUR)]
    key.send(tool_result_envelope(KEY, refund, time_ms=T0 + 2))
    assert key.timer.calls == [("set", T0 + HOUR), ("clear", None)]


def test_the_timer_runs_a_timeout_on_its_own_clock() -> None:
    key = suspended_key()
    out = key.fire(T0 + HOUR)
    assert out[AgentDoFn.TAG_OUTPUTS] == [(KEY, f"2:timeout:{T0 + HOUR}".encode())]
    assert key.cells["seq"].value == 2
    assert key.cells["continuation"].value is None
    # The timer that fired is gone; nothing to clear.
    assert key.timer.calls == [("set", T0 + HOUR)]


def test_a_stale_timer_is_ignored() -> None:
    key = suspended_key()
    writes = key.writes()
    assert key.fire(T0 + HOUR - 1) == {}
    assert key.writes() == writes
    done = new_key()
    done.send(event_envelope(KEY, "echo", b"a", time_ms=T0))
    assert done.fire(T0 + HOUR) == {}


class FailingResumeAgent(ShopAgent):
    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise RuntimeError("resume broke")


def test_a_failed_timeout_resume_takes_its_seq_and_does_not_rearm_the_timer() -> None:
    key = new_key(agent=FailingResumeAgent())
    key.send(event_envelope(KEY, "refund", b"A1", time_ms=T0))
    out = key.fire(T0 + HOUR)
    assert AgentDoFn.TAG_OUTPUTS not in out
    assert key.cells["seq"].value == 2
    assert key.cells["continuation"].value is not None  # still suspended, nothing committed
    # Re-arming at a deadline already passed would fire again at once, forever.
    assert key.timer.calls == [("set", T0 + HOUR)]


# --------------------------------------------------------------------------- provider


class CountingFactory:
    """A provider factory counting its calls (in this process)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return make_unpicklable_provider()


def test_the_provider_is_built_once_per_instance_in_setup_and_never_pickled() -> None:
    factory = CountingFactory()
    dofn = AgentDoFn(SHOP_AGENT, SHOP_TOOLS, AgentConfig(provider_factory=factory))
    assert factory.calls == 0
    dofn.setup()
    assert factory.calls == 1
    # After setup the instance holds an unpicklable client, and still pickles without it.
    with pytest.raises(TypeError):
        pickle.dumps(dofn._provider)
    clone = pickler.loads(pickler.dumps(dofn))
    assert clone._provider is None


# --------------------------------------------------------------------------- migration

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "blobs"
SEEDED_SEQ = 7


def golden(name: str) -> bytes:
    return (GOLDEN / f"{name}.bin").read_bytes()


def old_cells() -> StateCells:
    """A suspended key as a version-1 writer left it (tests/fixtures/blobs/*-v1.bin)."""
    return StateCells(
        memory=golden("memory-v1"),
        llm_cache=golden("llm_cache-v1"),
        continuation=golden("continuation-v1"),
        pending=golden("pending-v1"),
        resume_history=golden("resume_history-v1"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("runner", RUNNERS)
def test_old_blobs_are_exported_as_stored_and_written_current_on_the_next_commit(
    runner: str, tmp_path: Path
) -> None:
    awaited = f"{KEY.hex()}-{SEEDED_SEQ}-0"  # what the v1 continuation awaits
    old = old_cells()
    steps = [
        (KEY, SEED),
        export_request_envelope(KEY, "old", time_ms=T0 + 7_500),
        approval_envelope(KEY, awaited, approved=True, time_ms=T0 + 8_000),
        tool_result_envelope(KEY, awaited, payload=b"refunded", time_ms=T0 + 9_000),
        export_request_envelope(KEY, "new", time_ms=T0 + 9_500),
    ]
    got = run_seeded(runner, {KEY: (SEEDED_SEQ, old)}, steps, tmp_path, config=CONFIG)

    exported_old = got.snapshot("old")
    assert exported_old.seq == SEEDED_SEQ
    assert exported_old.memory == old.memory  # byte for byte: an export re-encodes nothing
    assert exported_old.llm_cache == old.llm_cache
    assert exported_old.continuation.schema_version == 1
    assert unwrap_blob("memory", exported_old.memory)[0] == 1

    # The old continuation resumed: released on approval (seq 8), then finished (seq 9).
    assert [i.intent_id for i in got.intents_of(KEY)] == [awaited]
    assert got.outputs_of(KEY) == [b"9:result:OK:refunded"]

    new = got.snapshot("new")
    assert new.seq == SEEDED_SEQ + 2
    assert unwrap_blob("memory", new.memory)[0] == CURRENT_VERSIONS["memory"]
    assert unwrap_blob("llm_cache", new.llm_cache)[0] == CURRENT_VERSIONS["llm_cache"]
    assert not new.HasField("continuation")
    old_memory = load_memory(old.memory)[0]
    assert load_memory(new.memory)[0] == {**old_memory, "resumed": 1}
    _, state = load_snapshot(new.SerializeToString())
    assert state.migrations_applied == []  # nothing left to migrate
    assert [r.seq for r in new.resumed_from] == [4, 6, 8, 9]
    assert got.errors == []


# --------------------------------------------------------------------------- the step it adapts

OTHER_KEY = b"customer-7"


def mixed_script() -> list[Any]:
    """Two keys through every path: commit, failure, suspend, queue, drain, reject, export, timer."""
    at = iter(range(T0, T0 + 100_000, 1_000))
    shipped = derive_intent_id(KEY, 2, 0)
    return [
        event_envelope(KEY, "echo", b"hi", time_ms=next(at)),
        event_envelope(KEY, "act", b"o-1", time_ms=next(at)),  # seq 2 suspends on `shipped`
        event_envelope(KEY, "echo", b"queued-1", time_ms=next(at)),
        event_envelope(KEY, "echo", b"queued-2", time_ms=next(at)),
        event_envelope(OTHER_KEY, "refund", b"r-1", time_ms=next(at)),
        export_request_envelope(KEY, "while-suspended", time_ms=next(at)),
        tool_result_envelope(KEY, shipped, payload=b"sent", time_ms=next(at)),  # drains 2 events
        tool_result_envelope(KEY, "in-unknown", time_ms=next(at)),
        event_envelope(KEY, "fail_call", b"x", time_ms=next(at)),
        approval_envelope(
            OTHER_KEY,
            derive_intent_id(OTHER_KEY, 1, 0),
            approved=False,
            reason="no",
            time_ms=next(at),
        ),
        AgentEnvelope(entity_key=KEY, envelope_id="no-body", event_time_ms=next(at)),
        event_envelope(KEY, "refund", b"r-2", time_ms=T0 + 50_000),  # times out (seq 8)
        # Rate limited until T0+40s: retried on the key (the echo waits behind it), then done.
        event_envelope(OTHER_KEY, "flaky", f"until={T0 + 40_000}".encode(), time_ms=T0 + 12_000),
        event_envelope(OTHER_KEY, "echo", b"behind", time_ms=T0 + 13_000),
        export_request_envelope(OTHER_KEY, "while-held", time_ms=T0 + 14_000),
        Watermark(T0 + 50_000 + HOUR + 1),
        export_request_envelope(KEY, "after", time_ms=T0 + 50_000 + HOUR + 2),
        export_request_envelope(OTHER_KEY, "other", time_ms=T0 + 50_000 + HOUR + 3),
    ]


def run_on_pipeline_keys(script: list[Any], *, watermarks: bool) -> dict[str, list[Any]]:
    """The script through one ``PipelineKey`` per key (the step without Beam), by output."""
    keys: dict[bytes, PipelineKey] = {}
    results: list[StepResult] = []

    def fire_due(ms: float) -> None:
        for key in keys.values():
            results.extend(key.advance_to(int(min(ms, 2**62))))

    for step in script:
        if isinstance(step, Watermark):
            if watermarks:
                fire_due(step.ms)
            continue
        key = keys.get(step.entity_key)
        if key is None:
            key = keys[step.entity_key] = PipelineKey(
                SHOP_AGENT, SHOP_TOOLS, CONFIG, entity_key=step.entity_key
            )
        results.append(key.send(step))
    fire_due(float("inf"))  # the watermark passes every timer when the input ends
    by_tag: dict[str, list[Any]] = {}
    for result in results:
        for tag, value in result.emitted:
            by_tag.setdefault(tag.value, []).append(value)
    return by_tag


def comparable(by_tag: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Each output as a sorted list (the runner's bundle order is not meaningful)."""
    out = {tag: sorted(values) for tag, values in by_tag.items() if tag != AgentDoFn.TAG_ERRORS}
    errors = by_tag.get(AgentDoFn.TAG_ERRORS, [])
    out[AgentDoFn.TAG_ERRORS] = sorted(errors, key=lambda e: (e.entity_key, e.envelope_id))
    return out


@pytest.mark.parametrize(
    ("runner", "max_in_flight"),
    # streaming: one element a bundle, so with 4 in flight activations outlive bundles.
    [("batch", 1), ("batch", 4), ("streaming", 1), ("streaming", 4), ("fnapi", 4)],
)
def test_the_dofn_emits_exactly_what_the_key_step_returns(
    runner: str, max_in_flight: int, tmp_path: Path
) -> None:
    """AgentDoFn on a real runner (serially, and with activations in flight across bundles)
    vs PipelineKey: same bytes."""
    script = mixed_script()
    config = dataclasses.replace(CONFIG, max_in_flight=max_in_flight)
    got = run_dofn(runner, AgentDoFn(SHOP_AGENT, SHOP_TOOLS, config), script, tmp_path)
    batches: dict[bytes, list[tuple[bytes, bytes]]] = {}
    for key, data in got.traces:
        batches.setdefault(key, []).append((key, data))
    from_dofn = {
        AgentDoFn.TAG_OUTPUTS: got.outputs,
        AgentDoFn.TAG_INTENTS: got.intents,
        AgentDoFn.TAG_APPROVALS: got.approvals,
        AgentDoFn.TAG_SNAPSHOTS: got.snapshots,
        AgentDoFn.TAG_ERRORS: got.errors,
        "trace events": got.traces,
    }
    from_step = run_on_pipeline_keys(script, watermarks=runner == "streaming")
    from_step["trace events"] = [
        (key, data) for key, events in from_step.pop(AgentDoFn.TAG_TRACE_BATCHES) for data in events
    ]
    assert comparable(from_dofn) == comparable(from_step)
    # The script did reach every path it names.
    assert {e.code for e in got.errors} == {"rejected_trigger", "no_body", "activation_failed"}
    assert len(got.snapshots) == 4 and len(got.approvals) == 2
    # The flaky event failed, was held and retried until it ran; the echo waited behind it.
    flaky = [o for k, o in got.outputs if k == OTHER_KEY and b":flaky:" in o]
    behind = [o for k, o in got.outputs if k == OTHER_KEY and b":behind:" in o]
    assert len(flaky) == len(behind) == 1 and int(flaky[0].split(b":")[0]) + 1 == int(
        behind[0].split(b":")[0]
    )
    assert b"4:echo:queued-1:ok:queued-1" in got.outputs_of(KEY)  # drained after the resume
    assert any(o.startswith(b"8:timeout:") for o in got.outputs_of(KEY))
