"""The replay cache's key: a digest of the complete request material, and its fingerprint.

``compute_cache_key`` must change whenever anything that could change the model's
answer changes (model, messages, tool specs, sampling params, provider name, and
the key format itself): replay's guarantee that it cannot fabricate a
plausible-but-wrong reproduction rests on a drifted request being a loud miss.

The key is built in two steps. First a *fingerprint*: one 16-byte digest per
request component, each domain-separated by the component's name, each over the
component's deterministic protobuf serialization (field order fixed by field
number, map entries sorted, proto3 ``optional`` presence kept, so an unset
temperature differs from 0.0). Then the key: sha256 over the fingerprint in a
fixed, length-prefixed layout, so the key is a pure function of the fingerprint
and a cached entry's fingerprint can explain a miss component by component
("messages[2]") instead of only naming a key.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import NamedTuple

from beam_agents._protos import LlmRequest, RequestFingerprint

CACHE_KEY_FORMAT = 1
"""Version of the key's material and layout; bumping it changes every key."""

FINGERPRINT_UNAVAILABLE = "fingerprint unavailable (entry written by an older layout)"
"""What ``fingerprint_differences`` says about an entry that carries no fingerprint."""

_COMPONENT_DIGEST_BYTES = 16
_COMPONENT_DOMAIN = b"beam-agents/cache-key/component/"
_KEY_DOMAIN = b"beam-agents/cache-key/v1\x00"
_U32 = struct.Struct(">I")


def _component_digest(label: bytes, payload: bytes) -> bytes:
    # The label (fixed, NUL-free) and a NUL separate the domains: a model name can
    # never hash like a message with the same bytes.
    return hashlib.sha256(_COMPONENT_DOMAIN + label + b"\x00" + payload).digest()[
        :_COMPONENT_DIGEST_BYTES
    ]


_TOOL_PREFIX = _COMPONENT_DOMAIN + b"tool\x00"
_MESSAGE_PREFIX = _COMPONENT_DOMAIN + b"message\x00"

_KEY_FORMAT_DIGEST = _component_digest(b"key_format", str(CACHE_KEY_FORMAT).encode("ascii"))


def _key_of(
    key_format: bytes,
    model: bytes,
    provider: bytes,
    params: bytes,
    tools: Sequence[bytes],
    messages: Sequence[bytes],
) -> str:
    """sha256 hex over the components in the key's fixed, length-prefixed layout.

    Every component is length-prefixed and the two lists are count-prefixed, so
    no two different fingerprints share a byte layout. The layout is assembled
    first and hashed in one call.
    """
    pack = _U32.pack
    parts = [_KEY_DOMAIN]
    for single in (key_format, model, provider, params):
        parts += (pack(len(single)), single)
    for repeated in (tools, messages):
        parts.append(pack(len(repeated)))
        for item in repeated:
            parts += (pack(len(item)), item)
    return hashlib.sha256(b"".join(parts)).hexdigest()


class RequestDigests(NamedTuple):
    """A request's component digests as plain bytes: its fingerprint before it is a message.

    The hot path (``ctx.complete``) needs the key of every request but the
    ``RequestFingerprint`` message only to store a new entry or report a miss, so
    it builds the message only then.
    """

    model: bytes
    provider: bytes
    params: bytes
    tools: tuple[bytes, ...]
    messages: tuple[bytes, ...]

    def cache_key(self) -> str:
        """The cache key these digests determine (``cache_key_from_fingerprint`` of them)."""
        return _key_of(
            _KEY_FORMAT_DIGEST, self.model, self.provider, self.params, self.tools, self.messages
        )

    def fingerprint(self) -> RequestFingerprint:
        """The ``RequestFingerprint`` message holding these digests."""
        return RequestFingerprint(
            key_format=_KEY_FORMAT_DIGEST,
            model=self.model,
            provider=self.provider,
            params=self.params,
            tools=self.tools,
            messages=self.messages,
        )


def request_digests(request: LlmRequest, *, provider: str) -> RequestDigests:
    """One short digest per component of ``request`` as sent to ``provider``.

    Args:
        request: The model request.
        provider: The provider's name.

    Returns:
        The digests ``request_fingerprint`` holds (model, provider, params, one per
        tool spec, one per message), as bytes.
    """
    # _component_digest inlined for the two lists (a call per message adds up: this runs
    # for every model call); the same material, so the same digests.
    sha256, size = hashlib.sha256, _COMPONENT_DIGEST_BYTES
    return RequestDigests(
        model=_component_digest(b"model", request.model.encode("utf-8")),
        provider=_component_digest(b"provider", provider.encode("utf-8")),
        params=_component_digest(b"params", request.params.SerializeToString(deterministic=True)),
        tools=tuple(
            [
                sha256(_TOOL_PREFIX + tool.SerializeToString(deterministic=True)).digest()[:size]
                for tool in request.tools
            ]
        ),
        messages=tuple(
            [
                sha256(_MESSAGE_PREFIX + message.SerializeToString(deterministic=True)).digest()[
                    :size
                ]
                for message in request.messages
            ]
        ),
    )


