"""Nothing lost when an activation fails: the key's hold, its retries, its dead letters.

Driven through ``PipelineKey`` (the DoFn's own per-key step, without Beam). A scripted
model refuses every request whose activation clock falls in an outage window, as a
provider in a rate-limit storm would; the agents put the clock in the request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from beam_agents import Agent, AgentConfig, Done, HitlPolicy, Suspend, ToolRegistry, tool
from beam_agents._protos import AgentEnvelope, Event, LlmRequest, StateSnapshot, TraceEvent
from beam_agents.activation import ActivationCommit, ActivationFailure
from beam_agents.agent import Inbound, Outcome, Timeout
from beam_agents.context import AgentContext, derive_intent_id
from beam_agents.dead_letter import ErrorRecord
from beam_agents.errors import ProviderRateLimitError, ProviderUnavailableError
from beam_agents.key_step import StepResult
from beam_agents.retry import RetryPolicy
from beam_agents.testing import (
    PipelineKey,
    ScriptedProvider,
    chat_request,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_view import ActivationStart

KEY = b"customer-42"
T0 = 1_734_000_000_000
HOUR = 3_600_000
POLICY = RetryPolicy(max_attempts=3, initial_backoff_ms=10_000, jitter=0)


@tool(side_effect=True)
def ship(order: str) -> dict[str, Any]:  # pragma: no cover - never run by the pipeline
    raise AssertionError


TOOLS = ToolRegistry([ship])


class Outage:
    """The scripted model: refuses requests whose clock is in ``[start, end)``."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def __call__(self, request: LlmRequest) -> str:
        at = int(request.messages[-1].content.rsplit("at=", 1)[1])
        if self.start <= at < self.end:
            if at % 2:
                raise ProviderUnavailableError("scripted", "503 overloaded", status=503)
            raise ProviderRateLimitError("scripted", "429 slow down", status=429)
        return f"answered at {at}"


