"""``KeyStep`` with activations in flight: the same bytes, in the same order, as waiting.

An ``Activate`` that returns ``STARTED`` leaves the activation in flight; its result comes
back later as ``ActivationDone``. Whatever arrives meanwhile (events, results, approvals,
exports, bytes that do not parse, HITL deadlines) must come out exactly as the serial
step gives it for the same inputs: per output, the same elements in the same order.
Random scripts of one key are run both ways, the in-flight one delivering each result at
a random later point (hypothesis draws both).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "pipeline"))

from agents import SHOP_AGENT, SHOP_TOOLS, make_provider

from beam_agents import AgentConfig
from beam_agents._protos import AgentEnvelope
from beam_agents.activation import ActivationResult, TriggerDecision
from beam_agents.agent import Timeout
from beam_agents.blobs import load_hold
from beam_agents.context import derive_intent_id
from beam_agents.hitl import HitlPolicy
from beam_agents.key_state import KeyState
from beam_agents.key_step import (
    STARTED,
    ActivationDone,
    HitlDeadline,
    KeyStep,
    MemoryKeyStore,
    RetryDue,
    Started,
    StepResult,
    activation_runner,
)
from beam_agents.retry import RetryPolicy
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)

KEY = b"k-in-flight"
T0 = 1_734_000_000_000
HITL_MS = 30_000
CONFIG = AgentConfig(
    provider_factory=make_provider,
    hitl=HitlPolicy(hitl_timeout_ms=HITL_MS, intent_ttl_ms=10 * HITL_MS),
    inbox_limit=3,
    retry=RetryPolicy(max_attempts=3, initial_backoff_ms=2_000, max_backoff_ms=4_000, jitter=0),
)


@dataclasses.dataclass(frozen=True)
class Advance:
    """The watermark moves to ``ms``: the key's timers due by then fire, earliest first."""

    ms: int


@dataclasses.dataclass(frozen=True)
class Deliver:
    """In-flight mode only: the activation in flight finishes now (nothing if none is)."""


