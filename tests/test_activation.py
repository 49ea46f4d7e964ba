"""run_activation: all or nothing (invariant 1) and determinism (invariant 4)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from core_agents import AGENT, TOOLS, make_provider

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Event, ToolResult
from beam_agents.activation import (
    ActivationCommit,
    ActivationFailure,
    ReplayHooks,
    TriggerAction,
    classify_trigger,
    run_activation,
)
from beam_agents.agent import Timeout
from beam_agents.key_state import KeyState, StateCells, dump_key_state, load_key_state
from beam_agents.testing import (
    approval_envelope,
    chat_request,
    event_envelope,
    tool_result_envelope,
)
from beam_agents.trace_events import attributes_dict, kind_name, serialize_trace_event
from beam_agents.trace_view import ActivationKind

KEY = b"customer-42"
T0 = 1_734_000_000_000


def empty_state() -> KeyState:
    return load_key_state(StateCells())


def run(
    agent: Agent,
    state: KeyState,
    trigger: Any,
    *,
    seq: int = 1,
    provider: Any = None,
    now: int = T0,
) -> Any:
    return run_activation(
        agent,
        TOOLS,
        provider or make_provider(),
        state,
        trigger,
        now_ms=now,
        seq=seq,
        entity_key=KEY,
    )


def kinds(result: ActivationCommit | ActivationFailure) -> list[str]:
    return [kind_name(e.kind) for e in result.trace]


def test_start_commits_memory_cache_outputs_and_a_full_trace() -> None:
    result = run(AGENT, empty_state(), event_envelope(KEY, "message", b"hello", time_ms=T0))
    assert isinstance(result, ActivationCommit)
    assert kinds(result) == ["ACTIVATION_START", "LLM_CALL", "TOOL_CALL", "ACTIVATION_END"]
    assert result.outputs == (b"answer to: hello",)
    assert result.state.memory["last_order"]["status"] == "shipped"
    assert len(result.state.cache) == 1
    assert all(e.start_ms == T0 and e.end_ms == T0 for e in result.trace)
    assert [e.index for e in result.trace] == [0, 1, 2, 3]


@pytest.mark.parametrize("where", [None, "tool"])
def test_a_compact_trace_holds_the_same_events_as_bytes(where: str | None) -> None:
    """Replay's ``ReplayHooks(compact_trace=True)``: the trace is an ``EventLog`` of the very
    same events."""
    from beam_agents.event_log import EventLog

    agent = AGENT if where is None else Exploding(where)
    results = [
        run_activation(
            agent,
            TOOLS,
            make_provider(),
            empty_state(),
            event_envelope(KEY, "message", b"hello", time_ms=T0),
            now_ms=T0,
            seq=1,
            entity_key=KEY,
            replay=ReplayHooks(compact_trace=compact),
        )
        for compact in (False, True)
    ]
    plain, compact = results
    assert type(plain) is type(compact)
    assert isinstance(plain.trace, tuple) and isinstance(compact.trace, EventLog)
    assert len(compact.trace) == len(plain.trace) > 2
    assert [serialize_trace_event(e) for e in compact.trace] == [
        serialize_trace_event(e) for e in plain.trace
    ]
    assert compact.trace == plain.trace


class Exploding(Agent):
    """Fails at a chosen point, after having written memory, called the model and staged intents."""

    def __init__(self, where: str) -> None:
        self.where = where

    def start(self, ctx: Any, event: Event) -> Any:
        ctx.memory["written"] = True
        if self.where == "before-model":
            raise RuntimeError("boom")
        ctx.complete(chat_request("m-1", ("user", "x")))
        if self.where == "after-model":
            raise RuntimeError("boom")
        ctx.act("send_email", to="a", body="b")
        if self.where == "tool":
            ctx.call("lookup_order", order_id=object())  # non-JSON arguments
        if self.where == "intent":
            ctx.act("issue_refund", order_id="A1", amount_cents={1, 2})
        if self.where == "memory-serialization":
            ctx.memory["nested"] = {"ok": []}
            ctx.memory["nested"]["ok"].append(object())  # bypasses the write check
        if self.where == "result":
            return "not a Done"
        if self.where == "suspend-state":
            return Suspend(state={"x": object()})
        return Done(output=b"never")


class ExplodingProvider:
    name = "scripted"

    def complete(self, request: Any) -> Any:
        raise ConnectionError("provider down")


@pytest.mark.parametrize(
    "where",
    [
        "before-model",
        "after-model",
        "provider",
        "tool",
        "intent",
        "memory-serialization",
        "result",
        "suspend-state",
    ],
)
def test_a_failure_anywhere_commits_nothing_but_its_trace(where: str) -> None:
    before = empty_state()
    before.memory["kept"] = 1
    cells_before = dump_key_state(before)
    provider = ExplodingProvider() if where == "provider" else None
    result = run(Exploding(where), before, event_envelope(KEY, "m", time_ms=T0), provider=provider)
    assert isinstance(result, ActivationFailure), where
    assert kinds(result)[0] == "ACTIVATION_START"
    assert kinds(result)[-1] == "ACTIVATION_FAILED"
    assert "INTENT_RELEASED" not in kinds(result) and "ACTIVATION_END" not in kinds(result)
    assert attributes_dict(result.trace[-1])["error.type"] == result.error_type
    # The caller's state is untouched: nothing of the failed attempt leaked into it.
    assert dump_key_state(before) == cells_before
    assert not hasattr(result, "cells") and not hasattr(result, "outputs")


def test_failure_records_the_provider_failure_even_if_agent_code_swallowed_it() -> None:
    class Swallowing(Agent):
        def start(self, ctx: Any, event: Event) -> Any:
            # Agent code that swallows provider errors must not hide the miss from replay.
            with contextlib.suppress(ConnectionError):
                ctx.complete(chat_request("m", ("user", "x")))
            return Done()

    result = run(
        Swallowing(),
        empty_state(),
        event_envelope(KEY, "m", time_ms=T0),
        provider=ExplodingProvider(),
    )
    assert isinstance(result, ActivationCommit)
    assert len(result.provider_failures) == 1
    assert len(result.state.cache) == 0


def hitl_round_trip() -> list[Any]:
    """event (suspends on an approval-gated refund) -> approval -> tool_result -> done."""
    results = []
    state = empty_state()
    start = run(AGENT, state, event_envelope(KEY, "message", b"refund please", time_ms=T0), seq=1)
    results.append(start)
    refund_id = start.approval_requests[0].intent_id
    state = load_key_state(start.cells)
    approve = approval_envelope(KEY, refund_id, approved=True, time_ms=T0 + 10)
    assert classify_trigger(state, approve).action is TriggerAction.RESUME
    released = run(AGENT, state, approve, seq=2, now=T0 + 10)
    results.append(released)
    state = load_key_state(released.cells)
    result = tool_result_envelope(KEY, refund_id, time_ms=T0 + 20, status=ToolResult.OK)
    assert classify_trigger(state, result).action is TriggerAction.RESUME
    done = run(AGENT, state, result, seq=3, now=T0 + 20)
    results.append(done)
    return results


def test_hitl_round_trip_releases_only_on_approval_then_resumes() -> None:
    start, released, done = hitl_round_trip()
    assert start.suspended and len(start.approval_requests) == 1
    assert [i.tool for i in start.released_intents] == ["send_email"]  # not approval-gated
    assert kinds(start)[-3:] == ["INTENT_RELEASED", "SUSPENDED", "ACTIVATION_END"]
    assert [i.tool for i in released.released_intents] == ["issue_refund"]
    assert released.suspended and not released.state.pending
    assert isinstance(done, ActivationCommit) and not done.suspended
    assert done.outputs == (b"answer to: summarize ToolResult",)
    assert done.state.memory["resumed"] == 1
    # The consumed continuation is kept so a completed resume can be replayed later.
    assert [r.seq for r in done.state.resume_history] == [2, 3]
    assert done.state.resume_history[-1].continuation.suspended_seq == 1


def test_rejection_and_timeout_resume_the_agent() -> None:
    start = run(AGENT, empty_state(), event_envelope(KEY, "m", b"refund", time_ms=T0))
    refund_id = start.approval_requests[0].intent_id
    state = load_key_state(start.cells)
    rejected = run(
        AGENT, state, approval_envelope(KEY, refund_id, approved=False, time_ms=T0 + 1), seq=2
    )
    assert rejected.outputs == (b"answer to: summarize Approval",) and not rejected.state.pending
    timeout = Timeout(deadline_ms=start.timer_deadline_ms, awaiting_intent_ids=(refund_id,))
    timed_out = run(AGENT, state, timeout, seq=2, now=start.timer_deadline_ms)
    assert timed_out.outputs == (b"answer to: summarize Timeout",)
    assert not timed_out.state.pending and not timed_out.suspended


def test_classify_routes_every_trigger() -> None:
    idle = empty_state()
    start = run(AGENT, idle, event_envelope(KEY, "m", b"refund", time_ms=T0))
    suspended = load_key_state(start.cells)
    refund_id = start.approval_requests[0].intent_id
    ev = event_envelope(KEY, "m", time_ms=T0)
    assert classify_trigger(idle, ev).action is TriggerAction.START
    assert classify_trigger(suspended, ev).action is TriggerAction.QUEUE
    early = classify_trigger(suspended, tool_result_envelope(KEY, refund_id, time_ms=T0))
    assert early.action is TriggerAction.REJECT and "awaits approval" in early.reason
    unknown = classify_trigger(suspended, tool_result_envelope(KEY, "in-nope", time_ms=T0))
    assert unknown.action is TriggerAction.REJECT and "in-nope" in unknown.reason
    assert (
        classify_trigger(idle, approval_envelope(KEY, "in-x", approved=True, time_ms=0)).action
        is TriggerAction.REJECT
    )
    assert classify_trigger(idle, Timeout(deadline_ms=1)).action is TriggerAction.REJECT


def test_run_activation_runs_what_classify_decides_and_refuses_the_rest() -> None:
    idle = empty_state()
    start = run(AGENT, idle, event_envelope(KEY, "m", b"refund", time_ms=T0))
    assert start.kind is ActivationKind.START
    suspended = load_key_state(start.cells)
    refund_id = start.approval_requests[0].intent_id
    approve = approval_envelope(KEY, refund_id, approved=True, time_ms=T0 + 1)
    decision = classify_trigger(suspended, approve)
    assert decision.kind is ActivationKind.RESUME
    resumed = run_activation(
        AGENT, TOOLS, make_provider(), suspended, approve,
        now_ms=T0 + 1, seq=2, entity_key=KEY, decision=decision,
    )  # fmt: skip
    assert resumed.kind is ActivationKind.RESUME
    # An event for a suspended key queues: running it anyway is a caller bug, named.
    queued = event_envelope(KEY, "m", time_ms=T0 + 2)
    with pytest.raises(ValueError, match="decides to queue"):
        run(AGENT, suspended, queued, seq=2)
    with pytest.raises(ValueError, match="awaits approval"):
        run(AGENT, suspended, tool_result_envelope(KEY, refund_id, time_ms=T0), seq=2)


def test_suspend_awaiting_an_unknown_intent_fails_the_activation() -> None:
    class Bad(Agent):
        def start(self, ctx: Any, event: Event) -> Any:
            return Suspend(state=None, awaiting=["in-made-up"])

    result = run(Bad(), empty_state(), event_envelope(KEY, "m", time_ms=T0))
    assert isinstance(result, ActivationFailure) and "AgentResultError" in result.error_type


DETERMINISM_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from test_activation import hitl_round_trip
from beam_agents.trace_events import serialize_trace_event
out = []
for r in hitl_round_trip():
    out.append({
        "trace": [serialize_trace_event(e).hex() for e in r.trace],
        "cells": [getattr(r.cells, f).hex() for f in ("memory", "llm_cache", "continuation", "pending", "resume_history")],
        "intents": [i.SerializeToString(deterministic=True).hex() for i in r.released_intents + r.approval_requests],
        "outputs": [o.hex() for o in r.outputs],
    })
print(json.dumps(out))
"""


