"""One call of an SDK-backed provider: bounded attempts, waits, a deadline, and clean errors.

``CallRunner.call(attempt)`` runs ``attempt`` (one HTTP request through the vendor's
SDK, whose own retries are off) until it answers or the call gives up:

- **each attempt** is bounded by ``timeout_s`` of wall time, and by
  ``max_response_bytes`` received: the provider's own HTTP client runs on a network
  backend (``budgeted_http_transport``) that clamps every connect, write and read to
  what is left of the attempt and counts the bytes read, so neither a server that
  trickles a body nor one that sends 300 MB can hold a worker or its memory;
- **the call** is bounded by ``deadline_s``: attempts and the waits between them,
  ``Retry-After`` included; a server asking for a longer wait than
  ``max_retry_wait_s`` (or than is left) gets no retry here: the call fails now,
  transiently, and the key's retry policy (``RunAgent``: in event time, without
  holding the worker) takes over;
- a transient failure (``ProviderCallError.transient``) is tried again up to
  ``max_retries`` times, after the server's ``Retry-After`` or an exponential backoff;
- **every** failure leaves as a ``ProviderCallError`` subclass, the SDK's error as
  its ``__cause__``, with the provider's API key scrubbed from the text of every
  exception in the chain (a server may echo it back in an error body);
- each attempt and each wait is reported to the provider's ``CallObserver`` (Beam
  metrics, in the pipeline), never to a trace.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import math
import random
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore2
import httpx2

from beam_agents.canonical_json import MAX_JSON_DEPTH
from beam_agents.errors import (
    ProviderCallError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.migrations import json_value_problem
from beam_agents.provider import CallObserver

T = TypeVar("T")

DEFAULT_MAX_RESPONSE_BYTES = 16 << 20
"""The most bytes one attempt may receive (16 MiB): far above any model answer."""
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
"""The longest backoff between attempts, and the default ``max_retry_wait_s``."""
MIN_SECRET_CHARS = 8
"""Shorter API keys (``"unused"`` for a local server) are placeholders, not scrubbed."""
REDACTED = "[api key redacted]"


@dataclass(frozen=True, kw_only=True)
class CallLimits:
    """The bounds of one provider call (the provider's constructor options)."""

    timeout_s: float
    """The most wall time one HTTP attempt may take, from connect to the last byte."""
    deadline_s: float
    """The most wall time one call may take: every attempt and every wait between them."""
    max_retries: int
    """Further attempts after a transient failure (0: one attempt only)."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """The most bytes one attempt may receive; more is a ``ProviderResponseError``."""
    max_retry_wait_s: float = MAX_BACKOFF_S
    """The longest wait before another attempt; a ``Retry-After`` asking for more is not
    waited for here (the call fails, and the pipeline retries on the key)."""


class _Budget:
    """What is left of the running attempt: time (monotonic) and bytes."""

    __slots__ = (
        "attempt_ends",
        "call_ends",
        "decoded",
        "exceeded",
        "expired",
        "max_bytes",
        "received",
    )

    def __init__(self, *, attempt_ends: float, call_ends: float, max_bytes: int) -> None:
        self.attempt_ends = attempt_ends
        self.call_ends = call_ends
        self.max_bytes = max_bytes
        self.received = 0
        self.exceeded = False
        """More than ``max_bytes`` arrived (or, with ``decoded``, decoded)."""
        self.decoded = False
        self.expired = ""
        """Which bound ran out first: ``"attempt"``, ``"call"``, or ``""`` (none)."""

    def left(self) -> float:
        return min(self.attempt_ends, self.call_ends) - time.monotonic()

    def clamp(self, timeout: float | None, timed_out: type[Exception]) -> float:
        """``timeout`` no longer than what is left; raise ``timed_out`` when nothing is."""
        left = self.left()
        if left <= 0:
            self._expire()
            raise timed_out("the attempt's time ran out")
        return left if timeout is None else min(timeout, left)

    def _expire(self) -> None:
        self.expired = "call" if self.call_ends <= self.attempt_ends else "attempt"

    def run(self, timeout: float | None, timed_out: type[Exception], io: Callable[[float], T]) -> T:
        """``io(timeout clamped)``; a timeout it raises is the budget's when the budget was
        the tighter bound (the operation's own timeout was not what ran out)."""
        clamped = self.clamp(timeout, timed_out)
        try:
            return io(clamped)
        except httpcore2.TimeoutException:
            if timeout is None or clamped < timeout:
                self._expire()
            raise

    def count(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > self.max_bytes:
            self.exceeded = True
            raise httpcore2.ReadError(f"the response is larger than {self.max_bytes} bytes")


_BUDGET: ContextVar[_Budget | None] = ContextVar("beam_agents_provider_budget", default=None)


class _BudgetedStream(httpcore2.NetworkStream):
    """A connection's stream whose every operation is bounded by the running attempt."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        budget = _BUDGET.get()
        if budget is None:
            return self._inner.read(max_bytes, timeout)
        data = budget.run(timeout, httpcore2.ReadTimeout, lambda t: self._inner.read(max_bytes, t))
        budget.count(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        budget = _BUDGET.get()
        if budget is None:
            self._inner.write(buffer, timeout)
        else:
            budget.run(timeout, httpcore2.WriteTimeout, lambda t: self._inner.write(buffer, t))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        budget = _BUDGET.get()
        if budget is None:
            return _BudgetedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))
        return _BudgetedStream(
            budget.run(
                timeout,
                httpcore2.ConnectTimeout,
                lambda t: self._inner.start_tls(ssl_context, server_hostname, t),
            )
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _BudgetedBackend(httpcore2.NetworkBackend):
    """The sync network backend, each connection's stream bounded by the running attempt."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        budget = _BUDGET.get()
        if budget is None:
            return _BudgetedStream(
                self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            )
        return _BudgetedStream(
            budget.run(
                timeout,
                httpcore2.ConnectTimeout,
                lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options),
            )
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        budget = _BUDGET.get()
        if budget is None:
            return _BudgetedStream(self._inner.connect_unix_socket(path, timeout, socket_options))
        return _BudgetedStream(
            budget.run(
                timeout,
                httpcore2.ConnectTimeout,
                lambda t: self._inner.connect_unix_socket(path, t, socket_options),
            )
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def budgeted_http_client(timeout_s: float, limits: Any) -> httpx2.Client:
    """An ``httpx2.Client`` for an SDK whose connections obey the running attempt's budget.

    The backend is installed in every transport the client holds (its own and those
    the environment's proxies mount), so no request of this client escapes the bound.
    """
    client = httpx2.Client(
        transport=httpx2.HTTPTransport(limits=limits),
        timeout=timeout_s,
        limits=limits,
        follow_redirects=True,
    )
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _BudgetedBackend):
            pool._network_backend = _BudgetedBackend(backend)  # type: ignore[union-attr]
    # Decoding too is bounded: error bodies are read by the SDK itself, whole, and a
    # 260 KB gzip body decodes to 256 MB (the network backend counts only what arrives).
    client._transport = _DecodingCap(client._transport)
    # Only what _DecodingCap decodes (httpx would offer br and zstd when they are installed).
    client.headers["Accept-Encoding"] = "gzip, deflate"
    client._mounts = {
        pattern: None if transport is None else _DecodingCap(transport)
        for pattern, transport in client._mounts.items()
    }
    return client


class _DecodingCap(httpx2.BaseTransport):
    """A transport that decodes ``Content-Encoding`` itself, refusing past the attempt's
    ``max_response_bytes`` of decoded bytes (gzip and deflate, layered too; any other
    encoding is refused: the request did not offer it)."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        listed = response.headers.get("content-encoding", "")
        encodings = [e.strip().lower() for e in listed.split(",") if e.strip()]
        encodings = [e for e in encodings if e != "identity"]
        if not encodings:
            return response
        budget = _BUDGET.get()
        limit = budget.max_bytes if budget is not None else DEFAULT_MAX_RESPONSE_BYTES
        headers = [
            (name, value)
            for name, value in response.headers.raw
            if name.lower() not in (b"content-encoding", b"content-length")
        ]
        stream = _CappedDecoding(response.stream, encodings, limit, budget)  # type: ignore[arg-type]
        return httpx2.Response(
            response.status_code, headers=headers, stream=stream, extensions=response.extensions
        )

    def close(self) -> None:
        self._inner.close()


class _CappedDecoding(httpx2.SyncByteStream):
    def __init__(
        self, raw: httpx2.SyncByteStream, encodings: list[str], limit: int, budget: _Budget | None
    ) -> None:
        self._raw, self._encodings, self._limit, self._budget = raw, encodings, limit, budget

    def __iter__(self) -> Iterator[bytes]:
        # The last encoding listed was applied last: it is undone first.
        layers = [_Layer(encoding) for encoding in reversed(self._encodings)]
        total = 0
        for chunk in self._raw:
            data = chunk
            for layer in layers:
                data = layer.decode(data, self._limit + 1)
                if layer.over or len(data) > self._limit:
                    self._refuse()
            total += len(data)
            if total > self._limit:
                self._refuse()
            if data:
                yield data

    def _refuse(self) -> None:
        if self._budget is not None:
            self._budget.exceeded = self._budget.decoded = True
        raise httpx2.DecodingError(f"the response decodes to more than {self._limit} bytes")

    def close(self) -> None:
        self._raw.close()


class _Layer:
    """One ``Content-Encoding`` being undone, with its output bounded."""

    def __init__(self, encoding: str) -> None:
        if encoding in ("gzip", "x-gzip"):
            self._wbits = 16 + zlib.MAX_WBITS
        elif encoding == "deflate":
            self._wbits = zlib.MAX_WBITS  # zlib-wrapped; raw deflate is tried on a failure
        else:
            raise httpx2.DecodingError(
                f"the response uses Content-Encoding {encoding!r}, which was not offered"
            )
        self._inflate = zlib.decompressobj(self._wbits)
        self._started = False
        self.over = False

    def decode(self, data: bytes, cap: int) -> bytes:
        try:
            out = self._inflate.decompress(data, cap)
        except zlib.error as exc:
            if self._wbits == zlib.MAX_WBITS and not self._started:
                self._wbits = -zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(self._wbits)
                return self.decode(data, cap)
            raise httpx2.DecodingError(f"the response body does not decode ({exc})") from None
        self._started = True
        self.over = bool(self._inflate.unconsumed_tail)
        return out


def read_capped(chunks: Iterator[bytes], provider: str, limit: int) -> bytes:
    """A response body from its decoded ``chunks``, refusing more than ``limit`` bytes.

    (The network backend bounds the bytes received; this bounds what they decode to, so
    a compressed body cannot inflate past the same limit. It also checks the attempt's
    time between chunks, which bounds a client that is not the provider's own.)
    """
    parts: list[bytes] = []
    size = 0
    budget = _BUDGET.get()
    for chunk in chunks:
        if budget is not None:
            budget.clamp(None, httpcore2.ReadTimeout)
        size += len(chunk)
        if size > limit:
            raise ProviderResponseError(
                provider,
                f"the response body is larger than max_response_bytes={limit} once decoded; "
                "refused unread",
            )
        parts.append(chunk)
    return b"".join(parts)


def parse_answer(raw: bytes, content_type: str | None, provider: str) -> dict[str, Any]:
    """The JSON object of a 2xx body (``parse_json_body``), after refusing an HTML page.

    A model API never answers with HTML: a 200 ``text/html`` page is a gateway's, a
    proxy's or a captive portal's error page standing in front of the provider, so it
    is ``ProviderUnavailableError`` (transient: retried, then held by the key's retry
    policy), not an answer that could be fixed by changing the request.
    """
    if is_html(content_type, raw):
        raise ProviderUnavailableError(
            provider,
            f"the provider answered with an HTML page, not JSON ({html_summary(raw)}): "
            "a gateway or proxy in front of it failed, most likely",
            status=200,
        )
    return parse_json_body(raw, provider)


def answer_of(build: Callable[[dict[str, Any]], T], data: dict[str, Any], provider: str) -> T:
    """``build(data)``: the ``LlmResponse`` of a parsed body, with what protobuf cannot hold
    refused as ``ProviderResponseError`` (a lone surrogate in a string, a token count
    past 2**63: the ``UnicodeEncodeError`` and ``ValueError`` of the message's setters)."""
    try:
        return build(data)
    except ProviderCallError:
        raise
    except (UnicodeError, ValueError, OverflowError) as exc:
        raise ProviderResponseError(
            provider, f"the response holds a value an answer cannot carry ({type(exc).__name__}: {exc})"
        ) from None


def is_html(content_type: str | None, raw: bytes | str) -> bool:
    """Whether a body is an HTML page (by its ``content-type``, or an HTML start)."""
    for media in (content_type or "").split(","):  # repeated headers arrive comma-joined
        if media.split(";", 1)[0].strip().lower() in ("text/html", "application/xhtml+xml"):
            return True
    head = (raw[:64] if isinstance(raw, str) else raw[:64].decode("latin-1")).lstrip().lower()
    return head.startswith(("<!doctype html", "<html"))


def html_summary(raw: bytes | str) -> str:
    """An HTML page in a few words: its ``<title>``, or its text's first characters."""
    text = raw if isinstance(raw, str) else raw[:4096].decode("utf-8", "replace")
    found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if found is None:
        found = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.IGNORECASE | re.DOTALL)
    words = re.sub(r"<[^>]*>", " ", found.group(1) if found else text)
    words = " ".join(words.split())[:120]
    return f"its title reads {words!r}" if found else f"it reads {words!r}"


def parse_json_body(raw: bytes, provider: str) -> dict[str, Any]:
    """The JSON object of a response body, or ``ProviderResponseError`` naming why it is none."""
    if not raw.strip():
        raise ProviderResponseError(provider, "the response body is empty, not a JSON object")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise ProviderResponseError(
            provider, f"the response body is JSON nested deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except ValueError as exc:
        head = raw[:60].decode("utf-8", "replace")
        raise ProviderResponseError(
            provider, f"the response body is not JSON ({exc}; it begins {head!r})"
        ) from None
    problem = json_value_problem(value, surrogates=False)
    if problem is not None:
        raise ProviderResponseError(provider, f"the response body's JSON: {problem}")
    if not isinstance(value, dict):
        raise ProviderResponseError(
            provider, f"the response body is a JSON {type(value).__name__}, not an object"
        )
    return value


def retry_after_s(error: BaseException) -> float | None:
    """The wait an error response asks for (``retry-after-ms``, ``retry-after``), if any."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            wait = float(value) / scale
        except ValueError:
            if name == "retry-after-ms":
                continue
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            return max(0.0, when.timestamp() - time.time())
        return wait if math.isfinite(wait) and wait >= 0 else None
    return None


class CallRunner:
    """Runs a provider's calls within its ``CallLimits`` (see the module docstring).

    ``map_error(exc, attempts)`` turns what an attempt raised (the SDK's errors) into a
    ``ProviderCallError``; ``secrets()`` gives the API keys to scrub from error text.
    """

    def __init__(
        self,
        provider: str,
        limits: CallLimits,
        *,
        map_error: Callable[[Exception], ProviderCallError],
        secrets: Callable[[], Iterable[str | None]],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.limits = limits
        self.observer: CallObserver | None = None
        self._map_error = map_error
        self._secrets = secrets
        self._sleep = sleep

    def call(self, attempt: Callable[[float], T]) -> T:
        """Run ``attempt(timeout_s left)`` until it answers; raise the last failure mapped."""
        limits = self.limits
        started = time.monotonic()
        call_ends = started + limits.deadline_s
        attempts = 0
        while True:
            attempts += 1
            now = time.monotonic()
            budget = _Budget(
                attempt_ends=now + limits.timeout_s,
                call_ends=call_ends,
                max_bytes=limits.max_response_bytes,
            )
            token = _BUDGET.set(budget)
            try:
                result = attempt(max(0.001, budget.left()))
            except Exception as exc:
                error, cause = self._failure(exc, budget), exc
            else:
                self._observed_attempt(time.monotonic() - now, None)
                return result
            finally:
                _BUDGET.reset(token)
            self._observed_attempt(time.monotonic() - now, error)
            left = call_ends - time.monotonic()
            note = ""
            asked = retry_after_s(cause)
            if error.transient and attempts <= limits.max_retries:
                wait = asked if asked is not None else _backoff_s(attempts)
                if wait < left and wait <= limits.max_retry_wait_s:
                    if self.observer is not None:
                        self.observer.wait(self.provider, wait)
                    self._sleep(wait)
                    continue
                why = "the server asked to wait" if asked is not None else "the backoff is"
                bound = (
                    f"max_retry_wait_s={limits.max_retry_wait_s:g}"
                    if wait > limits.max_retry_wait_s
                    else f"the {max(0.0, left):.3g} s left of deadline_s={limits.deadline_s:g}"
                )
                note = f" (not retried here: {why} {seconds_text(wait)}, longer than {bound})"
            # Chained to the SDK's error (a mapped error of ours: to what it was raised from).
            chain = cause.__cause__ if isinstance(cause, ProviderCallError) else cause
            raise self._final(error, attempts, note, cause, asked) from chain

    def _failure(self, exc: Exception, budget: _Budget) -> ProviderCallError:
        """What an attempt's exception means, with what the budget saw taken into account."""
        provider = self.provider
        if budget.exceeded:
            decoded = " once decoded" if budget.decoded else ""
            return ProviderResponseError(
                provider,
                f"the response is larger than max_response_bytes={budget.max_bytes}{decoded}; "
                "refused unread",
            )
        if budget.expired == "attempt":
            return ProviderTimeoutError(
                provider,
                f"no complete answer within timeout_s={self.limits.timeout_s:g} "
                f"({budget.received} bytes received)",
            )
        if budget.expired == "call":
            return ProviderTimeoutError(
                provider,
                f"the call's deadline_s={self.limits.deadline_s:g} passed during an attempt",
            )
        if isinstance(exc, ProviderCallError):
            return exc
        return self._map_error(exc)

    def _final(
        self,
        error: ProviderCallError,
        attempts: int,
        note: str,
        cause: BaseException,
        retry_after: float | None,
    ) -> ProviderCallError:
        """The error the call raises: ``error`` with the attempt count, every secret scrubbed."""
        secrets = [s for s in self._secrets() if s and len(s) >= MIN_SECRET_CHARS]
        final = type(error)(
            error.provider,
            scrub_text(error.detail + note, secrets),
            status=error.status,
            request_id=scrub_text(error.request_id, secrets) if error.request_id else None,
            attempts=attempts,
            retry_after_s=retry_after,
        )
        if secrets:
            scrub_chain(cause, secrets)
        return final

    def _observed_attempt(self, seconds: float, error: BaseException | None) -> None:
        if self.observer is not None:
            self.observer.attempt(self.provider, seconds, error)


def seconds_text(seconds: float) -> str:
    """A wait in words a person reads at a glance: ``2.5 s``, ``40 min``, ``3 h``, ``27 days``
    (an HTTP-date ``Retry-After`` decades away read ``2.3e+09 s``)."""
    if seconds < 1000:
        return f"{seconds:.3g} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.0f} h"
    if seconds < 100 * 365 * 86400:
        return f"{seconds / 86400:,.0f} days"
    return "more than 100 years"


def _backoff_s(attempts: int) -> float:
    """The SDKs' own schedule: 0.5 s doubling to 8 s, each up to 25 % shorter."""
    base = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2.0 ** (attempts - 1))
    return base * (1 - 0.25 * random.random())  # a wall-clock wait: never traced


SECRET_PIECE_CHARS = 12
"""A run this long of an API key's characters is redacted too: a server may echo the key
into a field whose value an error quotes cut short, leaving a prefix of it."""


def scrub_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret, and every run of ``SECRET_PIECE_CHARS`` or more of a
    secret's characters, replaced by ``REDACTED``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
        if len(secret) > SECRET_PIECE_CHARS:
            text = _scrub_pieces(text, secret)
    return text


def _scrub_pieces(text: str, secret: str) -> str:
    """``text`` with every run of ``SECRET_PIECE_CHARS`` or more characters of ``secret``
    (as they stand in it) replaced by ``REDACTED``.

    Found through anchors, in C: such a run holds one of the secret's pieces of half that
    length that start at a multiple of it, so only those (a few) are searched for, and
    each hit is grown to the whole run. Cheap on a multi-megabyte error body.
    """
    n, half = SECRET_PIECE_CHARS, SECRET_PIECE_CHARS // 2
    runs: list[tuple[int, int]] = []
    for offset in range(0, len(secret) - half + 1, half):
        anchor = secret[offset : offset + half]
        at = text.find(anchor)
        while at >= 0:
            start, end, lo, hi = at, at + half, offset, offset + half
            while start > 0 and lo > 0 and text[start - 1] == secret[lo - 1]:
                start, lo = start - 1, lo - 1
            while end < len(text) and hi < len(secret) and text[end] == secret[hi]:
                end, hi = end + 1, hi + 1
            if end - start >= n:
                runs.append((start, end))
            at = text.find(anchor, at + 1)
    if not runs:
        return text
    out: list[str] = []
    kept = 0
    for start, end in sorted(runs):
        if end <= kept:
            continue
        out.append(text[kept:start] if start > kept else "")
        if start >= kept:
            out.append(REDACTED)
        kept = max(kept, end)
    out.append(text[kept:])
    return "".join(out)


def _scrub_value(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, dict):
        return {_scrub_value(k, secrets): _scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub_value(v, secrets) for v in value)
    return value


def _scrub_response_body(response: Any, secrets: list[str]) -> None:
    """Scrub an error response's body as read (``response.text``, ``.content``), in place."""
    content = getattr(response, "_content", None)
    if not isinstance(content, bytes) or not content:
        return
    encoding = getattr(response, "encoding", None) or "utf-8"
    try:
        text = content.decode(encoding, "replace")
    except LookupError:
        text = content.decode("utf-8", "replace")
    scrubbed = scrub_text(text, secrets)
    if scrubbed != text:
        with contextlib.suppress(AttributeError, TypeError):
            response._content = scrubbed.encode("utf-8")
            if hasattr(response, "_text"):
                del response._text


def scrub_chain(error: BaseException, secrets: list[str]) -> None:
    """Scrub ``secrets`` from every exception of ``error``'s chain, in place.

    The text an exception shows (``args``, the SDKs' ``message`` and ``body``, notes)
    and the headers of the request and response an SDK error carries: a traceback, a
    log line or an error tracker then shows ``[api key redacted]`` where the key was.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.args = tuple(_scrub_value(a, secrets) for a in exc.args)
        for name in ("message", "body", "detail", "request_id", "__notes__"):
            value = getattr(exc, name, None)
            if value is not None:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(exc, name, _scrub_value(value, secrets))
        for name in ("request", "response"):
            try:
                holder = getattr(exc, name, None)
            except RuntimeError:  # httpx2's errors raise when the request was never set
                holder = None
            headers = getattr(holder, "headers", None)
            if headers is not None:
                for key, value in list(headers.items()):
                    if any(secret in value for secret in secrets):
                        headers[key] = scrub_text(value, secrets)
            if name == "response" and holder is not None:
                _scrub_response_body(holder, secrets)
                request = getattr(holder, "_request", None)
                request_headers = getattr(request, "headers", None)
                if request_headers is not None:
                    for key, value in list(request_headers.items()):
                        if any(secret in value for secret in secrets):
                            request_headers[key] = scrub_text(value, secrets)
        for linked in (exc.__cause__, exc.__context__):
            if linked is not None:
                pending.append(linked)


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "CallLimits",
    "CallRunner",
    "budgeted_http_client",
    "parse_json_body",
    "read_capped",
    "retry_after_s",
    "scrub_chain",
    "scrub_text",
]