class Driver:
    """One key on a ``MemoryKeyStore`` with its two timers, serial or with activations in flight."""

    def __init__(self, *, in_flight: bool) -> None:
        self.store = MemoryKeyStore()
        self.hitl_at: int | None = None
        self.retry_at: int | None = None
        self.results: list[StepResult] = []
        self._run = activation_runner(
            SHOP_AGENT, SHOP_TOOLS, make_provider(), hitl=CONFIG.hitl, cache_policy=CONFIG.cache
        )
        self.flight: tuple[int, Callable[[], ActivationResult]] | None = None
        self.started = 0
        activate = self._start if in_flight else self._run
        self.step = KeyStep(activate, inbox_limit=CONFIG.inbox_limit, retry=CONFIG.retry)

    def _start(
        self,
        key: bytes,
        seq: int,
        state: KeyState,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> Started:
        assert self.flight is None, "a second activation of the key started while one ran"
        self.flight = (seq, lambda: self._run(key, seq, state, trigger, decision, now_ms=now_ms))
        self.started += 1
        return STARTED

    def _apply(self, result: StepResult) -> None:
        self.results.append(result)
        if result.timer is not None:
            self.hitl_at = result.timer.at_ms
        if result.retry_timer is not None:
            self.retry_at = result.retry_timer.at_ms
        assert (result.started is not None) == (
            self.flight is not None and result.started == self.flight[0]
        )

    def send(self, item: Any) -> None:
        if isinstance(item, Advance):
            self.advance(item.ms)
        elif isinstance(item, Deliver):
            self.deliver()
        else:
            raw = item.SerializeToString() if isinstance(item, AgentEnvelope) else item
            self._apply(self.step.envelope(KEY, raw, self.store))

    def _sets_a_timer_by(self, ms: int) -> bool:
        """Whether finishing the activations in flight or waiting behind one (on a copy of
        the key) would set a timer due by ``ms``."""
        if self.flight is None:
            return False
        trial = Driver(in_flight=True)
        store = self.store
        trial.store = MemoryKeyStore(store.seq, store.cells, list(store.inbox), store.hold)
        trial.flight = self.flight
        while trial.flight is not None:
            trial.deliver()
            last = trial.results[-1]
            if any(
                target is not None and target.at_ms is not None and target.at_ms <= ms
                for target in (last.timer, last.retry_timer)
            ):
                return True
        return False

    def deliver(self) -> None:
        if self.flight is None:
            return
        seq, run = self.flight
        self.flight = None
        self._apply(self.step.handle(KEY, ActivationDone(seq, run()), self.store))

    def advance(self, ms: int) -> None:
        while True:
            while self._sets_a_timer_by(ms):
                # What a run cannot do: move the watermark past a timer that an activation
                # still in flight (or waiting behind one) will set. A HITL deadline is an hour
                # or so after its activation, a retry's due time waits behind its hold (see
                # docs/pipeline.md); these scripts jump in event time, so the activations
                # finish first, as they would in any real run.
                self.deliver()
            due = [
                (at, order)
                for at, order in ((self.retry_at, 0), (self.hitl_at, 1))
                if at is not None and at <= ms
            ]
            if not due:
                return
            at, order = min(due)
            if order == 0:
                self.retry_at = None
                self._apply(self.step.handle(KEY, RetryDue(at), self.store))
            else:
                self.hitl_at = None
                self._apply(self.step.handle(KEY, HitlDeadline(at), self.store))

    def finish(self) -> None:
        """The input ends: results come back, every timer fires, until nothing is left."""
        for _ in range(100):
            self.deliver()
            self.advance(2**62)
            if self.flight is None and self.hitl_at is None and self.retry_at is None:
                return
        raise AssertionError("the key never settled")

    def by_output(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for result in self.results:
            for tag, value in result.emitted:
                out.setdefault(tag.value, []).append(value)
        return out


def run_both(script: list[Any]) -> tuple[Driver, Driver]:
    serial = Driver(in_flight=False)
    for item in script:
        if not isinstance(item, Deliver):
            serial.send(item)
    serial.finish()
    concurrent = Driver(in_flight=True)
    for item in script:
        concurrent.send(item)
    concurrent.finish()
    return serial, concurrent


def summary(driver: Driver) -> list[str]:
    """What came out, readably: one line per emitted element, in order."""
    lines = []
    for result in driver.results:
        for tag, value in result.emitted:
            if tag.value == "errors":
                lines.append(f"error {value.code} {value.envelope_id} {value.reason[:60]}")
            elif tag.value == "trace_batches":
                lines.append(f"trace of {len(value[1])} events")
            else:
                lines.append(f"{tag.value} {value[1][:40]!r}")
    return lines


def assert_same(serial: Driver, concurrent: Driver) -> None:
    assert sorted(summary(concurrent)) == sorted(summary(serial))
    assert concurrent.by_output() == serial.by_output()
    assert concurrent.store.seq == serial.store.seq
    assert concurrent.store.cells == serial.store.cells
    assert concurrent.store.inbox == serial.store.inbox
    assert concurrent.store.hold == serial.store.hold


def _inputs(draw: Any) -> list[Any]:
    clock = T0
    script: list[Any] = []
    for _ in range(draw(st.integers(4, 22))):
        clock += draw(st.sampled_from([1, 500, 3_000, HITL_MS + 1]))
        kind = draw(
            st.sampled_from(
                [
                    "echo", "echo", "act", "refund", "result", "approve", "export", "export",
                    "flaky", "fail", "no_body", "malformed", "advance", "advance", "deliver",
                    "deliver", "deliver",
                ]
            )
        )  # fmt: skip
        n = len(script)
        if kind in ("echo", "act", "refund", "fail"):
            script.append(event_envelope(KEY, kind, f"p{n}".encode(), time_ms=clock))
        elif kind == "flaky":
            until = clock + draw(st.sampled_from([0, 2_500, 7_000, 60_000]))
            script.append(event_envelope(KEY, "flaky", f"until={until}".encode(), time_ms=clock))
        elif kind in ("result", "approve"):
            # An intent of one of the first activations (whichever really staged one).
            seq = draw(st.integers(1, 6))
            intent = derive_intent_id(KEY, seq, 0)
            if kind == "result":
                script.append(tool_result_envelope(KEY, intent, payload=b"r", time_ms=clock))
            else:
                script.append(
                    approval_envelope(KEY, intent, approved=False, reason="no", time_ms=clock)
                )
        elif kind == "export":
            script.append(export_request_envelope(KEY, f"x{n}", time_ms=clock))
        elif kind == "no_body":
            script.append(AgentEnvelope(entity_key=KEY, envelope_id=f"nb{n}", event_time_ms=clock))
        elif kind == "malformed":
            script.append(b"\xff\xff not an envelope")
        elif kind == "advance":
            script.append(Advance(clock - draw(st.sampled_from([0, 1, 2_000]))))
        else:
            script.append(Deliver())
    return script


scripts = st.composite(_inputs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts())
def test_in_flight_gives_the_serial_bytes_for_any_script(script: list[Any]) -> None:
    serial, concurrent = run_both(script)
    assert_same(serial, concurrent)


def test_everything_waits_behind_an_activation_in_flight_and_comes_out_in_order() -> None:
    """While seq 1 is in flight: an export, an echo, bytes that do not parse, a no-body.

    Nothing comes out and nothing commits until it finishes; then the export sees seq 1,
    the echo runs at seq 2 (in flight in its turn), and the refusals come out in between.
    """
    concurrent = Driver(in_flight=True)
    script = [
        event_envelope(KEY, "echo", b"first", time_ms=T0),
        export_request_envelope(KEY, "sees-1", time_ms=T0 + 1),
        b"\xff\xff",
        event_envelope(KEY, "echo", b"second", time_ms=T0 + 2),
        AgentEnvelope(entity_key=KEY, envelope_id="nb", event_time_ms=T0 + 3),
        export_request_envelope(KEY, "sees-2", time_ms=T0 + 4),
    ]
    for item in script:
        concurrent.send(item)
    assert all(not r.emitted for r in concurrent.results)
    assert all(r.queued for r in concurrent.results[1:])
    assert concurrent.store.seq == 0 and len(concurrent.store.inbox) == 5
    hold = load_hold(concurrent.store.hold)[0]
    assert hold is not None and hold.in_flight.seq == 1 and hold.in_flight.arrived_from == 0
    concurrent.deliver()  # seq 1 commits; the export answers; the second echo starts (seq 2)
    first = concurrent.results[-1]
    assert [tag.value for tag, _ in first.emitted] == [
        "trace_batches", "outputs", "snapshots", "errors",
    ]  # fmt: skip
    assert first.started == 2 and concurrent.store.seq == 1
    hold = load_hold(concurrent.store.hold)[0]
    assert hold is not None and hold.in_flight.seq == 2 and hold.in_flight.arrived_from == 0
    assert len(concurrent.store.inbox) == 2  # the no-body and the second export, unhandled
    concurrent.finish()
    serial, _ = run_both(script)
    assert_same(serial, concurrent)
    assert concurrent.store.hold == b"" and concurrent.store.inbox == []


def test_a_result_for_another_seq_or_with_nothing_in_flight_is_stale() -> None:
    concurrent = Driver(in_flight=True)
    concurrent.send(event_envelope(KEY, "echo", b"a", time_ms=T0))
    assert concurrent.flight is not None
    seq, run = concurrent.flight
    result = run()
    stale = concurrent.step.handle(KEY, ActivationDone(seq + 1, result), concurrent.store)
    assert stale.stale_timer and not stale.emitted and concurrent.store.seq == 0
    done = concurrent.step.handle(KEY, ActivationDone(seq, result), concurrent.store)
    assert done.outputs and concurrent.store.seq == 1
    again = concurrent.step.handle(KEY, ActivationDone(seq, result), concurrent.store)
    assert again.stale_timer and not again.emitted and concurrent.store.seq == 1  # once only


def test_an_activation_lost_with_its_worker_is_run_again_from_the_hold() -> None:
    """``in_flight`` gives the very activation that was started: same bytes when re-run."""
    concurrent = Driver(in_flight=True)
    concurrent.send(event_envelope(KEY, "refund", b"o", time_ms=T0))
    concurrent.deliver()  # suspended on the refund's approval
    concurrent.send(Advance(T0 + HITL_MS))  # the HITL timeout resume starts, in flight
    assert concurrent.flight is not None
    seq, first_run = concurrent.flight
    again = concurrent.step.in_flight(KEY, concurrent.store)
    assert again is not None and again.seq == seq and isinstance(again.trigger, Timeout)
    rerun = concurrent._run(
        KEY, again.seq, again.state, again.trigger, again.decision, now_ms=again.now_ms
    )
    original = first_run()
    assert rerun.trace == original.trace
    assert concurrent.step.in_flight(KEY, MemoryKeyStore()) is None


@pytest.mark.parametrize("until_offset", [2_500, 60_000])
def test_a_transient_failure_in_flight_becomes_a_retry_hold_with_the_exports_answered(
    until_offset: int,
) -> None:
    """Fails in flight: it is held for a retry; exports behind it are answered at once (as
    they are behind a retry hold), the rest wait for the retry, past the inbox limit refused."""
    script: list[Any] = [
        event_envelope(KEY, "flaky", f"until={T0 + until_offset}".encode(), time_ms=T0),
        *[event_envelope(KEY, "echo", f"e{i}".encode(), time_ms=T0 + 1 + i) for i in range(4)],
        export_request_envelope(KEY, "while-held", time_ms=T0 + 10),
        Deliver(),
        Advance(T0 + 3_000),
        Deliver(),
    ]
    serial, concurrent = run_both(script)
    assert_same(serial, concurrent)
    codes = [e.code for e in concurrent.by_output().get("errors", [])]
    assert "inbox_overflow" in codes
    assert concurrent.by_output()["snapshots"]
