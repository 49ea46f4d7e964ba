"""The LlmRequests the provider tests send (one with every field set, one with none), and ``made``."""

from __future__ import annotations

from typing import Any, TypeVar

from beam_agents._protos import ChatMessage, LlmRequest, SamplingParams, ToolCall, ToolSpec

P = TypeVar("P")
MADE: list[Any] = []
"""Providers built by the running test; conftest closes them when it ends."""


def made(provider: P) -> P:
    """Register ``provider`` to be closed at the end of the test."""
    MADE.append(provider)
    return provider


LOOKUP_SCHEMA = (
    '{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}'
)


def full_request(model: str) -> LlmRequest:
    """System prompt, user turn, an assistant tool call, its result, tools and every param."""
    request = LlmRequest(
        model=model,
        messages=[
            ChatMessage(role="system", content="You are a support agent."),
            ChatMessage(role="user", content="Where is order A1?", name="bob"),
            ChatMessage(
                role="assistant",
                content="Let me look.",
                tool_calls=[
                    ToolCall(id="call_1", name="lookup_order", arguments_json='{"order_id":"A1"}')
                ],
            ),
            ChatMessage(role="tool", tool_call_id="call_1", content='{"status":"shipped"}'),
        ],
        tools=[
            ToolSpec(
                name="lookup_order",
                description="Look an order up by id.",
                parameters_json=LOOKUP_SCHEMA,
            )
        ],
        params=SamplingParams(
            temperature=0.0, top_p=0.5, max_tokens=256, stop=["END"], extra={"top_k": "40"}
        ),
    )
    return request


def minimal_request(model: str) -> LlmRequest:
    return LlmRequest(model=model, messages=[ChatMessage(role="user", content="hi")])
