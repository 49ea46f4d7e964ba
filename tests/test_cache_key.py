"""The cache key covers the complete request material, canonically, on every machine."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from beam_agents._protos import (
    ChatMessage,
    LlmRequest,
    RequestFingerprint,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from beam_agents.cache_key import (
    CACHE_KEY_FORMAT,
    FINGERPRINT_UNAVAILABLE,
    cache_key_and_fingerprint,
    cache_key_from_fingerprint,
    compute_cache_key,
    fingerprint_differences,
    request_digests,
    request_fingerprint,
)

PROVIDER = "scripted"
REPO_ROOT = Path(__file__).resolve().parent.parent


def base_request() -> LlmRequest:
    """A request with every component set, so each can be changed alone."""
    request = LlmRequest(model="gpt-test-1")
    request.messages.add(role="system", content="You are a support agent.")
    request.messages.add(role="user", content="Where is order A1?", name="customer")
    assistant = request.messages.add(role="assistant", content="")
    assistant.tool_calls.add(id="call-1", name="lookup_order", arguments_json='{"order_id":"A1"}')
    request.messages.add(
        role="tool", content='{"status":"shipped"}', tool_call_id="call-1", name="lookup_order"
    )
    request.tools.add(
        name="lookup_order",
        description="Find an order",
        parameters_json='{"type":"object","properties":{"order_id":{"type":"string"}}}',
    )
    request.tools.add(
        name="issue_refund", description="Refund", parameters_json='{"type":"object"}'
    )
    request.params.temperature = 0.2
    request.params.top_p = 0.9
    request.params.max_tokens = 256
    request.params.stop.extend(["\n\n", "END"])
    request.params.seed = 7
    request.params.extra["response_format"] = "json"
    request.params.extra["reasoning"] = "low"
    return request


def _set(field: str, value: object) -> Callable[[LlmRequest], None]:
    def mutate(request: LlmRequest) -> None:
        target: object = request
        *path, last = field.split(".")
        for part in path:
            target = (
                target[int(part)]  # type: ignore[index]
                if part.isdigit()
                else getattr(target, part)
            )
        setattr(target, last, value)

    return mutate


def _clear_temperature(request: LlmRequest) -> None:
    request.params.ClearField("temperature")


def _temperature_none_to_zero(request: LlmRequest) -> None:
    # Compared against a base without temperature: unset and 0.0 must be different keys.
    request.params.temperature = 0.0


def _add_stop(request: LlmRequest) -> None:
    request.params.stop.append("STOP")


def _reorder_stop(request: LlmRequest) -> None:
    request.params.stop[:] = list(reversed(request.params.stop))


def _add_extra(request: LlmRequest) -> None:
    request.params.extra["logprobs"] = "true"


def _change_extra(request: LlmRequest) -> None:
    request.params.extra["reasoning"] = "high"


def _add_tool_call(request: LlmRequest) -> None:
    request.messages[2].tool_calls.add(id="call-2", name="lookup_order", arguments_json="{}")


def _add_message(request: LlmRequest) -> None:
    request.messages.add(role="user", content="thanks")


def _drop_tool(request: LlmRequest) -> None:
    del request.tools[1]


SINGLE_CHANGES: dict[str, tuple[Callable[[LlmRequest], None], list[str]]] = {
    "model": (_set("model", "gpt-test-2"), ["model"]),
    "message role": (_set("messages.1.role", "assistant"), ["messages[1]"]),
    "message content": (_set("messages.1.content", "Where is order A2?"), ["messages[1]"]),
    "message name": (_set("messages.1.name", "someone"), ["messages[1]"]),
    "tool_call_id": (_set("messages.3.tool_call_id", "call-9"), ["messages[3]"]),
    "tool call id": (_set("messages.2.tool_calls.0.id", "call-9"), ["messages[2]"]),
    "tool call name": (_set("messages.2.tool_calls.0.name", "other"), ["messages[2]"]),
    "tool call arguments": (
        _set("messages.2.tool_calls.0.arguments_json", '{"order_id":"A2"}'),
        ["messages[2]"],
    ),
    "added tool call": (_add_tool_call, ["messages[2]"]),
    "added message": (_add_message, ["messages: 4 vs 5"]),
    "tool spec name": (_set("tools.0.name", "find_order"), ["tools[0]"]),
    "tool spec description": (_set("tools.1.description", "Refund it"), ["tools[1]"]),
    "tool spec parameters": (_set("tools.1.parameters_json", "{}"), ["tools[1]"]),
    "dropped tool": (_drop_tool, ["tools: 2 vs 1"]),
    "temperature": (_set("params.temperature", 0.3), ["params"]),
    "temperature cleared": (_clear_temperature, ["params"]),
    "top_p": (_set("params.top_p", 1.0), ["params"]),
    "max_tokens": (_set("params.max_tokens", 257), ["params"]),
    "seed": (_set("params.seed", 8), ["params"]),
    "stop added": (_add_stop, ["params"]),
    "stop reordered": (_reorder_stop, ["params"]),
    "extra added": (_add_extra, ["params"]),
    "extra changed": (_change_extra, ["params"]),
}


@pytest.mark.parametrize("change", sorted(SINGLE_CHANGES))
def test_changing_one_component_changes_the_key_and_is_named(change: str) -> None:
    mutate, expected_names = SINGLE_CHANGES[change]
    original = base_request()
    changed = base_request()
    mutate(changed)
    assert changed != original, "the mutation must actually change the request"

    key_before, fp_before = cache_key_and_fingerprint(original, provider=PROVIDER)
    key_after, fp_after = cache_key_and_fingerprint(changed, provider=PROVIDER)

    assert key_after != key_before
    assert fingerprint_differences(fp_before, fp_after) == expected_names


def test_unset_temperature_and_zero_temperature_are_different_keys() -> None:
    unset = base_request()
    unset.params.ClearField("temperature")
    zero = base_request()
    zero.params.ClearField("temperature")
    _temperature_none_to_zero(zero)

    assert compute_cache_key(unset, provider=PROVIDER) != compute_cache_key(zero, provider=PROVIDER)


def test_provider_name_changes_the_key() -> None:
    request = base_request()
    key_a, fp_a = cache_key_and_fingerprint(request, provider="openai")
    key_b, fp_b = cache_key_and_fingerprint(request, provider="anthropic")

    assert key_a != key_b
    assert fingerprint_differences(fp_a, fp_b) == ["provider"]


def test_key_format_is_part_of_the_material() -> None:
    request = base_request()
    fingerprint = request_fingerprint(request, provider=PROVIDER)
    other_format = RequestFingerprint()
    other_format.CopyFrom(fingerprint)
    other_format.key_format = b"\x00" * 16

    assert CACHE_KEY_FORMAT == 1
    assert cache_key_from_fingerprint(other_format) != cache_key_from_fingerprint(fingerprint)
    assert fingerprint_differences(other_format, fingerprint) == ["key format"]


def test_same_request_built_in_another_order_has_the_same_key() -> None:
    reordered = LlmRequest()
    # Params first, map entries in the opposite insertion order, scalar fields set last.
    reordered.params.extra["reasoning"] = "low"
    reordered.params.extra["response_format"] = "json"
    reordered.params.seed = 7
    reordered.params.stop.extend(["\n\n", "END"])
    reordered.params.max_tokens = 256
    reordered.params.top_p = 0.9
    reordered.params.temperature = 0.2
    reordered.tools.extend(
        [
            ToolSpec(
                parameters_json='{"type":"object","properties":{"order_id":{"type":"string"}}}',
                description="Find an order",
                name="lookup_order",
            ),
            ToolSpec(
                parameters_json='{"type":"object"}', name="issue_refund", description="Refund"
            ),
        ]
    )
    reordered.messages.extend(
        [
            ChatMessage(content="You are a support agent.", role="system"),
            ChatMessage(name="customer", content="Where is order A1?", role="user"),
            ChatMessage(
                tool_calls=[
                    ToolCall(arguments_json='{"order_id":"A1"}', name="lookup_order", id="call-1")
                ],
                role="assistant",
            ),
            ChatMessage(
                name="lookup_order",
                tool_call_id="call-1",
                content='{"status":"shipped"}',
                role="tool",
            ),
        ]
    )
    reordered.model = "gpt-test-1"

    assert compute_cache_key(reordered, provider=PROVIDER) == compute_cache_key(
        base_request(), provider=PROVIDER
    )


def test_unset_params_and_empty_params_are_the_same_request() -> None:
    unset = LlmRequest(model="m")
    empty = LlmRequest(model="m", params=SamplingParams())

    assert compute_cache_key(unset, provider=PROVIDER) == compute_cache_key(
        empty, provider=PROVIDER
    )


def test_key_is_64_hex_and_equals_the_one_pass_result() -> None:
    request = base_request()
    key = compute_cache_key(request, provider=PROVIDER)
    one_pass_key, fingerprint = cache_key_and_fingerprint(request, provider=PROVIDER)

    assert len(key) == 64 and int(key, 16) >= 0
    assert one_pass_key == key == cache_key_from_fingerprint(fingerprint)
    assert all(
        len(digest) == 16
        for digest in [
            fingerprint.key_format,
            fingerprint.model,
            fingerprint.provider,
            fingerprint.params,
            *fingerprint.tools,
            *fingerprint.messages,
        ]
    )


def test_moving_a_message_into_the_tool_list_position_changes_the_key() -> None:
    # The layout is count-prefixed: one tool + two messages must not collide with
    # two tools + one message even if a digest were shared.
    fingerprint = request_fingerprint(base_request(), provider=PROVIDER)
    shifted = RequestFingerprint()
    shifted.CopyFrom(fingerprint)
    shifted.tools.append(shifted.messages[0])
    del shifted.messages[0]

    assert cache_key_from_fingerprint(shifted) != cache_key_from_fingerprint(fingerprint)


KEY_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tests!r})
from test_cache_key import base_request
from beam_agents.cache_key import compute_cache_key
print(compute_cache_key(base_request(), provider="scripted"))
"""


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_key_is_identical_in_another_process_with_another_hash_seed(hash_seed: str) -> None:
    script = KEY_SCRIPT.format(root=str(REPO_ROOT), tests=str(REPO_ROOT / "tests"))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == compute_cache_key(base_request(), provider=PROVIDER)