def test_same_inputs_give_identical_bytes_across_processes() -> None:
    tests_dir = str(Path(__file__).parent)
    runs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT, tests_dir],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(proc.stdout))
    assert runs[0] == runs[1]
    local = [[serialize_trace_event(e).hex() for e in r.trace] for r in hitl_round_trip()]
    assert [r["trace"] for r in runs[0]] == local


# --- invariant 1 with a copy-on-write cache: nothing is copied until changed, nothing leaks --


class AsksOnce(Agent):
    """One model call (the same request each time), or none when the event says "quiet"."""

    def start(self, ctx: Any, event: Event) -> Any:
        if event.type != "quiet":
            ctx.complete(chat_request("m-1", ("user", "same question")))
        return Done()


def cache_bytes(state: KeyState) -> bytes:
    return state.cache.to_body().SerializeToString(deterministic=True)


def test_a_cache_hit_changes_the_result_but_not_the_state_passed_in() -> None:
    warm = run(AsksOnce(), empty_state(), event_envelope(KEY, "m", time_ms=T0))
    before = load_key_state(warm.cells)
    untouched = cache_bytes(before)

    hit = run(AsksOnce(), before, event_envelope(KEY, "m", time_ms=T0 + 1), seq=2, now=T0 + 1)

    assert isinstance(hit, ActivationCommit)
    assert cache_bytes(before) == untouched
    assert cache_bytes(hit.state) != untouched  # the hit refreshed recency in the result
    assert dump_key_state(hit.state) == hit.cells


