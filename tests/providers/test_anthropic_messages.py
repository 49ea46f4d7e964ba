"""AnthropicMessagesProvider against a real HTTP server speaking Messages, the real SDK between."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("anthropic")

from provider_requests import full_request, made, minimal_request
from wire_server import Reply, WireServer

from beam_agents._protos import ChatMessage, LlmResponse, ToolCall, Usage
from beam_agents.errors import (
    ConfigError,
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.providers import AnthropicMessagesProvider

MODEL = "claude-test"


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn") -> dict[str, Any]:
    """A Message object in the shape Anthropic documents."""
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-2026-01-01",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 31, "output_tokens": 9},
    }


TEXT = message([{"type": "text", "text": "It shipped "}, {"type": "text", "text": "yesterday."}])


def provider(server: WireServer, **options: Any) -> AnthropicMessagesProvider:
    options.setdefault("max_retries", 0)
    return made(AnthropicMessagesProvider(api_key="test-key", base_url=server.url, **options))


def test_the_request_body_is_the_llm_request_field_by_field(server: WireServer) -> None:
    server.script(Reply(TEXT))
    request = full_request(MODEL)
    # A second tool result right after the first: parallel results share one user turn.
    request.messages[2].tool_calls.add(id="call_2", name="lookup_order", arguments_json="{}")
    request.messages.append(ChatMessage(role="tool", tool_call_id="call_2", content="{}"))
    request.messages.append(ChatMessage(role="system", content="Be brief."))
    provider(server).complete(request)
    (got,) = server.received
    assert (got.method, got.path) == ("POST", "/v1/messages")
    # The key travels as x-api-key or (anthropic 2.x) as a bearer token.
    assert "test-key" in (got.headers.get("x-api-key"), got.headers.get("authorization", "")[7:])
    assert got.headers["anthropic-version"]  # the SDK's API version header
    assert got.body == {
        "model": MODEL,
        "max_tokens": 256,
        "system": [
            {"type": "text", "text": "You are a support agent."},
            {"type": "text", "text": "Be brief."},
        ],
        "messages": [
            {"role": "user", "content": "Where is order A1?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "lookup_order",
                        "input": {"order_id": "A1"},
                    },
                    {"type": "tool_use", "id": "call_2", "name": "lookup_order", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": '{"status":"shipped"}',
                    },
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "{}"},
                ],
            },
        ],
        "tools": [
            {
                "name": "lookup_order",
                "description": "Look an order up by id.",
                "input_schema": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
            }
        ],
        "temperature": 0.0,
        "top_p": 0.5,
        "stop_sequences": ["END"],
        "top_k": 40,
    }


def test_unset_params_are_not_sent_and_max_tokens_is_ours(server: WireServer) -> None:
    server.script(Reply(TEXT), Reply(TEXT))
    request = minimal_request(MODEL)
    request.messages.insert(0, ChatMessage(role="system", content="One system prompt."))
    provider(server).complete(request)
    provider(server, default_max_tokens=99).complete(request)
    first, second = server.received
    assert first.body == {
        "model": MODEL,
        "max_tokens": 4096,
        "system": "One system prompt.",
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert second.body["max_tokens"] == 99


def test_a_text_answer_maps_to_an_llm_response(server: WireServer) -> None:
    server.script(Reply(TEXT))
    response = provider(server).complete(minimal_request(MODEL))
    assert response == LlmResponse(
        text="It shipped yesterday.",
        stop_reason="end_turn",
        usage=Usage(input_tokens=31, output_tokens=9),
        model="claude-test-2026-01-01",
        id="msg_01",
    )


def test_tool_use_blocks_map_to_tool_calls(server: WireServer) -> None:
    server.script(
        Reply(
            message(
                [
                    {"type": "thinking", "thinking": "look it up", "signature": "sig"},
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "lookup_order",
                        "input": {"verbose": True, "order_id": "A1"},
                    },
                ],
                stop_reason="tool_use",
            )
        )
    )
    response = provider(server).complete(minimal_request(MODEL))
    assert (response.text, response.stop_reason) == ("Looking.", "tool_use")
    assert list(response.tool_calls) == [
        ToolCall(
            id="toolu_01", name="lookup_order", arguments_json='{"order_id":"A1","verbose":true}'
        )
    ]


def _error(status: int, type_: str) -> Reply:
    return Reply(
        {"type": "error", "error": {"type": type_, "message": f"status {status} says no"}},
        status=status,
        headers={"request-id": f"req_{status}"},
    )


@pytest.mark.parametrize(
    ("status", "type_", "expected", "transient"),
    [
        (400, "invalid_request_error", ProviderRequestError, False),
        (401, "authentication_error", ProviderRequestError, False),
        (403, "permission_error", ProviderRequestError, False),
        (404, "not_found_error", ProviderRequestError, False),
        (413, "request_too_large", ProviderRequestError, False),
        (429, "rate_limit_error", ProviderRateLimitError, True),
        (500, "api_error", ProviderUnavailableError, True),
        (529, "overloaded_error", ProviderUnavailableError, True),
    ],
)
def test_error_statuses_map_to_provider_failures(
    server: WireServer,
    status: int,
    type_: str,
    expected: type[ProviderCallError],
    transient: bool,
) -> None:
    server.script(_error(status, type_))
    with pytest.raises(expected) as caught:
        provider(server).complete(minimal_request(MODEL))
    exc = caught.value
    assert type(exc) is expected
    assert (exc.provider, exc.status, exc.request_id, exc.transient) == (
        "anthropic-messages",
        status,
        f"req_{status}",
        transient,
    )
    assert f"{type_}: status {status} says no" in str(exc)
    import anthropic

    assert isinstance(exc.__cause__, anthropic.APIStatusError)
    assert len(server.received) == 1


def test_a_timeout_is_a_provider_timeout(server: WireServer) -> None:
    server.script(Reply(TEXT, delay_s=2.0))
    with pytest.raises(ProviderTimeoutError):
        provider(server, timeout_s=0.2).complete(minimal_request(MODEL))


def test_the_sdk_retries_with_the_configured_max_retries(server: WireServer) -> None:
    overloaded = _error(529, "overloaded_error")
    server.script(
        Reply(overloaded.body, 529, {"retry-after-ms": "10", "x-should-retry": "true"}),
        Reply(TEXT),
    )
    response = provider(server, max_retries=1).complete(minimal_request(MODEL))
    assert response.id == "msg_01" and len(server.received) == 2


def test_what_the_messages_api_cannot_carry_is_refused(server: WireServer) -> None:
    seeded = minimal_request(MODEL)
    seeded.params.seed = 1
    with pytest.raises(ProviderRequestError, match="no seed"):
        provider(server).complete(seeded)
    odd = minimal_request(MODEL)
    odd.messages.add(role="developer", content="x")
    with pytest.raises(ProviderRequestError, match="'developer'"):
        provider(server).complete(odd)
    assert server.received == []
    server.script(Reply(message([{"type": "server_tool_use", "id": "x", "name": "web"}])))
    with pytest.raises(ProviderResponseError, match="server_tool_use"):
        provider(server).complete(minimal_request(MODEL))
    with pytest.raises(ConfigError, match="default_max_tokens"):
        AnthropicMessagesProvider(api_key="k", default_max_tokens=0)