def test_differences_list_each_differing_index_then_the_count() -> None:
    cached = request_fingerprint(base_request(), provider=PROVIDER)
    request = base_request()
    request.messages[0].content = "changed"
    request.messages[3].content = "changed"
    request.messages.add(role="user", content="more")
    request.tools.add(name="third")
    request.model = "other"
    wanted = request_fingerprint(request, provider=PROVIDER)

    assert fingerprint_differences(cached, wanted) == [
        "model",
        "tools: 2 vs 3",
        "messages[0]",
        "messages[3]",
        "messages: 4 vs 5",
    ]


def test_identical_fingerprints_have_no_differences() -> None:
    fingerprint = request_fingerprint(base_request(), provider=PROVIDER)

    assert fingerprint_differences(fingerprint, fingerprint) == []


def test_an_empty_fingerprint_cannot_be_compared() -> None:
    wanted = request_fingerprint(base_request(), provider=PROVIDER)

    assert fingerprint_differences(RequestFingerprint(), wanted) == [FINGERPRINT_UNAVAILABLE]
    assert FINGERPRINT_UNAVAILABLE == "fingerprint unavailable (entry written by an older layout)"


# Keys computed before the key's hot path was reworked: the layout must never drift.
PINNED_KEYS = {
    "base_request": "d546eaaaa9f0ed93b1591b65918d5dde23caea34b0a7e1016247b2cda11120ce",
    "empty_request_empty_provider": "b0a7bba34db56a7b02393a8b1cff3eceb929cfb4bd88442d2a979a90bb91380b",
}