def test_a_state_that_shares_its_cache_with_a_result_stays_apart_from_it() -> None:
    warm = run(AsksOnce(), empty_state(), event_envelope(KEY, "m", time_ms=T0))
    pre = load_key_state(warm.cells)
    pre_bytes = cache_bytes(pre)
    # No model call: the result's cache is the pre-state's, not yet copied.
    quiet = run(AsksOnce(), pre, event_envelope(KEY, "quiet", time_ms=T0 + 1), seq=2)
    assert isinstance(quiet, ActivationCommit)
    quiet_cells = quiet.cells

    # A hit on the result's state, a failure after a hit on the pre-state.
    later = run(AsksOnce(), quiet.state, event_envelope(KEY, "m", time_ms=T0 + 2), seq=3)
    failed = run(Exploding("after-model"), pre, event_envelope(KEY, "m", time_ms=T0 + 3), seq=3)

    assert isinstance(later, ActivationCommit) and isinstance(failed, ActivationFailure)
    assert cache_bytes(pre) == pre_bytes == cache_bytes(quiet.state)
    assert dump_key_state(quiet.state) == quiet.cells == quiet_cells
    assert cache_bytes(later.state) != pre_bytes


# --- ReplayHooks(encode_cache_cells=False): the cache cells stay empty, nothing else changes ------


