"""``AnthropicMessagesProvider``: Anthropic's Messages API through the official ``anthropic`` SDK.

``pip install 'beam-agents[anthropic]'``. As for OpenAI, the request body is built
field by field from the ``LlmRequest``; the one value the API requires that an
``LlmRequest`` may leave unset, ``max_tokens``, comes from the provider's own
``default_max_tokens`` (a constructor argument, never the SDK's default). The answer
is read within the call's bounds (``_calls``) and checked field by field against the
documented Message shape: a 200 that is not a Message is never an (empty) answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anthropic

from beam_agents._protos import ChatMessage, LlmRequest, LlmResponse, ToolCall, Usage
from beam_agents.errors import ConfigError, ProviderRequestError, ProviderResponseError
from beam_agents.providers._calls import (
    DEFAULT_MAX_RESPONSE_BYTES,
    MAX_BACKOFF_S,
    answer_of,
    parse_answer,
    read_capped,
)
from beam_agents.providers._common import (
    ResponseShape,
    SdkClientOwner,
    call_limits,
    canonical_arguments,
    extra_fields,
    parse_json,
)

__all__ = ["AnthropicMessagesProvider"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_DEADLINE_S = 180.0
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
    A body whose ``type`` is not ``"message"`` (an ``"error"`` sent with 200 included),
    whose ``content`` is not a list of blocks, a field of the wrong type, a body that is
    not JSON, nested deeper than 256 levels or larger than ``max_response_bytes``:
    ``ProviderResponseError``.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "anthropic-messages",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        deadline_s: float = DEFAULT_DEADLINE_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait_s: float = MAX_BACKOFF_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
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
            timeout_s: The most seconds one HTTP attempt may take, connect to last byte
                (a body trickled slowly included).
            deadline_s: The most seconds one ``complete`` may take, every attempt and
                every wait between them included (``Retry-After`` too).
            max_retries: Further attempts after a transient failure (connection errors,
                timeouts, 408, 409, 429, 5xx and 529), after the server's
                ``Retry-After`` or a backoff of 0.5 s doubling to 8 s, within
                ``deadline_s``.
            max_retry_wait_s: The longest wait before another attempt (8 s): a server
                asking for more (``Retry-After: 120``) is not waited for here; the call
                fails at once, transiently, and the pipeline retries it on the key.
            max_response_bytes: The most bytes one attempt may receive (16 MiB).
            default_max_tokens: ``max_tokens`` for a request whose ``params.max_tokens``
                is unset. It is not in the cache key: changing it changes answers under
                the same keys, so set ``params.max_tokens`` in the request instead when
                that matters, or change ``name`` with it.
            default_headers: Headers sent with every request.
            client: A ready ``anthropic.Anthropic`` (e.g. for Bedrock or Vertex);
                ``api_key``, ``base_url`` and ``default_headers`` are then its own, its
                own retries are turned off (this provider's take their place), and its
                HTTP client's timeouts apply within each attempt (``timeout_s`` is then
                checked between the body's chunks, not inside a read).
        """
        if not name:
            raise ConfigError("AnthropicMessagesProvider: name must be a non-empty string")
        limits = call_limits(
            "AnthropicMessagesProvider",
            timeout_s=timeout_s,
            deadline_s=deadline_s,
            max_retries=max_retries,
            max_response_bytes=max_response_bytes,
            max_retry_wait_s=max_retry_wait_s,
        )
        if default_max_tokens < 1:
            raise ConfigError(
                f"AnthropicMessagesProvider: default_max_tokens must be 1 or more, "
                f"got {default_max_tokens}"
            )
        self.name = name
        self._default_max_tokens = default_max_tokens
        self._own_client(
            anthropic,
            client,
            lambda http_client: anthropic.Anthropic(
                api_key=api_key,
                base_url=base_url,
                timeout=timeout_s,
                max_retries=0,  # ours take their place, within the call's deadline
                default_headers=default_headers,
                http_client=http_client,
            ),
            timeout_s=timeout_s,
        )
        self._shape = ResponseShape(name, "Messages")
        self._bound_calls(
            anthropic,
            limits,
            lambda: (
                getattr(self._client, "api_key", None),
                getattr(self._client, "auth_token", None),
            ),
        )

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
        for field, value in extra_fields(params, provider=self.name).items():
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
                request refused, not an answer), the SDK's error as ``__cause__``; a
                request this provider will not send (a stream) before anything is sent.
        """
        body = self.request_body(request)
        model = body.pop("model")
        max_tokens = body.pop("max_tokens")
        messages = body.pop("messages")
        limit = self._calls.limits.max_response_bytes

        def attempt(timeout_s: float) -> LlmResponse:
            with self._client.messages.with_streaming_response.create(
                model=model,
                max_tokens=max_tokens,
                messages=messages,
                extra_body=body,
                timeout=timeout_s,
            ) as answer:
                raw = read_capped(answer.iter_bytes(), self.name, limit)
                content_type = answer.headers.get("content-type")
            return answer_of(self._response, parse_answer(raw, content_type, self.name), self.name)

        return self._calls.call(attempt)

    def _response(self, data: dict[str, Any]) -> LlmResponse:
        shape = self._shape
        kind = data.get("type")
        if kind == "error":
            error = data.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            raise ProviderResponseError(
                self.name,
                "the response is an error object, not a message"
                + (f": {said}" if isinstance(said, str) else ""),
            )
        if kind != "message":
            raise shape.refuse("type", "the string 'message'", *([kind] if "type" in data else []))
        message_id = shape.get(data, "id", str, "id") or ""
        content = shape.get(data, "content", list, "content", required=True)
        response = LlmResponse(
            stop_reason=shape.get(data, "stop_reason", str, "stop_reason") or "",
            model=shape.get(data, "model", str, "model") or "",
            id=message_id,
        )
        texts: list[str] = []
        for n, block in enumerate(content):
            where = f"content[{n}]"
            if not isinstance(block, dict):
                raise shape.refuse(where, "an object", block)
            block_type = shape.get(block, "type", str, f"{where}.type", required=True)
            if block_type == "text":
                texts.append(shape.get(block, "text", str, f"{where}.text", required=True))
            elif block_type == "tool_use":
                response.tool_calls.append(
                    ToolCall(
                        id=shape.get(block, "id", str, f"{where}.id", required=True),
                        name=shape.get(block, "name", str, f"{where}.name", required=True),
                        arguments_json=canonical_arguments(
                            shape.get(block, "input", dict, f"{where}.input", required=True)
                        ),
                    )
                )
            elif block_type in ("thinking", "redacted_thinking"):
                continue  # reasoning the model shows is not part of the answer
            else:
                raise ProviderResponseError(
                    self.name,
                    f"message {message_id!r} has a {block_type!r} content block, which this "
                    "provider cannot represent in an LlmResponse",
                )
        response.text = "".join(texts)
        usage = shape.get(data, "usage", dict, "usage")
        if usage is not None:
            response.usage.CopyFrom(
                Usage(
                    input_tokens=shape.count(usage, "input_tokens", "usage.input_tokens"),
                    output_tokens=shape.count(usage, "output_tokens", "usage.output_tokens"),
                )
            )
        return response