def test_keys_are_the_pinned_ones() -> None:
    assert compute_cache_key(base_request(), provider=PROVIDER) == PINNED_KEYS["base_request"]
    assert (
        compute_cache_key(LlmRequest(), provider="") == PINNED_KEYS["empty_request_empty_provider"]
    )


def incremental_key(fingerprint: RequestFingerprint) -> str:
    """The key's layout written out as one sha256 updated field by field."""
    digest = hashlib.sha256(b"beam-agents/cache-key/v1\x00")
    for single in (
        fingerprint.key_format,
        fingerprint.model,
        fingerprint.provider,
        fingerprint.params,
    ):
        digest.update(struct.pack(">I", len(single)) + single)
    for repeated in (fingerprint.tools, fingerprint.messages):
        digest.update(struct.pack(">I", len(repeated)))
        for item in repeated:
            digest.update(struct.pack(">I", len(item)) + item)
    return digest.hexdigest()


@pytest.mark.parametrize(
    "fingerprint",
    [
        RequestFingerprint(),
        RequestFingerprint(model=b"x", tools=[b"", b"abc"], messages=[b"\x00" * 40]),
        request_fingerprint(base_request(), provider=PROVIDER),
    ],
    ids=["empty", "odd-lengths", "real"],
)
def test_key_from_any_fingerprint_follows_the_layout(fingerprint: RequestFingerprint) -> None:
    assert cache_key_from_fingerprint(fingerprint) == incremental_key(fingerprint)


@pytest.mark.parametrize(
    "request_", [base_request(), LlmRequest(), LlmRequest(model="m", params=SamplingParams())]
)
def test_request_digests_are_the_fingerprint_and_give_the_key(request_: LlmRequest) -> None:
    digests = request_digests(request_, provider=PROVIDER)
    fingerprint = request_fingerprint(request_, provider=PROVIDER)

    assert digests.fingerprint() == fingerprint
    assert digests.fingerprint() is not digests.fingerprint()  # a fresh message each time
    assert digests.cache_key() == cache_key_from_fingerprint(fingerprint)
    assert digests.cache_key() == compute_cache_key(request_, provider=PROVIDER)
    assert (digests.model, digests.provider, digests.params) == (
        fingerprint.model,
        fingerprint.provider,
        fingerprint.params,
    )
    assert list(digests.tools) == list(fingerprint.tools)
    assert list(digests.messages) == list(fingerprint.messages)
