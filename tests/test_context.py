"""The agent context: the rules agent code lives by, checked where they are broken."""

from __future__ import annotations

from typing import Any

import pytest
from core_agents import TOOLS

from beam_agents.context import AgentContext, derive_intent_id, seeded_random
from beam_agents.errors import (
    AgentCodeError,
    CacheMissError,
    MemoryValueError,
    SideEffectRefusedError,
)
from beam_agents.hitl import HitlPolicy
from beam_agents.llm_cache import CachePolicy, ReplayCache
from beam_agents.provider import UnservableProvider
from beam_agents.testing import ScriptedProvider, chat_request
from beam_agents.trace_events import attributes_dict, kind_name


def make_ctx(provider: Any = None, **kw: Any) -> AgentContext:
    return AgentContext(
        entity_key=b"k",
        seq=3,
        now_ms=1_000,
        memory={},
        cache=kw.pop("cache", ReplayCache.empty()),
        provider=provider or ScriptedProvider(lambda r: "ok"),
        registry=TOOLS,
        hitl=kw.pop("hitl", HitlPolicy()),
        cache_policy=CachePolicy(),
        **kw,
    )


def test_call_refuses_a_side_effect_tool_before_it_runs_and_names_act() -> None:
    ctx = make_ctx()
    with pytest.raises(SideEffectRefusedError, match=r"ctx\.act\('send_email'"):
        ctx.call("send_email", to="x", body="y")  # the tool body would raise AssertionError
    (event,) = ctx.events
    assert kind_name(event.kind) == "TOOL_CALL"
    assert attributes_dict(event)["error.type"].endswith("SideEffectRefusedError")


def test_act_refuses_a_read_only_tool() -> None:
    with pytest.raises(AgentCodeError, match=r"ctx\.call"):
        make_ctx().act("lookup_order", order_id="A1")


@pytest.mark.parametrize(
    "value",
    [object(), {1: "x"}, float("nan"), {"a": [1, {2, 3}]}, b"bytes"],
    ids=["object", "int-key", "nan", "nested-set", "bytes"],
)
def test_memory_refuses_non_json_values_at_the_write(value: Any) -> None:
    ctx = make_ctx()
    with pytest.raises(MemoryValueError, match="JSON"):
        ctx.memory["x"] = value
    assert "x" not in ctx.memory


def test_memory_accepts_json_values() -> None:
    ctx = make_ctx()
    ctx.memory["x"] = {"a": [1, 2.5, None, True, "ü"]}
    assert ctx.memory["x"]["a"][4] == "ü"


def test_second_identical_request_is_served_from_the_staged_insert() -> None:
    provider = ScriptedProvider(lambda r: "once")
    ctx = make_ctx(provider)
    request = chat_request("m", ("user", "hi"))
    first, second = ctx.complete(request), ctx.complete(request)
    assert first.text == second.text == "once"
    assert provider.calls == 1
    hits = [attributes_dict(e)["beam_agents.cache_hit"] for e in ctx.events]
    billed = [attributes_dict(e)["beam_agents.billed"] for e in ctx.events]
    assert hits == [False, True] and billed == [True, False]


def test_unservable_provider_miss_is_recorded_with_key_and_status() -> None:
    ctx = make_ctx(UnservableProvider("scripted"))
    with pytest.raises(CacheMissError) as info:
        ctx.complete(chat_request("m", ("user", "hi")))
    (failure,) = ctx.provider_failures
    assert failure.cache_key == info.value.cache_key
    assert failure.lookup_status.name == "ABSENT"
    assert attributes_dict(ctx.events[0])["beam_agents.cache_key"] == failure.cache_key


def test_act_stamps_expiry_and_approval_from_the_policy() -> None:
    hitl = HitlPolicy(
        intent_ttl_ms=50, approval_channel="refunds", approval_required_tools={"send_email"}
    )
    ctx = make_ctx(hitl=hitl)
    intent_id = ctx.act("send_email", to="a", body="b")
    (intent,) = ctx.staged_intents
    assert intent.intent_id == intent_id == derive_intent_id(b"k", 3, 0)
    assert (intent.expires_at_ms, intent.requires_approval, intent.approval_channel) == (
        1_050,
        True,
        "refunds",
    )


def test_random_is_seeded_by_key_and_seq() -> None:
    assert seeded_random(b"k", 1).random() == seeded_random(b"k", 1).random()
    assert seeded_random(b"k", 1).random() != seeded_random(b"k", 2).random()
    assert seeded_random(b"k", 1).random() != seeded_random(b"j", 1).random()