_KEYED_MEMO_LIMIT = 512
"""How many requests ``keyed_request_digests`` remembers (it forgets them all past this)."""
_KEYED_MEMO_MAX_BYTES = 16 << 10
"""Requests larger than this (serialized) are digested every time, not remembered: the
memo holds each remembered request's bytes, and a large request's hashing is most of
its digesting anyway."""
_KEYED_MEMO: dict[tuple[str, bytes], tuple[RequestDigests, str]] = {}


def keyed_request_digests(request: LlmRequest, *, provider: str) -> tuple[RequestDigests, str]:
    """``request_digests`` of ``request`` and its cache key, remembered by the request's bytes.

    An agent asks the same request again and again (a fixed system prompt and question,
    each key's first turn): digesting it is one serialization and a few hashes per
    component. Here the whole request is serialized once (deterministic) and its digests
    are looked up under those bytes and the provider's name. That is exact: each
    component digest hashes the deterministic serialization of a part of the request,
    and equal deterministic bytes are an equal request, so equal bytes give equal
    digests. The memo is process-wide, bounded and never stale (it maps bytes to what
    they determine, nothing of any key's state).
    """
    data = request.SerializeToString(deterministic=True)
    memo_key = (provider, data)
    found = _KEYED_MEMO.get(memo_key)
    if found is None:
        digests = request_digests(request, provider=provider)
        found = (digests, digests.cache_key())
        if len(data) <= _KEYED_MEMO_MAX_BYTES:
            if len(_KEYED_MEMO) >= _KEYED_MEMO_LIMIT:
                _KEYED_MEMO.clear()
            _KEYED_MEMO[memo_key] = found
    return found


def request_fingerprint(request: LlmRequest, *, provider: str) -> RequestFingerprint:
    """One short digest per component of ``request`` as sent to ``provider``.

    Args:
        request: The model request.
        provider: The provider's name (part of the material: two providers may
            answer the same request differently).

    Returns:
        The fingerprint: key format, model, provider, params, one digest per tool
        spec and one per message (role, content, tool calls, tool_call_id, name).
    """
    return request_digests(request, provider=provider).fingerprint()


def cache_key_from_fingerprint(fingerprint: RequestFingerprint) -> str:
    """The cache key (64 hex digits) that ``fingerprint`` determines.

    Every component is length-prefixed and the two lists are count-prefixed, so
    no two different fingerprints share a byte layout.
    """
    return _key_of(
        fingerprint.key_format,
        fingerprint.model,
        fingerprint.provider,
        fingerprint.params,
        fingerprint.tools,
        fingerprint.messages,
    )


def cache_key_and_fingerprint(
    request: LlmRequest, *, provider: str
) -> tuple[str, RequestFingerprint]:
    """The cache key and the fingerprint of ``request`` in one pass.

    Args:
        request: The model request.
        provider: The provider's name.

    Returns:
        ``(cache_key, fingerprint)``, where ``cache_key == compute_cache_key(request,
        provider=provider)``.
    """
    digests = request_digests(request, provider=provider)
    return digests.cache_key(), digests.fingerprint()


def compute_cache_key(request: LlmRequest, *, provider: str) -> str:
    """The replay-cache key of ``request`` as sent to ``provider``: 64 hex digits of sha256.

    Args:
        request: The model request.
        provider: The provider's name.

    Returns:
        A key that changes whenever any part of the request material changes
        (model, any message, any tool spec, sampling params, provider name, key
        format) and is the same on every machine and every Python process.
    """
    return request_digests(request, provider=provider).cache_key()


def fingerprint_differences(cached: RequestFingerprint, wanted: RequestFingerprint) -> list[str]:
    """Name the request components in which ``cached`` and ``wanted`` differ.

    Args:
        cached: The fingerprint stored with a cache entry.
        wanted: The fingerprint of the request being looked up.

    Returns:
        Component names in a stable order: ``"key format"``, ``"model"``,
        ``"provider"``, ``"params"``, then ``"tools[i]"`` for each differing index
        up to the shorter list and ``"tools: N vs M"`` (cached vs wanted) if the
        counts differ, then the same for ``"messages"``. Empty if they are equal.
        If either fingerprint is empty (an entry migrated from a layout that kept
        none), the one name ``FINGERPRINT_UNAVAILABLE``: nothing can be compared.
    """
    if not cached.key_format or not wanted.key_format:
        return [FINGERPRINT_UNAVAILABLE]
    differences = [
        name
        for name, left, right in (
            ("key format", cached.key_format, wanted.key_format),
            ("model", cached.model, wanted.model),
            ("provider", cached.provider, wanted.provider),
            ("params", cached.params, wanted.params),
        )
        if left != right
    ]
    for name, left_list, right_list in (
        ("tools", cached.tools, wanted.tools),
        ("messages", cached.messages, wanted.messages),
    ):
        differences.extend(
            f"{name}[{index}]"
            for index, (left, right) in enumerate(zip(left_list, right_list, strict=False))
            if left != right
        )
        if len(left_list) != len(right_list):
            differences.append(f"{name}: {len(left_list)} vs {len(right_list)}")
    return differences
