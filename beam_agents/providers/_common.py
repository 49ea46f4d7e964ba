"""What the SDK-backed providers share: request material helpers and the error mapping."""

from __future__ import annotations

import json
from typing import Any, Self

from beam_agents import canonical_json
from beam_agents._protos import SamplingParams
from beam_agents.errors import (
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)


class SdkClientOwner:
    """Lifecycle of a provider that owns an SDK client in ``self._client``.

    ``close()`` (RunAgent's DoFn calls it in ``teardown``), ``with`` blocks and the repr
    are the same for every SDK; each provider builds its own client.
    """

    _client: Any
    name: str

    def close(self) -> None:
        """Close the SDK client's connections (RunAgent's DoFn calls it in ``teardown``)."""
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, "
            f"base_url={str(self._client.base_url)!r})"
        )


def extra_fields(params: SamplingParams) -> dict[str, Any]:
    """``params.extra`` as request-body fields: each value JSON if it parses, else the string.

    ``{"top_k": "40"}`` sends ``"top_k": 40``; ``{"reasoning_effort": "low"}`` sends the
    string. Sorted by name, so the body does not depend on map iteration order.
    """
    out: dict[str, Any] = {}
    for name in sorted(params.extra):
        text = params.extra[name]
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def canonical_arguments(value: Any) -> str:
    """A tool call's arguments as canonical JSON text (``ToolCall.arguments_json``).

    ``value`` is the decoded arguments (Anthropic's ``input``) or JSON text (OpenAI's
    ``arguments``). Text that is not JSON (a model can emit that) is kept verbatim, so
    agent code sees exactly what the model produced and can answer it with an error.
    """
    raw: str | None = value if isinstance(value, str) else None
    if raw is not None:
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
    try:
        return canonical_json.dumps(value).decode("utf-8")
    except (TypeError, ValueError):  # NaN, Infinity: JSON-ish, but not canonical JSON
        return raw if raw is not None else json.dumps(value, sort_keys=True, default=str)


def parse_json(text: str, *, provider: str, what: str) -> Any:
    """JSON text of the request (a tool call's arguments, a tool's schema), decoded."""
    try:
        return json.loads(text)
    except ValueError:
        raise ProviderRequestError(
            provider,
            f"{what} is not JSON ({text[:80]!r}); this provider's protocol carries it as a "
            "JSON object",
        ) from None


def map_sdk_error(exc: Exception, sdk: Any, provider: str) -> ProviderCallError:
    """The ``ProviderCallError`` for an error the SDK raised (its own retries spent).

    ``sdk`` is the ``openai`` or ``anthropic`` module: both SDKs raise the same family
    (``APITimeoutError`` < ``APIConnectionError``, ``APIStatusError`` with
    ``status_code``, ``APIResponseValidationError``), so one mapping serves both.
    """
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderTimeoutError(provider, f"the request timed out ({exc})")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderUnavailableError(provider, f"could not connect: {exc}")
    if isinstance(exc, sdk.APIResponseValidationError):
        return ProviderResponseError(
            provider,
            f"the response does not have the documented shape: {exc}",
            status=getattr(exc, "status_code", None),
        )
    if isinstance(exc, sdk.APIStatusError):
        status = int(exc.status_code)
        request_id = getattr(exc, "request_id", None) or None
        message = _status_message(exc)
        cls: type[ProviderCallError]
        if status == 429:
            cls = ProviderRateLimitError
        elif status == 408:
            cls = ProviderTimeoutError
        elif status >= 500 or status == 409:  # 409: a lock or conflict the SDK retries too
            cls = ProviderUnavailableError
        elif 400 <= status < 500:
            cls = ProviderRequestError
        else:
            cls = ProviderResponseError
        return cls(provider, message, status=status, request_id=request_id)
    credentials = getattr(sdk, "CredentialsError", None)
    if credentials is not None and isinstance(exc, credentials):
        return ProviderRequestError(provider, f"no usable credentials: {exc}")
    return ProviderCallError(provider, f"{type(exc).__name__}: {exc}")


def _status_message(exc: Any) -> str:
    """The provider's own error message from an error response body, else the SDK's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type") or error.get("code")
            return f"{kind}: {error['message']}" if isinstance(kind, str) else error["message"]
    return str(getattr(exc, "message", exc))
