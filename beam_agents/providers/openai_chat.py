"""``OpenAIChatProvider``: OpenAI Chat Completions, and servers that speak it (vLLM, Ollama...).

Built on the official ``openai`` SDK (``pip install 'beam-agents[openai]'``). The
request body is ours, field by field, from the ``LlmRequest``: nothing the SDK would
default is left to it, and nothing outside the ``LlmRequest`` changes what is sent
(so the cache key, computed from the ``LlmRequest`` and ``name``, covers the request).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import openai

from beam_agents._protos import ChatMessage, LlmRequest, LlmResponse, ToolCall, Usage
from beam_agents.errors import ConfigError, ProviderRequestError, ProviderResponseError
from beam_agents.providers._common import (
    SdkClientOwner,
    canonical_arguments,
    extra_fields,
    map_sdk_error,
    parse_json,
)

__all__ = ["OpenAIChatProvider"]

DEFAULT_TIMEOUT_S = 60.0
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
    tokens, the response's ``model`` and ``id``.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "openai-chat",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
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
            timeout_s: Seconds per HTTP attempt (the SDK's ``timeout``).
            max_retries: Retries of a failed attempt (the SDK's ``max_retries``: it
                retries connection errors, 408, 409, 429 and 5xx with backoff).
            max_tokens_param: The body field carrying ``params.max_tokens``: OpenAI's
                current ``max_completion_tokens``, or ``max_tokens`` for servers that
                only know the older name.
            organization: OpenAI organization id, if any.
            default_headers: Headers sent with every request.
            client: A ready ``openai.OpenAI`` (e.g. Azure's); the options above except
                ``name`` and ``max_tokens_param`` are then ignored.
        """
        if not name:
            raise ConfigError("OpenAIChatProvider: name must be a non-empty string")
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ConfigError(
                f"OpenAIChatProvider: max_tokens_param must be 'max_completion_tokens' or "
                f"'max_tokens', got {max_tokens_param!r}"
            )
        self.name = name
        self._max_tokens_param = max_tokens_param
        if client is None:
            try:
                client = openai.OpenAI(
                    api_key=api_key,
                    base_url=base_url,
                    organization=organization,
                    timeout=timeout_s,
                    max_retries=max_retries,
                    default_headers=default_headers,
                )
            except openai.OpenAIError as exc:
                raise ConfigError(f"OpenAIChatProvider: {exc}") from exc
        self._client = client

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
        for field, value in extra_fields(params).items():
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
                request refused, unreadable response), the SDK's error as ``__cause__``.
        """
        body = self.request_body(request)
        model = body.pop("model")
        messages = body.pop("messages")
        try:
            # Every field goes in the body as we built it: typed keyword arguments would
            # let the SDK's types reshape them.
            completion = self._client.chat.completions.create(
                model=model, messages=messages, extra_body=body
            )
        except openai.OpenAIError as exc:
            raise map_sdk_error(exc, openai, self.name) from exc
        try:
            return self._response(completion)
        except (AttributeError, TypeError, ValueError) as exc:
            # The SDK builds its response objects without validating them: a body
            # missing a documented field surfaces here, when it is read.
            raise ProviderResponseError(
                self.name, f"the response lacks a documented field: {exc}"
            ) from exc

    def _response(self, completion: Any) -> LlmResponse:
        if not completion.choices:
            raise ProviderResponseError(
                self.name, f"the completion {completion.id!r} has no choices"
            )
        choice = completion.choices[0]
        message = choice.message
        response = LlmResponse(
            text=message.content or "",
            stop_reason=choice.finish_reason or "",
            model=completion.model or "",
            id=completion.id or "",
        )
        for call in message.tool_calls or ():
            function = getattr(call, "function", None)
            if function is None:
                raise ProviderResponseError(
                    self.name, f"tool call {call.id!r} is a {call.type!r} call, not a function"
                )
            response.tool_calls.append(
                ToolCall(
                    id=call.id,
                    name=function.name,
                    arguments_json=canonical_arguments(function.arguments or "{}"),
                )
            )
        if completion.usage is not None:
            response.usage.CopyFrom(
                Usage(
                    input_tokens=completion.usage.prompt_tokens or 0,
                    output_tokens=completion.usage.completion_tokens or 0,
                )
            )
        return response
