"""The core's fork hook (``beam_agents.fork_answer``): the one call at the fork's trace index
receives the fork's answer; every other call is served as ever."""

from __future__ import annotations

from typing import Any

import pytest

from beam_agents import ToolRegistry, canonical_json, tool
from beam_agents.context import AgentContext
from beam_agents.errors import CacheMissError
from beam_agents.fork_answer import ForkAnswer
from beam_agents.hitl import HitlPolicy
from beam_agents.llm_cache import CachePolicy, ReplayCache
from beam_agents.provider import UnservableProvider
from beam_agents.testing import chat_request
from beam_agents.tool_cache import ToolCache
from beam_agents.trace_events import attributes_dict, kind_name

RAN: list[str] = []


@tool
def lookup(order_id: str) -> dict[str, Any]:
    RAN.append(order_id)
    return {"order_id": order_id, "found": True}


@tool(recorded=True)
def track(tracking: str) -> dict[str, Any]:
    RAN.append(tracking)
    return {"scan": "hub"}


REGISTRY = ToolRegistry([lookup, track])


def ctx_with(fork: ForkAnswer | None) -> AgentContext:
    RAN.clear()
    return AgentContext(
        entity_key=b"k",
        seq=1,
        now_ms=1_000,
        memory={},
        cache=ReplayCache.empty(),
        provider=UnservableProvider("p"),
        registry=REGISTRY,
        hitl=HitlPolicy(),
        cache_policy=CachePolicy(),
        tool_cache=ToolCache(),
        serve_recorded_tools=True,
        fork=fork,
    )


def test_the_model_call_at_the_fork_index_receives_the_forks_text_and_no_other_does() -> None:
    ctx = ctx_with(ForkAnswer(index=0, model=True, text="deny"))
    response = ctx.complete(chat_request("m", ("user", "refund?")))
    assert (response.text, response.model, response.stop_reason) == ("deny", "m", "end_turn")
    response.text = "changed by agent code"  # its own copy
    with pytest.raises(CacheMissError):  # index 1: served as ever (nothing cached)
        ctx.complete(chat_request("m", ("user", "again")))
    first, second = ctx.events
    assert kind_name(first.kind) == "LLM_CALL" and not attributes_dict(first)["beam_agents.billed"]
    assert attributes_dict(second)["error.type"].endswith("CacheMissError")


def test_a_plain_tool_at_the_fork_index_returns_the_forks_result_and_does_not_run() -> None:
    ctx = ctx_with(ForkAnswer(index=0, model=False, result={"found": False}))
    assert ctx.call("lookup", order_id="A-1") == {"found": False}
    assert RAN == []
    assert ctx.call("lookup", order_id="A-2") == {"order_id": "A-2", "found": True}
    assert RAN == ["A-2"]


def test_a_recorded_tool_at_the_fork_index_is_answered_without_its_tool_cache() -> None:
    ctx = ctx_with(ForkAnswer(index=0, model=False, result={"scan": "lost", "n": [1, 2]}))
    assert ctx.call("track", tracking="T1") == {"n": [1, 2], "scan": "lost"}
    (event,) = ctx.events
    attrs = attributes_dict(event)
    expected = canonical_json.dumps({"scan": "lost", "n": [1, 2]})
    import hashlib

    assert attrs["beam_agents.result_sha256"] == hashlib.sha256(expected).hexdigest()
    assert "error.type" not in attrs and RAN == []


def test_a_fork_answer_of_one_kind_leaves_a_call_of_the_other_kind_alone() -> None:
    ctx = ctx_with(ForkAnswer(index=0, model=True, text="deny"))
    assert ctx.call("lookup", order_id="A-1")["found"] is True  # a tool at index 0: it runs
    assert RAN == ["A-1"]
