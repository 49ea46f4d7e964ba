"""Both providers refuse what is not an answer, and bound every call in time and bytes.

Against the real wire server and the real SDKs: bodies that are not the vendor's
shape, not JSON, too deep or too large are a ``ProviderResponseError``; a stream
request is refused before anything is sent; ``timeout_s`` bounds an attempt (a
trickled body or header), ``deadline_s`` bounds the call (``Retry-After`` included);
every failure is a ``ProviderCallError`` that says whether it is transient; attempts
and waits reach the provider's ``CallObserver``; the configured API key never appears
in an error's text or chain. No wall time is asserted: the bounds are checked by what
the server managed to send, and by how many attempts reached it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from provider_requests import made, minimal_request
from wire_server import Reply, WireServer

from beam_agents.errors import (
    ProviderCallError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.providers import AnthropicMessagesProvider, OpenAIChatProvider

SECRET = "sk-test-0123456789abcdefSECRET"


@dataclass(frozen=True)
class Vendor:
    name: str
    build: Callable[..., Any]
    answer: dict[str, Any]
    """A valid answer body."""
    not_answers: tuple[tuple[str, Any], ...]
    """200 bodies in JSON that are not an answer of this vendor, each with a label."""


def _openai(server: WireServer, **options: Any) -> OpenAIChatProvider:
    options.setdefault("max_retries", 0)
    options.setdefault("api_key", SECRET)
    return made(OpenAIChatProvider(base_url=f"{server.url}/v1", **options))


def _anthropic(server: WireServer, **options: Any) -> AnthropicMessagesProvider:
    options.setdefault("max_retries", 0)
    options.setdefault("api_key", SECRET)
    return made(AnthropicMessagesProvider(base_url=server.url, **options))


OPENAI_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}
ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


VENDORS = [
    Vendor(
        "openai",
        _openai,
        OPENAI_ANSWER,
        (
            ("hello world", {"hello": "world"}),
            ("choices null", _with(OPENAI_ANSWER, choices=None)),
            ("choices an object", _with(OPENAI_ANSWER, choices={"0": {}})),
            ("no message", _with(OPENAI_ANSWER, choices=[{"index": 0}])),
            (
                "content null, no tool calls",
                _with(OPENAI_ANSWER, choices=[{"message": {"role": "assistant", "content": None}}]),
            ),
            (
                "content a list",
                _with(OPENAI_ANSWER, choices=[{"message": {"content": [{"text": "hi"}]}}]),
            ),
            ("usage a string", _with(OPENAI_ANSWER, usage="lots")),
            ("a token count that is a bool", _with(OPENAI_ANSWER, usage={"prompt_tokens": True})),
            (
                "a tool call without an id",
                _with(
                    OPENAI_ANSWER,
                    choices=[
                        {
                            "message": {
                                "content": None,
                                "tool_calls": [{"type": "function", "function": {"name": "f"}}],
                            }
                        }
                    ],
                ),
            ),
            ("a JSON array", [OPENAI_ANSWER]),
        ),
    ),
    Vendor(
        "anthropic",
        _anthropic,
        ANTHROPIC_ANSWER,
        (
            ("hello world", {"hello": "world"}),
            ("content null", _with(ANTHROPIC_ANSWER, content=None)),
            ("no type", {k: v for k, v in ANTHROPIC_ANSWER.items() if k != "type"}),
            ("an error object sent with 200", {"type": "error", "error": {"message": "boom"}}),
            ("a text block without text", _with(ANTHROPIC_ANSWER, content=[{"type": "text"}])),
            ("a block that is a string", _with(ANTHROPIC_ANSWER, content=["hi"])),
            (
                "tool input a string",
                _with(
                    ANTHROPIC_ANSWER,
                    content=[{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
                ),
            ),
            ("usage a list", _with(ANTHROPIC_ANSWER, usage=[1, 2])),
            ("a JSON string", "message"),
        ),
    ),
]
BY_NAME = {v.name: v for v in VENDORS}
CASES = [(v.name, label, body) for v in VENDORS for label, body in v.not_answers]


@pytest.mark.parametrize(("vendor", "label", "body"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_200_that_is_not_the_vendors_answer_is_a_response_error(
    server: WireServer, vendor: str, label: str, body: Any
) -> None:
    server.script(Reply(body))
    with pytest.raises(ProviderResponseError) as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    assert not caught.value.transient and label


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize(
    ("label", "raw"),
    [
        ("empty", b""),
        ("white space", b"  \n"),
        ("truncated", b'{"id": "x", "choices": ['),
        ("NaN", b'{"id": NaN}'),
        ("deeper than the parser", b"[" * 100_000 + b"]" * 100_000),
        ("deeper than 256", b'{"a":' * 300 + b"1" + b"}" * 300),
        ("not UTF-8", b'{"id": "\xff\xfe"}'),
    ],
)
def test_a_body_that_is_not_json_is_a_response_error_never_a_raw_one(
    server: WireServer, vendor: str, label: str, raw: bytes
) -> None:
    """json.JSONDecodeError and RecursionError reached agent code before."""
    server.script(Reply(raw))
    with pytest.raises(ProviderResponseError) as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    assert caught.value.status is None and label


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize("status", [200, 502])
@pytest.mark.parametrize(
    ("content_type", "raw"),
    [
        ("text/html; charset=utf-8", b"<html><head><title>502 Bad Gateway</title></head></html>"),
        ("text/plain", b"<!DOCTYPE html>\n<html><h1>502 Bad Gateway</h1>nginx</html>"),
    ],
)
def test_an_html_page_is_a_gateways_error_and_transient(
    server: WireServer, vendor: str, status: int, content_type: str, raw: bytes
) -> None:
    """A proxy's HTML error page (on a 200 too) was dead-lettered as a permanent failure; on
    a 5xx it read just "Error code: 502"."""
    page = Reply(raw, status=status, headers={"Content-Type": content_type})
    server.script(page, page)
    with pytest.raises(ProviderUnavailableError) as caught:
        BY_NAME[vendor].build(server, max_retries=1).complete(minimal_request("m"))
    assert caught.value.transient and caught.value.status == status
    assert len(server.received) == 2  # retried by the call, then left to the key's policy
    assert "HTML page" in str(caught.value) and "'502 Bad Gateway'" in str(caught.value)
    assert "Error code" not in str(caught.value)


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_an_error_body_that_is_plain_text_is_quoted(server: WireServer, vendor: str) -> None:
    server.script(Reply(b"upstream connect error", status=503, headers={"Content-Type": "text/plain"}))
    with pytest.raises(ProviderUnavailableError, match="the body reads 'upstream connect error'"):
        BY_NAME[vendor].build(server, max_retries=0).complete(minimal_request("m"))


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_an_http_date_retry_after_reads_in_days(server: WireServer, vendor: str) -> None:
    busy = Reply({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                 headers={"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})  # fmt: skip
    server.script(busy)
    with pytest.raises(ProviderRateLimitError, match=r"asked to wait [\d,]+ days, longer") as caught:
        BY_NAME[vendor].build(server, max_retries=3).complete(minimal_request("m"))
    assert "e+" not in str(caught.value)


def test_a_completion_without_an_id_is_named_so(server: WireServer) -> None:
    empty = {"id": "", "object": "chat.completion",
             "choices": [{"index": 0, "message": {"role": "assistant"}}]}  # fmt: skip
    server.script(Reply(empty))
    with pytest.raises(ProviderResponseError, match=r"the completion \(without an id\) answers"):
        BY_NAME["openai"].build(server).complete(minimal_request("m"))


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_body_over_max_response_bytes_is_refused_unread(server: WireServer, vendor: str) -> None:
    """A 300 MB body was read whole; now the attempt stops past the cap."""
    piece = b" " * 65536
    server.script(Reply(piece, repeat=300 * 16, chunk=65536))  # 300 MiB of white space
    with pytest.raises(ProviderResponseError, match="max_response_bytes=1048576") as caught:
        BY_NAME[vendor].build(server, max_response_bytes=1 << 20).complete(minimal_request("m"))
    assert not caught.value.transient
    (sent,) = server.sent
    assert not sent.complete and sent.bytes < 64 << 20, sent  # it stopped near the cap


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_compressed_body_that_inflates_past_the_cap_is_refused(
    server: WireServer, vendor: str
) -> None:
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of spaces in a few KiB
    assert len(bomb) < 64 << 10
    server.script(Reply(bomb, headers={"Content-Encoding": "gzip"}))
    with pytest.raises(ProviderResponseError, match="once decoded"):
        BY_NAME[vendor].build(server, max_response_bytes=1 << 20).complete(minimal_request("m"))


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize("status", [400, 500])
@pytest.mark.parametrize("layers", [1, 2])
def test_an_error_body_that_inflates_past_the_cap_is_refused_too(
    server: WireServer, vendor: str, status: int, layers: int
) -> None:
    """The SDK reads an error body whole: a gzip bomb on a 400 decoded to 256 MB in memory
    (and a provider hung on it); decoding is bounded on every status now."""
    bomb = gzip.compress(b"\0" * (32 << 20))
    if layers == 2:
        bomb = gzip.compress(bomb)
    encoding = ", ".join(["gzip"] * layers)
    server.script(*[Reply(bomb, status=status, headers={"Content-Encoding": encoding})] * 3)
    with pytest.raises(ProviderResponseError, match="max_response_bytes=1048576 once decoded"):
        BY_NAME[vendor].build(server, max_response_bytes=1 << 20).complete(minimal_request("m"))


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_an_encoding_that_was_not_offered_is_refused(server: WireServer, vendor: str) -> None:
    server.script(Reply(b"\x00\x01", headers={"Content-Encoding": "br"}))
    with pytest.raises(ProviderResponseError, match="Content-Encoding 'br', which was not offered"):
        BY_NAME[vendor].build(server, max_retries=0).complete(minimal_request("m"))
    assert server.received[0].headers["accept-encoding"] == "gzip, deflate"  # what is decoded


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize("field", ["stream", "stream_options"])
def test_a_stream_request_is_refused_before_anything_is_sent(
    server: WireServer, vendor: str, field: str
) -> None:
    request = minimal_request("m")
    request.params.extra[field] = "true"
    with pytest.raises(ProviderRequestError, match=rf"params\.extra\['{field}'\]") as caught:
        BY_NAME[vendor].build(server).complete(request)
    assert not caught.value.transient
    assert server.received == []


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize("where", ["body", "headers"])
def test_timeout_s_bounds_an_attempt_whose_answer_trickles(
    server: WireServer, vendor: str, where: str
) -> None:
    """A body sent a byte every 0.2 s took 10.7 s against timeout_s=3: every read kept the
    per-read timeout alive. The attempt's whole time is bounded now, headers included."""
    body = json.dumps(BY_NAME[vendor].answer).encode()
    reply = (
        Reply(body, chunk=1, trickle_s=0.05)
        if where == "body"
        else Reply(body, trickle_s=0.05, trickle_headers=True)
    )
    server.script(reply)
    with pytest.raises(ProviderTimeoutError, match=r"timeout_s=0\.5") as caught:
        BY_NAME[vendor].build(server, timeout_s=0.5).complete(minimal_request("m"))
    assert caught.value.transient
    (sent,) = server.sent
    # At 20 bytes a second the answer (and its headers) take well over 5 s to send: the
    # client went away long before, having received a fraction of it.
    assert not sent.complete and sent.bytes < len(body), sent


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_retry_after_past_the_deadline_is_not_waited_for(server: WireServer, vendor: str) -> None:
    """The Anthropic SDK slept on a 200 s Retry-After with timeout_s=1."""
    busy = Reply({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                 headers={"retry-after": "200"})  # fmt: skip
    server.script(busy, Reply(BY_NAME[vendor].answer))
    with pytest.raises(ProviderRateLimitError, match="the server asked to wait 200 s") as caught:
        BY_NAME[vendor].build(server, max_retries=3, deadline_s=5).complete(minimal_request("m"))
    assert caught.value.transient and caught.value.attempts == 1
    assert len(server.received) == 1  # not retried: the key's retry policy takes it from here


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_long_retry_after_is_left_to_the_keys_retry_policy(server: WireServer, vendor: str) -> None:
    """Within the deadline but longer than max_retry_wait_s: the worker is not held for it."""
    busy = Reply({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                 headers={"retry-after": "20"})  # fmt: skip
    server.script(busy)
    with pytest.raises(ProviderRateLimitError, match=r"longer than max_retry_wait_s=8\)") as caught:
        BY_NAME[vendor].build(server, max_retries=3, deadline_s=60).complete(minimal_request("m"))
    assert len(server.received) == 1
    assert caught.value.retry_after_s == 20  # the key's retry policy waits at least this long
    quick = Reply({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                  headers={"retry-after": "0.05"})  # fmt: skip
    server.script(quick, Reply(BY_NAME[vendor].answer))
    answer = BY_NAME[vendor].build(server, max_retries=3, max_retry_wait_s=1).complete(
        minimal_request("m")
    )
    assert answer.text == "hi" and len(server.received) == 3


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_deadline_s_bounds_the_whole_call_across_attempts(server: WireServer, vendor: str) -> None:
    busy = Reply({"error": {"message": "overloaded", "type": "overloaded_error"}}, status=503,
                 headers={"retry-after-ms": "200"})  # fmt: skip
    server.script(*[busy] * 100)
    with pytest.raises(ProviderUnavailableError, match="deadline_s=1") as caught:
        BY_NAME[vendor].build(server, max_retries=99, deadline_s=1).complete(minimal_request("m"))
    # Waits of 0.2 s in a 1 s deadline: at most 5 attempts, never the 100 max_retries allows.
    assert 1 <= caught.value.attempts == len(server.received) <= 5


class RecordingObserver:
    def __init__(self) -> None:
        self.attempts: list[tuple[str, str | None]] = []
        self.waits: list[tuple[str, float]] = []

    def attempt(self, provider: str, seconds: float, error: BaseException | None) -> None:
        assert seconds >= 0
        self.attempts.append((provider, None if error is None else type(error).__name__))

    def wait(self, provider: str, seconds: float) -> None:
        self.waits.append((provider, seconds))


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_attempts_and_waits_reach_the_observer(server: WireServer, vendor: str) -> None:
    busy = Reply({"error": {"message": "busy", "type": "x"}}, status=503,
                 headers={"retry-after-ms": "10"})  # fmt: skip
    limited = Reply({"error": {"message": "slow", "type": "x"}}, status=429,
                    headers={"retry-after": "0.02"})  # fmt: skip
    server.script(busy, limited, Reply(BY_NAME[vendor].answer))
    provider = BY_NAME[vendor].build(server, max_retries=2, name="observed")
    observer = RecordingObserver()
    provider.observe_calls(observer)
    assert provider.complete(minimal_request("m")).text == "hi"
    assert observer.attempts == [
        ("observed", "ProviderUnavailableError"),
        ("observed", "ProviderRateLimitError"),
        ("observed", None),
    ]
    assert observer.waits == [("observed", 0.01), ("observed", 0.02)]


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize(
    ("status", "expected", "transient"),
    [
        (400, ProviderRequestError, False),
        (401, ProviderRequestError, False),
        (408, ProviderTimeoutError, True),
        (429, ProviderRateLimitError, True),
        (500, ProviderUnavailableError, True),
        (529, ProviderUnavailableError, True),
    ],
)
def test_every_failure_says_whether_it_is_transient(
    server: WireServer, vendor: str, status: int, expected: type, transient: bool
) -> None:
    server.script(Reply({"error": {"message": "no", "type": "t"}}, status=status))
    with pytest.raises(ProviderCallError) as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    assert type(caught.value) is expected and caught.value.transient is transient
    assert caught.value.retryable is transient  # the earlier name of the same fact


def _all_text(exc: BaseException) -> str:
    """Everything an operator's logs could show of ``exc``: the formatted chain, reprs,
    the SDK error's body, and the headers of the request and response it carries."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        parts += [repr(current), repr(current.args), repr(getattr(current, "body", None))]
        parts.append(repr(getattr(current, "request_id", None)))
        for name in ("request", "response"):
            try:
                holder = getattr(current, name, None)
            except RuntimeError:
                holder = None
            if holder is not None:
                parts.append(repr(dict(holder.headers)))
                if name == "response":
                    parts.append(repr(dict(holder.request.headers)))
                    with contextlib.suppress(Exception):  # a streamed body not read: no text
                        parts.append(holder.text)
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return "\n".join(parts)


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_the_api_key_is_scrubbed_when_the_server_echoes_it(server: WireServer, vendor: str) -> None:
    echo = Reply(
        {"error": {"message": f"Incorrect API key provided: {SECRET}", "type": "auth", "key": SECRET}},
        status=401,
        headers={"x-request-id": f"req-{SECRET}", "x-echo": SECRET},
    )
    server.script(echo)
    with pytest.raises(ProviderRequestError) as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    text = _all_text(caught.value)
    assert "Incorrect API key provided: [api key redacted]" in str(caught.value)
    assert SECRET not in text, text
    assert caught.value.__cause__ is not None  # the SDK's error is still chained, scrubbed


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_the_api_key_is_scrubbed_from_a_body_that_is_not_json(
    server: WireServer, vendor: str
) -> None:
    server.script(Reply(f"upstream said: bad key {SECRET}".encode()))
    with pytest.raises(ProviderResponseError) as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    assert SECRET not in _all_text(caught.value)


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_the_api_key_is_scrubbed_from_the_sdk_errors_response_and_request_id(
    server: WireServer, vendor: str
) -> None:
    """The chained SDK error kept the key in its response's text and its request_id."""
    for status in (400, 500):
        echo = Reply(f"bad key: {SECRET}".encode(), status=status,
                     headers={"Content-Type": "text/plain", "x-request-id": SECRET,
                              "request-id": SECRET})  # fmt: skip
        server.script(echo, echo, echo)
        with pytest.raises(ProviderCallError) as caught:
            BY_NAME[vendor].build(server, max_retries=0).complete(minimal_request("m"))
        assert SECRET not in _all_text(caught.value), status
        assert "bad key: [api key redacted]" in str(caught.value)


LONG_SECRET = "sk-ant-api03-" + "Zq7XvB2nLm9KpT4wRy6Hc1Jd8Fg3Ns5Ue0Va" * 2


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_piece_of_the_api_key_cut_short_in_a_message_is_scrubbed_too(
    server: WireServer, vendor: str
) -> None:
    """A refusal quotes a field's value cut to 40 characters: a prefix of the key leaked."""
    wrong = _with(BY_NAME[vendor].answer, **{"choices" if vendor == "openai" else "type": LONG_SECRET})
    server.script(Reply(wrong))
    with pytest.raises(ProviderResponseError) as caught:
        BY_NAME[vendor].build(server, api_key=LONG_SECRET).complete(minimal_request("m"))
    text = _all_text(caught.value)
    pieces = [LONG_SECRET[i : i + 12] for i in range(len(LONG_SECRET) - 11)]
    assert not [piece for piece in pieces if piece in text], str(caught.value)
    assert "[api key redacted]" in str(caught.value)


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
@pytest.mark.parametrize("field", ["surrogate", "tokens"])
def test_a_value_protobuf_cannot_hold_is_a_response_error(
    server: WireServer, vendor: str, field: str
) -> None:
    """A lone surrogate or a 2**63 token count raised the base ProviderCallError."""
    answer = BY_NAME[vendor].answer
    if field == "tokens":
        usage = "prompt_tokens" if vendor == "openai" else "input_tokens"
        body = json.dumps(_with(answer, usage={**answer["usage"], usage: 2**63})).encode()
    else:
        body = json.dumps(_with(answer, id="X")).replace('"X"', '"\\ud800"').encode()
    server.script(Reply(body))
    with pytest.raises(ProviderResponseError, match="a value an answer cannot carry") as caught:
        BY_NAME[vendor].build(server).complete(minimal_request("m"))
    assert type(caught.value) is ProviderResponseError and not caught.value.transient


@pytest.mark.parametrize("vendor", sorted(BY_NAME))
def test_a_placeholder_key_is_not_scrubbed_from_messages(server: WireServer, vendor: str) -> None:
    """A local server's "unused" is no secret; scrubbing it would mangle messages."""
    server.script(Reply({"error": {"message": "unused field", "type": "t"}}, status=400))
    with pytest.raises(ProviderRequestError, match="unused field"):
        BY_NAME[vendor].build(server, api_key="unused").complete(minimal_request("m"))


def test_a_ready_client_gets_this_providers_retries_not_its_own(server: WireServer) -> None:
    import openai

    busy = Reply({"error": {"message": "busy", "type": "x"}}, status=503,
                 headers={"retry-after-ms": "5"})  # fmt: skip
    server.script(busy, busy, Reply(OPENAI_ANSWER))
    with openai.OpenAI(api_key=SECRET, base_url=f"{server.url}/v1", max_retries=5) as client:
        provider = OpenAIChatProvider(client=client, max_retries=1)
        with pytest.raises(ProviderUnavailableError) as caught:
            provider.complete(minimal_request("m"))
    assert caught.value.attempts == 2 and len(server.received) == 2
