"""The agent context: the rules agent code lives by, checked where they are broken."""

from __future__ import annotations

import random
from typing import Any

import pytest
from core_agents import TOOLS

from beam_agents import context
from beam_agents.cache_key import compute_cache_key, request_fingerprint
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
from beam_agents.trace_events import attributes_dict, kind_name, span_id_for, trace_id_for


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


def test_random_is_seeded_on_first_use_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded: list[tuple[bytes, int]] = []

    def counting(entity_key: bytes, seq: int) -> random.Random:
        seeded.append((entity_key, seq))
        return seeded_random(entity_key, seq)

    monkeypatch.setattr(context, "seeded_random", counting)
    ctx = make_ctx()
    ctx.complete(chat_request("m", ("user", "hi")))
    ctx.memory["x"] = 1
    assert seeded == []

    first = ctx.random.random()

    assert ctx.random is ctx.random and seeded == [(b"k", 3)]
    assert first == seeded_random(b"k", 3).random()


def test_random_follows_the_key_and_seq_the_context_was_built_with() -> None:
    ctx = make_ctx()
    ctx.seq = 99  # agent code rebinding it does not reseed the activation's randomness

    assert ctx.random.random() == seeded_random(b"k", 3).random()


def test_agent_code_may_replace_random() -> None:
    ctx = make_ctx()
    mine = random.Random(7)

    ctx.random = mine

    assert ctx.random is mine


def test_a_provider_failure_keeps_the_request_fingerprint() -> None:
    ctx = make_ctx(UnservableProvider("scripted"))
    request = chat_request("m", ("system", "s"), ("user", "hi"))

    with pytest.raises(CacheMissError):
        ctx.complete(request)

    (failure,) = ctx.provider_failures
    assert failure.fingerprint == request_fingerprint(request, provider="scripted")


def test_a_staged_insert_keeps_the_request_fingerprint() -> None:
    cache = ReplayCache.empty()
    ctx = make_ctx(cache=cache)
    request = chat_request("m", ("user", "hi"))

    ctx.complete(request)

    (entry,) = cache.entries_by_recency()
    assert entry.fingerprint == request_fingerprint(request, provider="scripted")
    assert entry.cache_key == compute_cache_key(request, provider="scripted")


def test_events_of_a_context_carry_the_ids_of_its_activation() -> None:
    ctx = make_ctx()
    ctx.call("lookup_order", order_id="A1")
    ctx.complete(chat_request("m", ("user", "hi")))

    assert [e.trace_id for e in ctx.events] == [trace_id_for(b"k", 3)] * 2
    assert [e.span_id for e in ctx.events] == [span_id_for(b"k", 3, i) for i in (0, 1)]
    assert [e.parent_span_id for e in ctx.events] == [b"", span_id_for(b"k", 3, 0)]