class DeskAgent(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        text = event.payload.decode()
        if event.type == "act":
            intent = ctx.act("ship", order=text)
            return Suspend(state={"intent": intent}, awaiting=[intent])
        if event.type == "crash":
            ctx.memory["crashed"] = True
            raise {"exit": SystemExit(3), "interrupt": KeyboardInterrupt(), "gen": GeneratorExit()}[
                text
            ]
        if event.type == "forget":
            ctx.memory["forgot"] = True
            return None  # type: ignore[return-value]  # the bug under test
        answer = ctx.complete(chat_request("m", ("user", f"{text} at={ctx.now_ms}")))
        ctx.memory[text] = answer.text
        return Done(output=f"{ctx.seq}:{text}:{answer.text}".encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        answer = ctx.complete(chat_request("m", ("user", f"resume at={ctx.now_ms}")))
        how = "timeout" if isinstance(inbound, Timeout) else "result"
        deadline = inbound.deadline_ms if isinstance(inbound, Timeout) else 0
        return Done(output=f"{ctx.seq}:{how}:{deadline}:{answer.text}".encode())


AGENT = DeskAgent()


def new_key(outage: Outage, *, policy: RetryPolicy = POLICY, inbox_limit: int = 100) -> PipelineKey:
    config = AgentConfig(
        provider_factory=lambda: ScriptedProvider(outage),
        retry=policy,
        inbox_limit=inbox_limit,
        hitl=HitlPolicy(hitl_timeout_ms=HOUR),
    )
    return PipelineKey(AGENT, TOOLS, config, entity_key=KEY)


def ask(text: str, at: int, kind: str = "ask") -> AgentEnvelope:
    return event_envelope(KEY, kind, text.encode(), time_ms=T0 + at, envelope_id=f"e-{text}")


def start_of(result: ActivationCommit | ActivationFailure) -> ActivationStart:
    return ActivationStart.of(result.trace[0])


def test_a_transient_failure_holds_the_envelope_and_retries_it_as_a_new_activation() -> None:
    key = new_key(Outage(T0, T0 + 15_000))
    first = key.send(ask("a", 0))
    [failure] = first.activations
    assert isinstance(failure, ActivationFailure) and failure.seq == 1
    assert first.errors == () and first.retries == (10_000,)
    assert key.retry_timer_ms == T0 + 10_000 and key.hold is not None
    assert key.cells.memory == b"" and key.seq == 1  # invariant 1: nothing but the seq
    # Later envelopes wait behind the held one, in arrival order; an export does not.
    assert key.send(ask("b", 20_000)).queued and key.send(ask("c", 21_000)).queued
    [snapshot] = key.send(export_request_envelope(KEY, "mid", time_ms=T0 + 3)).snapshots
    exported = StateSnapshot.FromString(snapshot)
    assert exported.seq == 1 and exported.memory == b""  # exactly the committed state
    second = key.fire_retry()  # T0+10s: still in the outage
    assert [a.seq for a in second.activations] == [2] and second.retries == (20_000,)
    assert start_of(second.activations[0]).envelope_id == "e-a"
    assert second.activations[0].trace[0].start_ms == T0 + 10_000  # its own clock
    third = key.fire_retry()  # T0+30s: the outage is over
    assert [type(a).__name__ for a in third.activations] == ["ActivationCommit"] * 3
    assert [a.seq for a in third.activations] == [3, 4, 5]
    assert third.outputs == (
        b"3:a:answered at 1734000030000",
        b"4:b:answered at 1734000020000",  # a waiting envelope runs on its own clock
        b"5:c:answered at 1734000021000",
    )
    assert key.hold is None and key.inbox == [] and key.retry_timer_ms is None


def test_past_the_policy_the_envelope_is_dead_lettered_with_every_attempt() -> None:
    key = new_key(Outage(T0, T0 + 10 * HOUR))
    raw = ask("a", 0).SerializeToString()
    key.send(raw)
    key.send(ask("b", 1))
    key.fire_retry()
    last = key.fire_retry()
    [record] = last.errors
    assert record.code == "retries_exhausted" and record.resendable
    assert (record.raw, record.envelope_id, record.seq) == (raw, "e-a", 3)
    assert [(a.seq, a.now_ms, a.wait_ms, a.transient) for a in record.attempts] == [
        (1, T0, 10_000, True),
        (2, T0 + 10_000, 20_000, True),
        (3, T0 + 30_000, 0, True),
    ]
    assert record.error_type.endswith("ProviderRateLimitError")  # T0+30s is even: a 429
    assert "max_attempts=3" in record.reason
    # Then the envelope behind it runs (and, still in the outage, starts a hold of its own,
    # its wait counted from when the key got to it, not from its own earlier clock).
    assert [a.seq for a in last.activations] == [3, 4] and key.hold is not None
    assert last.retries == (10_000,) and key.retry_timer_ms == T0 + 30_000 + 10_000
    assert ErrorRecord.from_json_bytes(record.to_json_bytes()) == record


@pytest.mark.parametrize("how", ["exit", "interrupt", "gen"])
def test_a_base_exception_from_agent_code_fails_that_activation_only(how: str) -> None:
    key = new_key(Outage(0, 0))
    crashed = key.send(ask(how, 0, kind="crash"))
    [failure] = crashed.activations
    assert isinstance(failure, ActivationFailure)
    assert failure.error_type == {"exit": "SystemExit", "interrupt": "KeyboardInterrupt",
                                  "gen": "GeneratorExit"}[how]  # fmt: skip
    assert failure.trace[-1].kind == TraceEvent.ACTIVATION_FAILED
    [record] = crashed.errors
    assert record.code == "activation_failed" and record.seq == 1  # no retry: permanent
    # Its message says what happened (str(SystemExit(3)) is "3", str(KeyboardInterrupt()) "").
    assert record.error == record.attempts[0].error == {
        "exit": "agent code raised SystemExit with exit status 3 (the worker did not exit)",
        "interrupt": "KeyboardInterrupt without a message",
        "gen": "GeneratorExit without a message",
    }[how]
    assert key.cells.memory == b""
    assert key.send(ask("next", 1)).outputs == (b"2:next:answered at 1734000000001",)


def test_an_agent_that_returns_none_fails_and_commits_nothing() -> None:
    key = new_key(Outage(0, 0))
    forgot = key.send(ask("x", 0, kind="forget"))
    [failure] = forgot.activations
    assert isinstance(failure, ActivationFailure)
    assert failure.error_type == "beam_agents.errors.AgentResultError"
    assert "returned NoneType" in str(failure.error) and "missing return" in str(failure.error)
    assert key.cells.memory == b"" and forgot.errors[0].code == "activation_failed"


def test_a_permanent_failure_after_transient_ones_is_dead_lettered_at_once() -> None:
    class Breaks(DeskAgent):
        def start(self, ctx: AgentContext, event: Event) -> Outcome:
            if ctx.seq == 2:
                raise ValueError("a bug on the second attempt")
            return super().start(ctx, event)

    config = AgentConfig(provider_factory=lambda: ScriptedProvider(Outage(T0, T0 + 5)),
                         retry=POLICY)  # fmt: skip
    key = PipelineKey(Breaks(), TOOLS, config, entity_key=KEY)
    key.send(ask("a", 0))
    [record] = key.fire_retry().errors
    assert record.code == "activation_failed"
    assert [(a.seq, a.transient) for a in record.attempts] == [(1, True), (2, False)]


def test_a_failed_resume_is_retried_and_its_result_is_not_lost() -> None:
    key = new_key(Outage(T0 + 100, T0 + 5_000))
    key.send(ask("o-1", 0, kind="act"))
    intent = derive_intent_id(KEY, 1, 0)
    result = tool_result_envelope(KEY, intent, time_ms=T0 + 100)
    held = key.send(result)
    assert isinstance(held.activations[0], ActivationFailure) and key.hold is not None
    assert key.state.continuation is not None  # still suspended, awaiting the same intent
    done = key.fire_retry()  # at T0+10.1s
    assert done.outputs == (b"3:result:0:answered at 1734000010100",)
    assert key.state.continuation is None and key.timer_ms is None


def test_a_timeout_resume_that_fails_transiently_is_retried_on_its_due_time() -> None:
    key = new_key(Outage(T0 + HOUR, T0 + HOUR + 5_000))
    key.send(ask("o-1", 0, kind="act"))
    assert key.timer_ms == T0 + HOUR
    fired = key.fire_timer()
    assert isinstance(fired.activations[0], ActivationFailure) and key.hold is not None
    assert key.hold.timeout and key.retry_timer_ms == T0 + HOUR + 10_000
    done = key.fire_retry()
    # Timeout.deadline_ms is the attempt's clock (replay rebuilds it from the trace so).
    due = T0 + HOUR + 10_000
    assert done.outputs == (f"3:timeout:{due}:answered at {due}".encode(),)


def test_a_hitl_deadline_that_passes_while_the_key_holds_a_trigger_waits_its_turn() -> None:
    """The key suspends, its tool result fails transiently and is held, a second envelope
    waits; the HITL deadline passes meanwhile. The retry succeeds: the suspension ended,
    so the deferred deadline is stale and the waiting event runs."""
    key = new_key(Outage(T0 + HOUR - 5, T0 + HOUR - 4))
    key.send(ask("o-1", 0, kind="act"))
    key.send(tool_result_envelope(KEY, derive_intent_id(KEY, 1, 0), time_ms=T0 + HOUR - 5))
    assert key.send(ask("later", HOUR - 4)).queued
    deferred = key.fire_timer()
    assert deferred.deferred_deadline and deferred.activations == ()
    assert key.hold is not None and key.hold.deferred_deadline_ms == T0 + HOUR
    done = key.fire_retry()
    assert [a.seq for a in done.activations] == [3, 4]
    assert [o.split(b":")[1] for o in done.outputs] == [b"result", b"later"]


def test_a_deferred_deadline_runs_in_its_place_when_the_retry_is_given_up() -> None:
    key = new_key(Outage(T0 + HOUR - 5, T0 + HOUR + 40_000), policy=RetryPolicy(
        max_attempts=2, initial_backoff_ms=10_000, jitter=0))  # fmt: skip
    key.send(ask("o-1", 0, kind="act"))
    key.send(tool_result_envelope(KEY, derive_intent_id(KEY, 1, 0), time_ms=T0 + HOUR - 5))
    assert key.fire_timer().deferred_deadline
    assert key.send(ask("after-deadline", HOUR + 50_000)).queued
    given_up = key.fire_retry()
    assert [e.code for e in given_up.errors] == ["retries_exhausted"]
    # The timeout resume ran on the deadline's clock (in the outage: held in turn), and
    # the event that arrived after the deadline waits behind it.
    kinds = [ActivationStart.of(a.trace[0]).trigger for a in given_up.activations]
    assert kinds == ["tool_result", "timeout"]
    assert given_up.activations[1].trace[0].start_ms == T0 + HOUR
    assert key.hold is not None and key.hold.timeout and len(key.inbox) == 1


def test_an_overflowing_inbox_behind_a_hold_dead_letters_with_the_bytes() -> None:
    key = new_key(Outage(T0, T0 + HOUR), inbox_limit=2)
    key.send(ask("a", 0))
    assert key.send(ask("b", 1)).queued and key.send(ask("c", 2)).queued
    overflow = ask("d", 3)
    [record] = key.send(overflow).errors
    assert record.code == "inbox_overflow" and record.raw == overflow.SerializeToString()
    assert "waiting to retry envelope 'e-a'" in record.reason and record.resendable


# -- the accounting, under random streams --------------------------------------------------


@dataclass
class Ledger:
    committed: dict[str, int]
    dead: dict[str, int]


def _ledger(results: list[StepResult]) -> Ledger:
    committed: dict[str, int] = {}
    dead: dict[str, int] = {}
    for result in results:
        for activation in result.activations:
            if isinstance(activation, ActivationCommit):
                envelope_id = ActivationStart.of(activation.trace[0]).envelope_id
                committed[envelope_id] = committed.get(envelope_id, 0) + 1
        for record in result.errors:
            dead[record.envelope_id] = dead.get(record.envelope_id, 0) + 1
    return Ledger(committed, dead)


@pytest.mark.parametrize("seed", range(12))
def test_every_envelope_ends_committed_waiting_or_dead_lettered(seed: int) -> None:
    rng = random.Random(seed)
    outage = Outage(T0 + rng.randrange(0, 30_000), T0 + rng.randrange(30_000, 200_000))
    policy = RetryPolicy(max_attempts=rng.choice([1, 2, 4]), initial_backoff_ms=5_000,
                         jitter=rng.choice([0.0, 0.3]))  # fmt: skip
    key = new_key(outage, policy=policy, inbox_limit=rng.choice([3, 50]))
    sent: list[str] = []
    results: list[StepResult] = []
    at = 0
    for n in range(60):
        at += rng.randrange(0, 8_000)
        results.extend(key.advance_to(T0 + at))
        kind = rng.choices(["ask", "crash", "forget"], weights=[8, 1, 1])[0]
        payload = rng.choice(["exit", "interrupt", "gen"]) if kind == "crash" else f"n{n}"
        envelope = event_envelope(KEY, kind, payload.encode(), time_ms=T0 + at,
                                  envelope_id=f"id-{n}")  # fmt: skip
        sent.append(envelope.envelope_id)
        results.append(key.send(envelope))
        if rng.random() < 0.1:
            results.append(key.send(export_request_envelope(KEY, f"x{n}", time_ms=T0 + at)))
    waiting = {AgentEnvelope.FromString(raw).envelope_id for raw in key.inbox}
    if key.hold is not None:
        waiting.add(AgentEnvelope.FromString(key.hold.envelope).envelope_id)
    ledger = _ledger(results)
    # Mid-stream: each envelope is in exactly one place.
    for envelope_id in sent:
        places = [ledger.committed.get(envelope_id, 0), ledger.dead.get(envelope_id, 0),
                  int(envelope_id in waiting)]  # fmt: skip
        assert sorted(places) == [0, 0, 1], (envelope_id, places)
    # And once every timer has fired, nothing waits any more.
    results.extend(key.advance_to(T0 + 10**9))
    ledger = _ledger(results)
    assert key.hold is None and key.inbox == []
    assert sorted(ledger.committed) + sorted(ledger.dead) != []
    for envelope_id in sent:
        assert ledger.committed.get(envelope_id, 0) + ledger.dead.get(envelope_id, 0) == 1
    # Every activation took its own seq, one after another, failed or not.
    seqs = [a.seq for r in results for a in r.activations]
    assert seqs == list(range(1, len(seqs) + 1)) == list(range(1, key.seq + 1))


def test_a_dead_letter_re_sent_with_resend_envelope_retries_after_the_re_sends_time() -> None:
    # A transient dead letter re-sent two days later while the provider is still down:
    # stamped with the re-send's time, its retries wait their backoff from then (re-sent
    # as raw, they were all due at once: the clock was two days old).
    key = new_key(Outage(T0, T0 + 10 * 24 * HOUR))
    key.send(ask("a", 0))
    key.fire_retry()
    [record] = key.fire_retry().errors
    now = T0 + 48 * HOUR
    old_clock = key.send(record.raw)
    assert old_clock.retries == (10_000,) and key.retry_timer_ms == T0 + 10_000  # in the past
    fresh = new_key(Outage(T0, T0 + 10 * 24 * HOUR))
    resent = fresh.send(record.resend_envelope(event_time_ms=now))
    assert resent.activations[0].trace[0].start_ms == now
    assert resent.retries == (10_000,) and fresh.retry_timer_ms == now + 10_000
    assert [s.activations[0].trace[0].start_ms for s in fresh.advance_to(now + 60_000)] == [
        now + 10_000,
        now + 30_000,
    ]


def test_a_retry_is_logged_at_info_and_a_dead_letter_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="beam_agents")
    key = new_key(Outage(T0, T0 + 10 * HOUR), policy=RetryPolicy(max_attempts=2, jitter=0))
    key.send(ask("a", 0))
    [retry] = caplog.records
    assert (retry.name, retry.levelno) == ("beam_agents", logging.INFO)
    assert "activation seq 1 failed transiently" in retry.getMessage()
    assert "attempt 1 of 2, retrying at event time 1734000010000 (in 10000 ms)" in retry.getMessage()
    caplog.clear()
    [record] = key.fire_retry().errors
    [dead] = caplog.records
    assert (dead.name, dead.levelno) == ("beam_agents", logging.WARNING)
    message = dead.getMessage()
    assert f"dead letter retries_exhausted for key {KEY.hex()}, envelope 'e-a' (seq 2)" in message
    assert record.reason in message and "\n" not in message


def test_an_export_says_what_the_key_waits_on_beside_its_committed_state() -> None:
    key = new_key(Outage(T0, T0 + 15_000))
    [quiet] = key.send(export_request_envelope(KEY, "before", time_ms=T0)).snapshots
    assert not StateSnapshot.FromString(quiet).HasField("waiting")  # nothing: no field
    key.send(ask("a", 0))
    key.send(ask("b", 20_000))
    [snapshot] = key.send(export_request_envelope(KEY, "mid", time_ms=T0 + 3)).snapshots
    waiting = StateSnapshot.FromString(snapshot).waiting
    assert (waiting.hold, waiting.envelope_id, waiting.due_ms, waiting.inbox) == (
        "retry", "e-a", T0 + 10_000, 1,
    )  # fmt: skip
    assert [(a.seq, a.transient, a.wait_ms) for a in waiting.attempts] == [(1, True, 10_000)]
    # The committed state is as it was (but the failed attempt's seq): the hold is beside it.
    exported = StateSnapshot.FromString(snapshot)
    assert exported.seq == 1
    exported.ClearField("waiting")
    exported.request_id, exported.snapshot_at_ms, exported.seq = "before", T0, 0
    assert exported.SerializeToString(deterministic=True) == quiet
    key.fire_retry()
    key.fire_retry()
    [after] = key.send(export_request_envelope(KEY, "after", time_ms=T0 + 60_000)).snapshots
    assert not StateSnapshot.FromString(after).HasField("waiting")
