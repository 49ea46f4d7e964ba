"""``AnthropicMessagesProvider``: Anthropic's Messages API through the official ``anthropic`` SDK.

``pip install 'beam-agents[anthropic]'``. As for OpenAI, the request body is built
field by field from the ``LlmRequest``; the one value the API requires that an
``LlmRequest`` may leave unset, ``max_tokens``, comes from the provider's own
``default_max_tokens`` (a constructor argument, never the SDK's default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anthropic

from beam_agents._protos import ChatMessage, LlmRequest, LlmResponse, ToolCall, Usage
from beam_agents.errors import ConfigError, ProviderRequestError, ProviderResponseError
from beam_agents.providers._common import (
    SdkClientOwner,
    canonical_arguments,
    extra_fields,
    map_sdk_error,
    parse_json,
)

__all__ = ["AnthropicMessagesProvider"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_TOKENS = 4096


class AnthropicMessagesProvider(SdkClientOwner):
    """A ``Provider`` calling ``POST {base_url}/v1/messages`` through the ``anthropic`` SDK.

    Mapping (``LlmRequest`` -> body): ``model``; ``system`` messages, in order, become
    ``system`` (a string for one, text blocks for several); ``user`` messages
    ``{role: "user", content}``; ``assistant`` messages ``{role: "assistant", content:
    [text block?, tool_use blocks {id, name, input}]}``; consecutive ``tool`` messages
    one ``user`` message of ``tool_result`` blocks ``{tool_use_id, content}``; ``tools``
    ``{name, description, input_schema}``; ``params``: ``max_tokens`` (else
    ``default_max_tokens``), ``temperature``, ``top_p``, ``stop`` as
    ``stop_sequences``, every ``extra`` entry as a body field. ``seed`` has no
    counterpart in the Messages API and is refused rather than dropped.

    Response -> ``LlmResponse``: the text blocks joined, the ``tool_use`` blocks as tool
    calls (``input`` as canonical JSON), ``stop_reason`` verbatim (``end_turn``,
    ``tool_use``, ``max_tokens``...), ``usage`` input/output tokens, ``model``, ``id``.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "anthropic-messages",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        default_headers: Mapping[str, str] | None = None,
        client: anthropic.Anthropic | None = None,
    ) -> None:
        """Build the client (no network call).

        Args:
            api_key: The API key; ``None`` reads ``ANTHROPIC_API_KEY``.
            base_url: Another endpoint of the same API (a proxy, a gateway); ``None``
                is Anthropic's.
            name: Part of every cache key: keep it stable across deploys.
            timeout_s: Seconds per HTTP attempt (the SDK's ``timeout``).
            max_retries: Retries of a failed attempt (the SDK's ``max_retries``: it
                retries connection errors, 408, 409, 429 and 5xx with backoff).
            default_max_tokens: ``max_tokens`` for a request whose ``params.max_tokens``
                is unset. It is not in the cache key: changing it changes answers under
                the same keys, so set ``params.max_tokens`` in the request instead when
                that matters, or change ``name`` with it.
            default_headers: Headers sent with every request.
            client: A ready ``anthropic.Anthropic`` (e.g. for Bedrock or Vertex); the
                options above except ``name`` and ``default_max_tokens`` are then ignored.
        """
        if not name:
            raise ConfigError("AnthropicMessagesProvider: name must be a non-empty string")
        if default_max_tokens < 1:
            raise ConfigError(
                f"AnthropicMessagesProvider: default_max_tokens must be 1 or more, "
                f"got {default_max_tokens}"
            )
        self.name = name
        self._default_max_tokens = default_max_tokens
        if client is None:
            try:
                client = anthropic.Anthropic(
                    api_key=api_key,
                    base_url=base_url,
                    timeout=timeout_s,
                    max_retries=max_retries,
                    default_headers=default_headers,
                )
            except anthropic.AnthropicError as exc:
                raise ConfigError(f"AnthropicMessagesProvider: {exc}") from exc
        self._client = client

    def request_body(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body this provider sends for ``request`` (what the tests assert)."""
        params = request.params
        if params.HasField("seed"):
            raise ProviderRequestError(
                self.name,
                "params.seed is set, but the Anthropic Messages API has no seed; "
                "leave it unset for this provider",
            )
        system = [m.content for m in request.messages if m.role == "system"]
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": params.max_tokens
            if params.HasField("max_tokens")
            else self._default_max_tokens,
            "messages": self._messages([m for m in request.messages if m.role != "system"]),
        }
        if len(system) == 1:
            body["system"] = system[0]
        elif system:
            body["system"] = [{"type": "text", "text": text} for text in system]
        if request.tools:
            body["tools"] = [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": parse_json(
                        t.parameters_json,
                        provider=self.name,
                        what=f"tool {t.name!r}'s parameters_json",
                    )
                    if t.parameters_json
                    else {"type": "object", "properties": {}},
                }
                for t in request.tools
            ]
        if params.HasField("temperature"):
            body["temperature"] = params.temperature
        if params.HasField("top_p"):
            body["top_p"] = params.top_p
        if params.stop:
            body["stop_sequences"] = list(params.stop)
        for field, value in extra_fields(params).items():
            if field in body:
                raise ProviderRequestError(
                    self.name,
                    f"params.extra[{field!r}] would overwrite the request's own {field!r}; "
                    "set it through the LlmRequest instead",
                )
            body[field] = value
        return body

    def _messages(self, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "tool":
                block = {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content,
                }
                last = out[-1] if out else None
                if (
                    last is not None
                    and last["role"] == "user"
                    and isinstance(last["content"], list)
                    and all(b.get("type") == "tool_result" for b in last["content"])
                ):
                    last["content"].append(block)  # parallel tool results: one user turn
                else:
                    out.append({"role": "user", "content": [block]})
            elif message.role == "assistant" and message.tool_calls:
                blocks: list[dict[str, Any]] = []
                if message.content:
                    blocks.append({"type": "text", "text": message.content})
                blocks.extend(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": parse_json(
                            call.arguments_json,
                            provider=self.name,
                            what=f"the arguments of tool call {call.id!r} ({call.name})",
                        )
                        if call.arguments_json
                        else {},
                    }
                    for call in message.tool_calls
                )
                out.append({"role": "assistant", "content": blocks})
            elif message.role in ("user", "assistant"):
                out.append({"role": message.role, "content": message.content})
            else:
                raise ProviderRequestError(
                    self.name,
                    f"message role {message.role!r} is not one the Messages API knows "
                    "(system, user, assistant, tool)",
                )
        return out

    def complete(self, request: LlmRequest) -> LlmResponse:
        """Send ``request`` and return the message as an ``LlmResponse``.

        Raises:
            ProviderCallError: One of its subclasses (rate limit, timeout, unavailable,
                request refused, unreadable response), the SDK's error as ``__cause__``.
        """
        body = self.request_body(request)
        model = body.pop("model")
        max_tokens = body.pop("max_tokens")
        messages = body.pop("messages")
        try:
            message = self._client.messages.create(
                model=model, max_tokens=max_tokens, messages=messages, extra_body=body
            )
        except anthropic.AnthropicError as exc:
            raise map_sdk_error(exc, anthropic, self.name) from exc
        try:
            return self._response(message)
        except (AttributeError, TypeError, ValueError) as exc:
            # The SDK builds its response objects without validating them: a body
            # missing a documented field surfaces here, when it is read.
            raise ProviderResponseError(
                self.name, f"the response lacks a documented field: {exc}"
            ) from exc

    def _response(self, message: Any) -> LlmResponse:
        texts: list[str] = []
        response = LlmResponse(
            stop_reason=message.stop_reason or "",
            model=message.model or "",
            id=message.id or "",
        )
        for block in message.content or ():
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                response.tool_calls.append(
                    ToolCall(
                        id=block.id,
                        name=block.name,
                        arguments_json=canonical_arguments(block.input),
                    )
                )
            elif kind in ("thinking", "redacted_thinking"):
                continue  # reasoning the model shows is not part of the answer
            else:
                raise ProviderResponseError(
                    self.name,
                    f"message {message.id!r} has a {kind!r} content block, which this "
                    "provider cannot represent in an LlmResponse",
                )
        response.text = "".join(texts)
        if message.usage is not None:
            response.usage.CopyFrom(
                Usage(
                    input_tokens=message.usage.input_tokens or 0,
                    output_tokens=message.usage.output_tokens or 0,
                )
            )
        return response
