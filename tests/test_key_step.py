"""KeyStep: one key's handling of one input, without Beam (what AgentDoFn does per element).

The step is driven here on a ``MemoryKeyStore``; tests/pipeline/test_agent_dofn.py runs the
same input stream through the DoFn on a real runner and compares the two.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from core_agents import AGENT, TOOLS, make_provider

from beam_agents import Agent, Done, HitlPolicy, ToolRegistry
from beam_agents._protos import AgentEnvelope, Event, StateSnapshot, TraceEvent
from beam_agents.activation import ActivationCommit, ActivationFailure
from beam_agents.context import AgentContext, derive_intent_id
from beam_agents.dead_letter import (
    INBOX_OVERFLOW,
    MALFORMED_ENVELOPE,
    NO_BODY,
    REJECTED_TRIGGER,
    STATE_UNREADABLE,
)
from beam_agents.key_state import StateCells, load_key_state, load_snapshot
from beam_agents.key_step import (
    Emit,
    HitlDeadline,
    KeyStep,
    MemoryKeyStore,
    StepResult,
    TimerTarget,
    activation_runner,
)
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_view import ActivationStart, Trigger

KEY = b"customer-42"
T0 = 1_734_000_000_000
HOUR = 3_600_000
HITL = HitlPolicy(hitl_timeout_ms=HOUR)


def step_for(
    agent: Agent = AGENT, registry: ToolRegistry = TOOLS, *, inbox_limit: int = 8
) -> KeyStep:
    activate = activation_runner(agent, registry, make_provider(), hitl=HITL)
    return KeyStep(activate, inbox_limit=inbox_limit)


def raw(envelope: AgentEnvelope) -> bytes:
    return envelope.SerializeToString()


def event(text: str, at: int) -> bytes:
    return raw(event_envelope(KEY, "message", text.encode(), time_ms=T0 + at))


def suspended_key(step: KeyStep) -> tuple[MemoryKeyStore, StepResult]:
    """A key whose seq-1 activation staged an approval-gated refund and suspended on it."""
    store = MemoryKeyStore()
    result = step.handle(KEY, event("refund please", 0), store)
    assert load_key_state(store.cells).continuation is not None
    return store, result


def approve_and_answer(step: KeyStep, store: MemoryKeyStore) -> StepResult:
    """Approve the refund (the key stays suspended, awaiting its result), then answer it."""
    refund = derive_intent_id(KEY, 1, 0)
    approved = step.handle(
        KEY, raw(approval_envelope(KEY, refund, approved=True, time_ms=T0 + 9)), store
    )
    assert [a.seq for a in approved.activations] == [2] and approved.of(Emit.INTENTS)
    assert load_key_state(store.cells).continuation is not None and store.inbox
    return step.handle(KEY, raw(tool_result_envelope(KEY, refund, time_ms=T0 + 10)), store)


def starts(result: StepResult) -> list[ActivationStart]:
    """The ACTIVATION_START view of each trace batch emitted, in order."""
    views = []
    for _, batch in result.of(Emit.TRACE_BATCHES):
        first = TraceEvent.FromString(batch[0])
        views.append(ActivationStart.of(first))
    return views


def test_a_start_takes_the_next_seq_commits_and_emits_its_trace_then_its_output() -> None:
    step, store = step_for(), MemoryKeyStore()
    result = step.handle(KEY, event("where is A1", 0), store)
    assert [tag for tag, _ in result.emitted] == [Emit.TRACE_BATCHES, Emit.OUTPUTS]
    assert result.outputs == (b"answer to: where is A1",)
    [commit] = result.activations
    assert isinstance(commit, ActivationCommit) and commit.seq == 1
    assert store.seq == 1 and store.cells == commit.cells
    assert result.timer is None  # not suspended before or after: the timer is not touched
    again = step.handle(KEY, event("and now?", 1), store)
    assert [a.seq for a in again.activations] == [2] and store.seq == 2
    assert load_key_state(store.cells).memory["turns"] == 2


def test_a_suspension_sets_the_timer_at_its_deadline_and_emits_the_approval_request() -> None:
    _, result = suspended_key(step_for())
    assert result.timer == TimerTarget(T0 + HOUR)
    [request] = result.of(Emit.APPROVALS)
    assert request[0] == KEY
    assert len(result.of(Emit.INTENTS)) == 1  # send_email needs no approval: released now


def test_an_event_for_a_suspended_key_is_queued_and_nothing_else_changes() -> None:
    step = step_for()
    store, _ = suspended_key(step)
    cells, seq = store.cells, store.seq
    queued = step.handle(KEY, event("hello?", 5), store)
    assert queued == StepResult(queued=True)
    assert store.inbox == [event("hello?", 5)]
    assert (store.cells, store.seq) == (cells, seq)


def test_a_full_inbox_refuses_the_event_with_inbox_overflow() -> None:
    step = step_for(inbox_limit=1)
    store, _ = suspended_key(step)
    step.handle(KEY, event("first", 5), store)
    refused = step.handle(KEY, event("second", 6), store)
    [error] = refused.errors
    assert error.code is INBOX_OVERFLOW and "inbox_limit=1" in error.reason
    assert error.raw == event("second", 6) and not refused.queued
    assert store.inbox == [event("first", 5)]


def test_a_resume_that_ends_the_suspension_drains_the_inbox_each_with_its_own_seq() -> None:
    step = step_for()
    store, _ = suspended_key(step)
    step.handle(KEY, event("one", 5), store)
    step.handle(KEY, event("two", 6), store)
    result = approve_and_answer(step, store)
    assert [a.seq for a in result.activations] == [3, 4, 5]
    assert [(s.trigger, s.seq) for s in starts(result)] == [
        (Trigger.TOOL_RESULT, 3),
        (Trigger.EVENT, 4),
        (Trigger.EVENT, 5),
    ]
    assert result.outputs[1:] == (b"answer to: one", b"answer to: two")
    assert store.inbox == [] and store.seq == 5
    assert result.timer == TimerTarget(None)  # it was set at the deadline: clear it


def test_a_queued_refund_suspends_again_and_the_rest_stays_queued() -> None:
    step = step_for()
    store, _ = suspended_key(step)
    step.handle(KEY, event("refund again", 5), store)
    step.handle(KEY, event("later", 6), store)
    result = approve_and_answer(step, store)
    assert [a.seq for a in result.activations] == [3, 4]
    assert store.inbox == [event("later", 6)]
    # Suspended again, on the queued event's clock: the timer moves to its deadline.
    assert result.timer == TimerTarget(T0 + 5 + HOUR)


def test_the_deadline_firing_resumes_with_a_timeout_and_a_stale_one_changes_nothing() -> None:
    step = step_for()
    store, _ = suspended_key(step)
    cells = store.cells
    stale = step.handle(KEY, HitlDeadline(T0 + HOUR - 1), store)
    assert stale == StepResult(stale_timer=True) and store.cells is cells and store.seq == 1
    fired = step.handle(KEY, HitlDeadline(T0 + HOUR), store)
    [resume] = fired.activations
    assert resume.seq == 2 and starts(fired)[0].trigger == Trigger.TIMEOUT
    assert load_key_state(store.cells).continuation is None
    assert fired.timer is None  # a fired timer is set nowhere: nothing to clear
    late = step.handle(KEY, HitlDeadline(T0 + HOUR), store)
    assert late == StepResult(stale_timer=True)


def test_an_export_copies_the_cells_and_changes_nothing() -> None:
    step = step_for()
    store, _ = suspended_key(step)
    cells = store.cells
    request = export_request_envelope(KEY, "incident-7", time_ms=T0 + 50)
    result = step.handle(KEY, raw(request), store)
    [snapshot_bytes] = result.snapshots
    snapshot, state = load_snapshot(snapshot_bytes)
    assert snapshot.seq == 1 and snapshot.request_id == "incident-7"
    assert snapshot.snapshot_at_ms == T0 + 50
    assert state.continuation is not None
    assert result.activations == () and result.timer is None
    assert store.cells is cells and store.seq == 1
    assert StateSnapshot.FromString(snapshot_bytes).entity_key == KEY


@pytest.mark.parametrize(
    ("envelope_bytes", "code", "says"),
    [
        (b"\xff\xff", MALFORMED_ENVELOPE, "do not parse"),
        (raw(AgentEnvelope(entity_key=KEY, envelope_id="e0")), NO_BODY, "no body"),
        (
            raw(approval_envelope(KEY, "in-nope", approved=True, time_ms=T0, envelope_id="a1")),
            REJECTED_TRIGGER,
            "'in-nope'",
        ),
        (
            raw(tool_result_envelope(KEY, "in-nope", time_ms=T0, envelope_id="r1")),
            REJECTED_TRIGGER,
            "'in-nope'",
        ),
    ],
)
def test_a_refused_input_is_one_error_record_and_the_store_is_untouched(
    envelope_bytes: bytes, code: str, says: str
) -> None:
    step, store = step_for(), MemoryKeyStore()
    step.handle(KEY, event("hi", 0), store)
    cells = store.cells
    result = step.handle(KEY, envelope_bytes, store)
    [error] = result.errors
    assert error.code == code and says in error.reason
    assert error.raw == envelope_bytes and error.entity_key == KEY
    assert result.emitted == ((Emit.ERRORS, error),)
    assert store.cells is cells and store.seq == 1 and result.activations == ()


def test_a_state_this_binary_cannot_load_refuses_the_trigger_but_still_exports() -> None:
    step = step_for()
    store = MemoryKeyStore(seq=3, cells=StateCells(memory=b"\x0a\x03not a memory blob"))
    refused = step.handle(KEY, event("hi", 0), store)
    [error] = refused.errors
    assert error.code is STATE_UNREADABLE and store.seq == 3
    exported = step.handle(KEY, raw(export_request_envelope(KEY, "x", time_ms=T0)), store)
    [snapshot] = exported.snapshots
    assert StateSnapshot.FromString(snapshot).memory == b"\x0a\x03not a memory blob"


class BreaksOnFail(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Done:
        ctx.memory["touched"] = True
        if event.type == "fail":
            raise RuntimeError("agent code broke")
        return Done(output=b"fine")


def test_a_failed_activation_takes_its_seq_and_emits_its_trace_but_commits_nothing() -> None:
    step, store = step_for(BreaksOnFail(), ToolRegistry([])), MemoryKeyStore()
    failed = step.handle(KEY, raw(event_envelope(KEY, "fail", time_ms=T0)), store)
    [failure] = failed.activations
    assert isinstance(failure, ActivationFailure) and failure.seq == 1
    # Its trace, then its envelope dead-lettered (agent code broke: no retry can cure it).
    assert [tag for tag, _ in failed.emitted] == [Emit.TRACE_BATCHES, Emit.ERRORS]
    [record] = failed.errors
    assert (record.code, record.seq, record.error_type) == (
        "activation_failed",
        1,
        "RuntimeError",
    )
    assert store.seq == 1 and store.cells == StateCells() and store.hold == b""
    ok = step.handle(KEY, raw(event_envelope(KEY, "ok", time_ms=T0 + 1)), store)
    assert ok.outputs == (b"fine",) and store.seq == 2


def test_the_step_runs_the_activate_it_was_given() -> None:
    calls: list[tuple[bytes, int, int]] = []
    inner = activation_runner(AGENT, TOOLS, make_provider(), hitl=HITL)

    def activate(
        key: bytes, seq: int, state: Any, trigger: Any, decision: Any, *, now_ms: int
    ) -> Any:
        calls.append((key, seq, now_ms))
        return inner(key, seq, state, trigger, decision, now_ms=now_ms)

    store = MemoryKeyStore()
    KeyStep(activate, inbox_limit=1).handle(KEY, event("hi", 7), store)
    assert calls == [(KEY, 1, T0 + 7)]


def test_the_step_does_not_import_beam() -> None:
    code = "import sys, beam_agents.key_step; print('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
