"""OpenAIChatProvider against a real HTTP server speaking Chat Completions, the real SDK between."""

from __future__ import annotations

import socket
from typing import Any

import pytest

pytest.importorskip("openai")

from provider_requests import LOOKUP_SCHEMA, full_request, made, minimal_request
from wire_server import Reply, WireServer

from beam_agents._protos import LlmResponse, ToolCall, Usage
from beam_agents.errors import (
    ConfigError,
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.providers import OpenAIChatProvider

MODEL = "gpt-test"


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    """A chat.completion object in the shape OpenAI documents."""
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1_734_000_000,
        "model": "gpt-test-2026-01-01",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
    }


TEXT = completion({"content": "It shipped yesterday."})


def provider(server: WireServer, **options: Any) -> OpenAIChatProvider:
    options.setdefault("max_retries", 0)
    return made(OpenAIChatProvider(api_key="test-key", base_url=f"{server.url}/v1", **options))


def test_the_request_body_is_the_llm_request_field_by_field(server: WireServer) -> None:
    server.script(Reply(TEXT))
    provider(server).complete(full_request(MODEL))
    (got,) = server.received
    assert (got.method, got.path) == ("POST", "/v1/chat/completions")
    assert got.headers["authorization"] == "Bearer test-key"
    assert got.headers["content-type"] == "application/json"
    assert got.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Where is order A1?", "name": "bob"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id":"A1"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"status":"shipped"}'},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup_order",
                    "description": "Look an order up by id.",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                },
            }
        ],
        "temperature": 0.0,
        "top_p": 0.5,
        "max_completion_tokens": 256,
        "stop": ["END"],
        "top_k": 40,
    }
    assert LOOKUP_SCHEMA  # the schema text above is what was parsed into "parameters"


def test_unset_params_are_not_sent_and_nothing_is_added(server: WireServer) -> None:
    """What the SDK would default stays out of the body: the LlmRequest is all there is."""
    server.script(Reply(TEXT), Reply(TEXT))
    request = minimal_request(MODEL)
    provider(server).complete(request)
    request.params.seed = 7
    request.params.max_tokens = 10
    provider(server, max_tokens_param="max_tokens").complete(request)
    first, second = server.received
    assert first.body == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert second.body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "seed": 7,
        "max_tokens": 10,
    }


def test_a_text_answer_maps_to_an_llm_response(server: WireServer) -> None:
    server.script(Reply(TEXT))
    response = provider(server).complete(minimal_request(MODEL))
    assert response == LlmResponse(
        text="It shipped yesterday.",
        stop_reason="stop",
        usage=Usage(input_tokens=42, output_tokens=7),
        model="gpt-test-2026-01-01",
        id="chatcmpl-123",
    )


def test_tool_calls_map_with_canonical_arguments(server: WireServer) -> None:
    server.script(
        Reply(
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {
                                "name": "lookup_order",
                                "arguments": '{ "order_id": "A1",  "verbose": true }',
                            },
                        },
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "refund", "arguments": "not json {"},
                        },
                    ],
                },
                finish_reason="tool_calls",
            )
        )
    )
    response = provider(server).complete(minimal_request(MODEL))
    assert response.text == "" and response.stop_reason == "tool_calls"
    assert list(response.tool_calls) == [
        ToolCall(
            id="call_a", name="lookup_order", arguments_json='{"order_id":"A1","verbose":true}'
        ),
        # Not JSON: kept verbatim, so agent code sees what the model produced.
        ToolCall(id="call_b", name="refund", arguments_json="not json {"),
    ]


def _error(status: int, message: str, type_: str, code: str | None = None) -> Reply:
    return Reply(
        {"error": {"message": message, "type": type_, "param": None, "code": code}},
        status=status,
        headers={"x-request-id": f"req_{status}"},
    )


@pytest.mark.parametrize(
    ("status", "type_", "expected", "transient"),
    [
        (400, "invalid_request_error", ProviderRequestError, False),
        (401, "invalid_request_error", ProviderRequestError, False),
        (404, "invalid_request_error", ProviderRequestError, False),
        (408, "timeout", ProviderTimeoutError, True),
        (422, "invalid_request_error", ProviderRequestError, False),
        (429, "requests", ProviderRateLimitError, True),
        (500, "server_error", ProviderUnavailableError, True),
        (503, "server_error", ProviderUnavailableError, True),
    ],
)
def test_error_statuses_map_to_provider_failures(
    server: WireServer,
    status: int,
    type_: str,
    expected: type[ProviderCallError],
    transient: bool,
) -> None:
    server.script(_error(status, f"status {status} says no", type_))
    with pytest.raises(expected) as caught:
        provider(server).complete(minimal_request(MODEL))
    exc = caught.value
    assert type(exc) is expected
    assert (exc.provider, exc.status, exc.request_id, exc.transient) == (
        "openai-chat",
        status,
        f"req_{status}",
        transient,
    )
    assert f"status {status} says no" in str(exc) and type_ in str(exc)
    import openai

    assert isinstance(exc.__cause__, openai.APIStatusError)
    assert len(server.received) == 1  # max_retries=0: the SDK did not retry


def test_a_timeout_is_a_provider_timeout(server: WireServer) -> None:
    server.script(Reply(TEXT, delay_s=2.0))
    with pytest.raises(ProviderTimeoutError) as caught:
        provider(server, timeout_s=0.2).complete(minimal_request(MODEL))
    assert caught.value.transient and caught.value.status is None


def test_an_unreachable_server_is_unavailable() -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with (
            OpenAIChatProvider(
                api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5
            ) as p,
            pytest.raises(ProviderUnavailableError, match="could not connect"),
        ):
            p.complete(minimal_request(MODEL))


def test_an_answer_without_choices_is_a_response_error(server: WireServer) -> None:
    server.script(Reply({**TEXT, "choices": []}))
    with pytest.raises(ProviderResponseError, match="no choices"):
        provider(server).complete(minimal_request(MODEL))


def test_the_sdk_retries_with_the_configured_max_retries(server: WireServer) -> None:
    busy = Reply(
        {"error": {"message": "overloaded", "type": "server_error"}},
        status=503,
        headers={"retry-after-ms": "10"},
    )
    server.script(busy, Reply(TEXT))
    response = provider(server, max_retries=1).complete(minimal_request(MODEL))
    assert response.text == "It shipped yesterday." and len(server.received) == 2
    assert server.received[0].body == server.received[1].body
    server.script(busy, busy)
    with pytest.raises(ProviderUnavailableError):
        provider(server, max_retries=1).complete(minimal_request(MODEL))
    assert len(server.received) == 4


def test_request_material_the_protocol_cannot_carry_is_refused(server: WireServer) -> None:
    request = minimal_request(MODEL)
    request.params.extra["model"] = "other"
    with pytest.raises(ProviderRequestError, match="would overwrite"):
        provider(server).complete(request)
    bad_schema = full_request(MODEL)
    bad_schema.tools[0].parameters_json = "{not json"
    with pytest.raises(ProviderRequestError, match="parameters_json is not JSON"):
        provider(server).complete(bad_schema)
    assert server.received == []
    with pytest.raises(ConfigError, match="name"):
        OpenAIChatProvider(api_key="k", name="")


def test_an_answer_missing_documented_fields_is_a_response_error(server: WireServer) -> None:
    server.script(Reply({"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "stop"}]}))
    with pytest.raises(ProviderResponseError, match="documented field"):
        provider(server).complete(minimal_request(MODEL))