@tool(recorded=True)
def read_note(n: int) -> dict[str, int]:
    """A recorded read-only tool: its result lands in the key's tool cache."""
    return {"n": n}


class AsksAndReads(Agent):
    """One model call (the same request each time) and one recorded tool call."""

    def start(self, ctx: Any, event: Event) -> Any:
        ctx.complete(chat_request("m-1", ("user", "same question")))
        ctx.memory["note"] = ctx.call("read_note", n=1)
        return Done(output=b"read")


def test_encode_cache_cells_false_leaves_the_cache_cells_empty_and_the_rest_identical() -> None:
    registry = ToolRegistry([read_note])

    def go(state: KeyState, seq: int, **options: Any) -> ActivationCommit:
        result = run_activation(
            AsksAndReads(),
            registry,
            make_provider(),
            state,
            event_envelope(KEY, "m", time_ms=T0 + seq),
            now_ms=T0 + seq,
            seq=seq,
            entity_key=KEY,
            **options,
        )
        assert isinstance(result, ActivationCommit), result
        return result

    warm = load_key_state(go(empty_state(), 1).cells)
    full, skipped = go(warm, 2), go(warm, 2, replay=ReplayHooks(encode_cache_cells=False))

    assert full.cells.llm_cache and full.cells.tool_cache  # a hit, a recorded result
    assert skipped.cells == replace(full.cells, llm_cache=b"", tool_cache=b"")
    assert [serialize_trace_event(e) for e in skipped.trace] == [
        serialize_trace_event(e) for e in full.trace
    ]
    assert dump_key_state(skipped.state) == full.cells  # the state itself is the same


# --- capture of a cache hit: the cache's response, never what agent code did to its copy ----


class ScribblesOnTheAnswer(Agent):
    """Asks the cached question, then changes the response object it was given."""

    def start(self, ctx: Any, event: Event) -> Any:
        answer = ctx.complete(chat_request("m-1", ("user", "same question")))
        answer.text = "scribbled"
        return Done(output=answer.text.encode())


def test_a_captured_hit_is_the_cached_response_whatever_agent_code_does_to_its_copy() -> None:
    from beam_agents.capture import CaptureKind, ValueCapture

    warm = run(AsksOnce(), empty_state(), event_envelope(KEY, "m", time_ms=T0))
    before = load_key_state(warm.cells)
    cached = before.cache.entries_by_recency()[0].response.SerializeToString(deterministic=True)
    capture = ValueCapture()

    result = run_activation(
        ScribblesOnTheAnswer(),
        TOOLS,
        make_provider(),
        before,
        event_envelope(KEY, "m", time_ms=T0 + 1),
        now_ms=T0 + 1,
        seq=2,
        entity_key=KEY,
        replay=ReplayHooks(capture=capture),
    )

    assert isinstance(result, ActivationCommit) and result.outputs == (b"scribbled",)
    (response,) = [v.value for v in capture.values if v.what is CaptureKind.RESPONSE]
    assert response.SerializeToString(deterministic=True) == cached
    assert cache_bytes(before) == cache_bytes(load_key_state(warm.cells))
