"""What the SDK-backed providers share: request material helpers, response shape checks and
the error mapping (the call's bounds and retries are ``_calls``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any, Self

import httpx2

from beam_agents import canonical_json
from beam_agents._protos import SamplingParams
from beam_agents.errors import (
    ConfigError,
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.provider import CallObserver
from beam_agents.providers._calls import (
    CallLimits,
    CallRunner,
    budgeted_http_client,
    html_summary,
    is_html,
)


class SdkClientOwner:
    """Lifecycle of a provider that owns an SDK client in ``self._client``, and its calls.

    ``close()`` (RunAgent's DoFn calls it in ``teardown``), ``with`` blocks, the repr,
    the client's making (``_own_client``) and the call runner (``_bound_calls``,
    ``observe_calls``) are the same for every SDK; each provider builds its own client.
    """

    _client: Any
    _calls: CallRunner
    name: str

    def _own_client(
        self,
        sdk: Any,
        client: Any,
        build: Callable[[httpx2.Client], Any],
        *,
        timeout_s: float,
    ) -> None:
        """``client`` with its own retries off, or the one ``build`` makes on an HTTP
        client whose connections obey each attempt's budget (``_calls``)."""
        if client is not None:
            self._client = client.with_options(max_retries=0)
            return
        http_client = budgeted_http_client(timeout_s, sdk.DEFAULT_CONNECTION_LIMITS)
        base = getattr(sdk, "OpenAIError", None) or sdk.AnthropicError
        try:
            self._client = build(http_client)
        except base as exc:
            http_client.close()
            raise ConfigError(f"{type(self).__name__}: {exc}") from exc

    def _bound_calls(
        self, sdk: Any, limits: CallLimits, secrets: Callable[[], Iterable[str | None]]
    ) -> None:
        """Run every call through a ``CallRunner`` within ``limits``, scrubbing ``secrets``."""
        name = self.name
        self._calls = CallRunner(
            name, limits, map_error=lambda exc: map_sdk_error(exc, sdk, name), secrets=secrets
        )

    def observe_calls(self, observer: CallObserver) -> None:
        """Report every HTTP attempt and wait to ``observer`` (RunAgent's DoFn: Beam metrics)."""
        self._calls.observer = observer

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


STREAMING_FIELDS = ("stream", "stream_options")
"""Body fields that ask for a streamed answer, which these providers never read."""


def extra_fields(params: SamplingParams, *, provider: str) -> dict[str, Any]:
    """``params.extra`` as request-body fields: each value JSON if it parses, else the string.

    ``{"top_k": "40"}`` sends ``"top_k": 40``; ``{"reasoning_effort": "low"}`` sends the
    string. Sorted by name, so the body does not depend on map iteration order.

    Raises:
        ProviderRequestError: A field asks for a streamed answer (``stream``,
            ``stream_options``): refused before anything is sent, since the provider
            reads one whole JSON answer (it would fail later, and misleadingly).
    """
    streaming = [name for name in STREAMING_FIELDS if name in params.extra]
    if streaming:
        raise ProviderRequestError(
            provider,
            f"params.extra[{streaming[0]!r}] asks for a streamed answer, which this provider "
            "does not read (it reads one whole JSON answer); remove it from the LlmRequest",
        )
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


