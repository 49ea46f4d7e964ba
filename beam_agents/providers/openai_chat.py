"""``OpenAIChatProvider``: OpenAI Chat Completions, and servers that speak it (vLLM, Ollama...).

Built on the official ``openai`` SDK (``pip install 'beam-agents[openai]'``). The
request body is ours, field by field, from the ``LlmRequest``: nothing the SDK would
default is left to it, and nothing outside the ``LlmRequest`` changes what is sent
(so the cache key, computed from the ``LlmRequest`` and ``name``, covers the request).
The answer is ours too: the body is read within the call's bounds (``_calls``) and
checked field by field against the documented ``chat.completion`` shape, so what is
not an answer never becomes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import openai

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

__all__ = ["OpenAIChatProvider"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_DEADLINE_S = 180.0
DEFAULT_MAX_RETRIES = 2


class OpenAIChatProvider(SdkClientOwner):
    """A ``Provider`` calling ``POST {base_url}/chat/completions`` through the ``openai`` SDK.

    Mapping (``LlmRequest`` -> body): ``model``; ``messages`` (``system``/``user``
    ``{role, content[, name]}``, ``assistant`` with ``tool_calls`` as
    ``{id, type: "function", function: {name, arguments}}``, ``tool`` as
    ``{role, tool_call_id, content}``); ``tools`` as ``{type: "function", function:
    {name, description, parameters}}``; ``params``: ``temperature``, ``top_p``,
    ``max_tokens`` (sent as ``max_tokens_param``), ``stop``, ``seed``, and every
    ``extra`` entry as a body field. Unset params are not sent.

    Response -> ``LlmResponse``: the first choice's content (``""`` if none), its tool
    calls (arguments as canonical JSON), ``finish_reason`` as ``stop_reason``
    (verbatim: ``stop``, ``tool_calls``, ``length``...), ``usage`` prompt/completion
    tokens, the response's ``model`` and ``id``. A body without ``choices``, a choice
    without a ``message``, a message with neither ``content`` nor ``tool_calls`` (nor a
    ``refusal``), a field of the wrong type, a body that is not JSON, nested deeper
    than 256 levels or larger than ``max_response_bytes``: ``ProviderResponseError``.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "openai-chat",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        deadline_s: float = DEFAULT_DEADLINE_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_retry_wait_s: float = MAX_BACKOFF_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        organization: str | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: openai.OpenAI | None = None,
    ) -> None:
        """Build the client (no network call).

        Args:
            api_key: The API key; ``None`` reads ``OPENAI_API_KEY``. A local server that
                checks none still needs some string (``"unused"``).
            base_url: The server's ``/v1`` URL for an OpenAI-compatible server
                (``http://localhost:8000/v1`` for vLLM); ``None`` is OpenAI's.
            name: Part of every cache key: keep it stable across deploys, and give
                different servers different names (``"vllm-prod"``).
            timeout_s: The most seconds one HTTP attempt may take, connect to last byte
                (a body trickled slowly included).
            deadline_s: The most seconds one ``complete`` may take, every attempt and
                every wait between them included (``Retry-After`` too).
            max_retries: Further attempts after a transient failure (connection errors,
                timeouts, 408, 409, 429 and 5xx), after the server's ``Retry-After`` or
                a backoff of 0.5 s doubling to 8 s, within ``deadline_s``.
            max_retry_wait_s: The longest wait before another attempt (8 s): a server
                asking for more (``Retry-After: 120``) is not waited for here; the call
                fails at once, transiently, and the pipeline retries it on the key.
            max_response_bytes: The most bytes one attempt may receive (16 MiB).
            max_tokens_param: The body field carrying ``params.max_tokens``: OpenAI's
                current ``max_completion_tokens``, or ``max_tokens`` for servers that
                only know the older name.
            organization: OpenAI organization id, if any.
            default_headers: Headers sent with every request.
            client: A ready ``openai.OpenAI`` (e.g. Azure's); ``api_key``, ``base_url``,
                ``organization`` and ``default_headers`` are then its own, its own
                retries are turned off (this provider's take their place), and its HTTP
                client's timeouts apply within each attempt (``timeout_s`` is then
                checked between the body's chunks, not inside a read).
        """
        if not name:
            raise ConfigError("OpenAIChatProvider: name must be a non-empty string")
        limits = call_limits(
            "OpenAIChatProvider",
            timeout_s=timeout_s,
            deadline_s=deadline_s,
            max_retries=max_retries,
            max_response_bytes=max_response_bytes,
            max_retry_wait_s=max_retry_wait_s,
        )
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ConfigError(
                f"OpenAIChatProvider: max_tokens_param must be 'max_completion_tokens' or "
                f"'max_tokens', got {max_tokens_param!r}"
            )
        self.name = name
        self._max_tokens_param = max_tokens_param
        self._own_client(
            openai,
            client,
            lambda http_client: openai.OpenAI(
                api_key=api_key,
                base_url=base_url,
                organization=organization,
                timeout=timeout_s,
                max_retries=0,  # ours take their place, within the call's deadline
                default_headers=default_headers,
                http_client=http_client,
            ),
            timeout_s=timeout_s,
        )
        self._shape = ResponseShape(name, "Chat Completions")
        self._bound_calls(openai, limits, lambda: (self._client.api_key,))

    def request_body(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body this provider sends for ``request`` (what the tests assert)."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [self._message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": parse_json(
                            t.parameters_json,
                            provider=self.name,
                            what=f"tool {t.name!r}'s parameters_json",
                        )
                        if t.parameters_json
                        else {"type": "object", "properties": {}},
                    },
                }
                for t in request.tools
            ]
        params = request.params
        if params.HasField("temperature"):
            body["temperature"] = params.temperature
        if params.HasField("top_p"):
            body["top_p"] = params.top_p
        if params.HasField("max_tokens"):
            body[self._max_tokens_param] = params.max_tokens
        if params.stop:
            body["stop"] = list(params.stop)
        if params.HasField("seed"):
            body["seed"] = params.seed
        for field, value in extra_fields(params, provider=self.name).items():
            if field in body:
                raise ProviderRequestError(
                    self.name,
                    f"params.extra[{field!r}] would overwrite the request's own {field!r}; "
                    "set it through the LlmRequest instead",
                )
            body[field] = value
        return body

    def _message(self, message: ChatMessage) -> dict[str, Any]:
        role = message.role
        if role == "tool":
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
        out: dict[str, Any] = {"role": role, "content": message.content}
        if message.name:
            out["name"] = message.name
        if role == "assistant" and message.tool_calls:
            out["content"] = message.content or None
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json or "{}"},
                }
                for call in message.tool_calls
            ]
        return out

    def complete(self, request: LlmRequest) -> LlmResponse:
        """Send ``request`` and return the first choice as an ``LlmResponse``.

        Raises:
            ProviderCallError: One of its subclasses (rate limit, timeout, unavailable,
                request refused, not an answer), the SDK's error as ``__cause__``; a
                request this provider will not send (a stream) before anything is sent.
        """
        body = self.request_body(request)
        model = body.pop("model")
        messages = body.pop("messages")
        limit = self._calls.limits.max_response_bytes

        def attempt(timeout_s: float) -> LlmResponse:
            # Every field goes in the body as we built it: typed keyword arguments would
            # let the SDK's types reshape them. The body is read here, within the bounds.
            with self._client.chat.completions.with_streaming_response.create(
                model=model, messages=messages, extra_body=body, timeout=timeout_s
            ) as answer:
                raw = read_capped(answer.iter_bytes(), self.name, limit)
                content_type = answer.headers.get("content-type")
            return answer_of(self._response, parse_answer(raw, content_type, self.name), self.name)

        return self._calls.call(attempt)

    def _response(self, data: dict[str, Any]) -> LlmResponse:
        shape = self._shape
        completion_id = shape.get(data, "id", str, "id") or ""
        choices = shape.get(data, "choices", list, "choices", required=True)
        named = f"the completion {completion_id!r}" if completion_id else "the completion (without an id)"
        if not choices:
            raise ProviderResponseError(self.name, f"{named} has no choices")
        choice = choices[0]
        if not isinstance(choice, dict):
            raise shape.refuse("choices[0]", "an object", choice)
        message = shape.get(choice, "message", dict, "choices[0].message", required=True)
        content = shape.get(message, "content", str, "choices[0].message.content")
        tool_calls = shape.get(message, "tool_calls", list, "choices[0].message.tool_calls")
        refusal = shape.get(message, "refusal", str, "choices[0].message.refusal")
        if content is None and not tool_calls and refusal is None:
            raise ProviderResponseError(
                self.name,
                f"{named} answers nothing: choices[0].message has "
                "neither content nor tool_calls (nor a refusal)",
            )
        response = LlmResponse(
            text=content or "",
            stop_reason=shape.get(choice, "finish_reason", str, "choices[0].finish_reason") or "",
            model=shape.get(data, "model", str, "model") or "",
            id=completion_id,
        )
        for n, call in enumerate(tool_calls or ()):
            where = f"choices[0].message.tool_calls[{n}]"
            if not isinstance(call, dict):
                raise shape.refuse(where, "an object", call)
            call_id = shape.get(call, "id", str, f"{where}.id", required=True)
            function = shape.get(call, "function", dict, f"{where}.function")
            if function is None:
                raise ProviderResponseError(
                    self.name,
                    f"tool call {call_id!r} is a {call.get('type')!r} call, not a function",
                )
            arguments = shape.get(function, "arguments", str, f"{where}.function.arguments")
            response.tool_calls.append(
                ToolCall(
                    id=call_id,
                    name=shape.get(function, "name", str, f"{where}.function.name", required=True),
                    arguments_json=canonical_arguments(arguments or "{}"),
                )
            )
        usage = shape.get(data, "usage", dict, "usage")
        if usage is not None:
            response.usage.CopyFrom(
                Usage(
                    input_tokens=shape.count(usage, "prompt_tokens", "usage.prompt_tokens"),
                    output_tokens=shape.count(usage, "completion_tokens", "usage.completion_tokens"),
                )
            )
        return response