def call_limits(
    owner: str,
    *,
    timeout_s: float,
    deadline_s: float,
    max_retries: int,
    max_response_bytes: int,
    max_retry_wait_s: float,
) -> CallLimits:
    """The ``CallLimits`` of these options; ``ConfigError`` naming one that cannot bound a call."""
    for name, value in (
        ("timeout_s", timeout_s),
        ("deadline_s", deadline_s),
        ("max_retry_wait_s", max_retry_wait_s),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ConfigError(f"{owner}: {name} must be a positive number of seconds, got {value!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"{owner}: max_retries must be an int of 0 or more, got {max_retries!r}")
    if (
        isinstance(max_response_bytes, bool)
        or not isinstance(max_response_bytes, int)
        or max_response_bytes < 1024
    ):
        raise ConfigError(
            f"{owner}: max_response_bytes must be an int of 1024 or more, got {max_response_bytes!r}"
        )
    return CallLimits(
        timeout_s=float(timeout_s),
        deadline_s=float(deadline_s),
        max_retries=max_retries,
        max_response_bytes=max_response_bytes,
        max_retry_wait_s=float(max_retry_wait_s),
    )


class ResponseShape:
    """Reads a decoded response body field by field, refusing what the vendor never sends.

    Every refusal is a ``ProviderResponseError`` naming the field's path
    (``choices[0].message.content``) and what it holds instead.
    """

    def __init__(self, provider: str, vendor: str) -> None:
        self.provider = provider
        self.vendor = vendor

    def refuse(self, path: str, expected: str, *value: Any) -> ProviderResponseError:
        """The error for field ``path``, which should be ``expected``: it holds ``value``,
        or (no ``value`` given) it is missing."""
        found = _json_kind(value[0]) if value and value[0] is not _MISSING else "missing"
        return ProviderResponseError(
            self.provider,
            f"the response lacks a documented field of the {self.vendor} response: {path} "
            f"should be {expected}, and is {found}",
        )

    def get(
        self,
        obj: dict[str, Any],
        name: str,
        kind: type | tuple[type, ...],
        path: str,
        *,
        required: bool = False,
    ) -> Any:
        """``obj[name]`` if it is a ``kind``; None if absent or null and not ``required``."""
        value = obj.get(name, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise self.refuse(path, _kind_name(kind), value)
            return None
        if isinstance(value, bool) and bool not in _kinds(kind):
            raise self.refuse(path, _kind_name(kind), value)
        if not isinstance(value, kind):
            raise self.refuse(path, _kind_name(kind), value)
        return value

    def count(self, obj: dict[str, Any] | None, name: str, path: str) -> int:
        """A token count: a non-negative int, 0 when absent or null."""
        if obj is None:
            return 0
        value = self.get(obj, name, int, path)
        if value is None:
            return 0
        if value < 0:
            raise self.refuse(path, "a count of 0 or more", value)
        return int(value)


_MISSING: Any = object()


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
    return " or ".join(names.get(k, k.__name__) for k in _kinds(kind))


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return f"the number {value!r}"


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
    if isinstance(exc, httpx2.DecodingError):
        return ProviderResponseError(provider, f"the response body could not be decoded: {exc}")
    # Reading the body happens after the SDK's send: its transport errors arrive unwrapped.
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderTimeoutError(provider, f"the response timed out while it was read ({exc})")
    if isinstance(exc, httpx2.TransportError):
        return ProviderUnavailableError(provider, f"the connection failed while the response was read: {exc}")
    return ProviderCallError(provider, f"{type(exc).__name__}: {exc}")


def _status_message(exc: Any) -> str:
    """The provider's own error message from an error response body, else the SDK's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type") or error.get("code")
            return f"{kind}: {error['message']}" if isinstance(kind, str) else error["message"]
    response = getattr(exc, "response", None)
    text = body if isinstance(body, str) else _response_text(response)
    headers = getattr(response, "headers", None)
    content_type = headers.get("content-type") if headers is not None else None
    if text and is_html(content_type, text):
        # A gateway's or proxy's error page: its title says more than the SDK's "Error code".
        return f"an HTML page, not the provider's JSON error ({html_summary(text)})"
    if text and text.strip() and not isinstance(body, dict):
        return f"the body reads {' '.join(text.split())[:200]!r}"
    return str(getattr(exc, "message", exc))


def _response_text(response: Any) -> str:
    """A streamed error response's text when it was read (never reads it: it may be huge)."""
    try:
        content = getattr(response, "_content", None)
        return content[:4096].decode("utf-8", "replace") if isinstance(content, bytes) else ""
    except Exception:  # a half-read or odd response object: no text
        return ""
