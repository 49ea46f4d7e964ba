"""The replay cache: LRU-64, TTL on the activation clock, digest-only entries, replay visibility."""

from __future__ import annotations

import copy
import hashlib
import pickle
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents._protos import LlmCacheBody, LlmCacheEntry, LlmRequest, LlmResponse
from beam_agents.cache_key import (
    FINGERPRINT_UNAVAILABLE,
    cache_key_and_fingerprint,
    fingerprint_differences,
)
from beam_agents.errors import ConfigError, CorruptBlobError
from beam_agents.llm_cache import (
    DEFAULT_TTL_MS,
    CachePolicy,
    LookupStatus,
    ReplayCache,
    response_digest,
)

PROVIDER = "scripted"
T0 = 1_734_000_000_000
POLICY = CachePolicy()


def request(n: int, *, extra_messages: int = 0) -> LlmRequest:
    req = LlmRequest(model="gpt-test-1")
    req.messages.add(role="system", content="You are terse.")
    req.messages.add(role="user", content=f"question {n}")
    for i in range(extra_messages):
        req.messages.add(role="user", content=f"follow-up {i}")
    return req


def response(n: int) -> LlmResponse:
    resp = LlmResponse(text=f"answer {n}", stop_reason="stop", model="gpt-test-1-0613")
    resp.usage.input_tokens = 10 + n
    resp.usage.output_tokens = 3
    return resp


def insert(
    cache: ReplayCache,
    n: int,
    *,
    now_ms: int = T0,
    seq: int = 1,
    policy: CachePolicy = POLICY,
    resp: LlmResponse | None = None,
) -> str:
    key, fingerprint = cache_key_and_fingerprint(request(n), provider=PROVIDER)
    cache.insert(
        key,
        fingerprint,
        resp if resp is not None else response(n),
        model="gpt-test-1",
        provider=PROVIDER,
        now_ms=now_ms,
        seq=seq,
        policy=policy,
    )
    return key


def test_default_policy_is_lru_64_with_a_six_hour_ttl() -> None:
    assert POLICY.max_entries == 64
    assert POLICY.ttl_ms == DEFAULT_TTL_MS == 6 * 3600 * 1000
    assert POLICY.retain_payloads is True
    assert POLICY.max_payload_bytes == 1 << 20


@pytest.mark.parametrize("field", ["max_payload_bytes", "max_entries", "ttl_ms"])
@pytest.mark.parametrize("value", [0, -1])
def test_policy_refuses_non_positive_values(field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=field):
        CachePolicy(**{field: value})  # type: ignore[arg-type]


def test_a_fresh_entry_is_a_hit_serving_the_response() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1)

    found = cache.lookup(key, now_ms=T0 + 5)

    assert found.status is LookupStatus.HIT
    assert found.response == response(1)
    assert key in cache and len(cache) == 1


def test_an_unknown_key_is_absent() -> None:
    found = ReplayCache.empty().lookup("0" * 64, now_ms=T0)

    assert found.status is LookupStatus.ABSENT
    assert found.entry is None and found.response is None


def test_the_65th_insert_evicts_the_least_recently_used() -> None:
    cache = ReplayCache.empty()
    keys = [insert(cache, n, now_ms=T0 + n) for n in range(64)]
    assert len(cache) == 64

    newcomer = insert(cache, 64, now_ms=T0 + 64)

    assert len(cache) == 64
    assert keys[0] not in cache
    assert all(key in cache for key in [*keys[1:], newcomer])


def test_a_hit_refreshes_recency_so_the_next_oldest_is_evicted() -> None:
    cache = ReplayCache.empty()
    keys = [insert(cache, n, now_ms=T0) for n in range(64)]
    assert cache.lookup(keys[0], now_ms=T0).status is LookupStatus.HIT

    insert(cache, 64, now_ms=T0)

    assert keys[0] in cache
    assert keys[1] not in cache


def test_entries_by_recency_ranks_the_last_hit_first() -> None:
    cache = ReplayCache.empty()
    keys = [insert(cache, n) for n in range(3)]
    cache.lookup(keys[0], now_ms=T0 + 1)

    ranked = [entry.cache_key for entry in cache.entries_by_recency()]

    assert ranked == [keys[0], keys[2], keys[1]]


def test_ttl_is_judged_against_the_activation_clock_passed_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, now_ms=T0)
    # Absurd wall clocks, far past and far future: they must change nothing.
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)
    monkeypatch.setattr(time, "time_ns", lambda: 4_000_000_000 * 10**9)
    monkeypatch.setattr(time, "monotonic", lambda: 1e12)

    assert cache.lookup(key, now_ms=T0 + DEFAULT_TTL_MS - 1).status is LookupStatus.HIT
    assert cache.lookup(key, now_ms=T0 + DEFAULT_TTL_MS).status is LookupStatus.EXPIRED

    monkeypatch.setattr(time, "time", lambda: 0.0)
    assert cache.lookup(key, now_ms=T0 + DEFAULT_TTL_MS - 1).status is LookupStatus.HIT


def test_ttl_comes_from_the_policy_at_insert_time() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, policy=CachePolicy(ttl_ms=1000))

    assert cache.lookup(key, now_ms=T0 + 999).status is LookupStatus.HIT
    assert cache.lookup(key, now_ms=T0 + 1000).status is LookupStatus.EXPIRED


def test_insert_purges_entries_expired_at_its_clock() -> None:
    cache = ReplayCache.empty()
    old = insert(cache, 1, now_ms=T0)
    young = insert(cache, 2, now_ms=T0 + 1000)

    insert(cache, 3, now_ms=T0 + DEFAULT_TTL_MS)

    assert old not in cache
    assert young in cache


def test_an_oversized_response_is_stored_digest_only() -> None:
    cache = ReplayCache.empty()
    big = response(1)
    big.text = "x" * 2000
    key = insert(cache, 1, resp=big, policy=CachePolicy(max_payload_bytes=1000))

    entry = cache.get(key)
    assert entry is not None
    assert entry.digest_only and not entry.HasField("response")
    assert entry.response_sha256 == response_digest(big)
    assert entry.response_size == len(big.SerializeToString(deterministic=True))
    found = cache.lookup(key, now_ms=T0)
    assert found.status is LookupStatus.DIGEST_ONLY
    assert found.response is None


def test_a_response_at_the_size_limit_keeps_its_payload() -> None:
    resp = response(1)
    limit = len(resp.SerializeToString(deterministic=True))
    cache = ReplayCache.empty()
    key = insert(cache, 1, resp=resp, policy=CachePolicy(max_payload_bytes=limit))

    assert cache.lookup(key, now_ms=T0).status is LookupStatus.HIT


def test_with_retention_off_every_response_is_digest_only() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, policy=CachePolicy(retain_payloads=False))

    entry = cache.get(key)
    assert entry is not None and entry.digest_only
    assert entry.response_sha256 == response_digest(response(1))
    assert cache.lookup(key, now_ms=T0).status is LookupStatus.DIGEST_ONLY


def test_an_entry_minted_after_the_replayed_seq_is_not_served() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, seq=9)

    assert cache.lookup(key, now_ms=T0, visible_through_seq=8).status is LookupStatus.MINTED_LATER
    assert cache.lookup(key, now_ms=T0, visible_through_seq=9).status is LookupStatus.HIT
    assert cache.lookup(key, now_ms=T0).status is LookupStatus.HIT


def test_an_entry_of_unknown_seq_is_visible_to_replay() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, seq=-1)

    assert cache.lookup(key, now_ms=T0, visible_through_seq=0).status is LookupStatus.HIT


def test_expired_is_reported_before_digest_only_and_minted_later() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, seq=9, policy=CachePolicy(retain_payloads=False))

    found = cache.lookup(key, now_ms=T0 + DEFAULT_TTL_MS, visible_through_seq=1)

    assert found.status is LookupStatus.EXPIRED


def test_a_miss_lookup_does_not_change_recency() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, seq=5)
    before = cache.to_body().SerializeToString(deterministic=True)

    cache.lookup(key, now_ms=T0 + 7, visible_through_seq=1)
    cache.lookup("f" * 64, now_ms=T0 + 7)

    assert cache.to_body().SerializeToString(deterministic=True) == before


def test_reinserting_a_key_replaces_its_entry() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 1, seq=1)
    replacement = response(99)

    insert(cache, 1, seq=4, now_ms=T0 + 10, resp=replacement)

    assert len(cache) == 1
    entry = cache.get(key)
    assert entry is not None and entry.inserted_seq == 4 and entry.response == replacement


def test_nearest_names_the_differing_message() -> None:
    cache = ReplayCache.empty()
    insert(cache, 1)
    near_key = insert(cache, 2)
    wanted = request(2)
    wanted.messages[0].content = "You are verbose."
    _, fingerprint = cache_key_and_fingerprint(wanted, provider=PROVIDER)

    found = cache.nearest(fingerprint)

    assert found is not None
    entry, differences = found
    assert entry.cache_key == near_key
    assert differences == ["messages[0]"]


def test_nearest_reports_an_appended_message_as_a_count_difference() -> None:
    cache = ReplayCache.empty()
    key = insert(cache, 3)
    _, fingerprint = cache_key_and_fingerprint(request(3, extra_messages=1), provider=PROVIDER)

    found = cache.nearest(fingerprint)

    assert found is not None
    assert found[0].cache_key == key
    assert found[1] == ["messages: 2 vs 3"]


def test_nearest_breaks_ties_by_recency() -> None:
    cache = ReplayCache.empty()
    first = insert(cache, 1)
    second = insert(cache, 2)
    _, fingerprint = cache_key_and_fingerprint(request(3), provider=PROVIDER)

    found_before = cache.nearest(fingerprint)
    cache.lookup(first, now_ms=T0)
    found_after = cache.nearest(fingerprint)

    assert found_before is not None and found_before[0].cache_key == second
    assert found_after is not None and found_after[0].cache_key == first


def test_nearest_prefers_entries_that_can_be_compared() -> None:
    cache = ReplayCache.empty()
    comparable = insert(cache, 1)
    migrated = LlmCacheEntry(cache_key="a" * 64, inserted_ms=T0, ttl_ms=DEFAULT_TTL_MS)
    body = cache.to_body()
    body.entries.append(migrated)
    cache = ReplayCache.from_body(body)
    _, fingerprint = cache_key_and_fingerprint(
        LlmRequest(model="another-model"), provider="another-provider"
    )

    found = cache.nearest(fingerprint)
    assert found is not None and found[0].cache_key == comparable

    only_migrated = ReplayCache.from_body(LlmCacheBody(entries=[migrated]))
    found = only_migrated.nearest(fingerprint)
    assert found is not None and found[1] == [FINGERPRINT_UNAVAILABLE]


def test_nearest_of_an_empty_cache_is_none() -> None:
    _, fingerprint = cache_key_and_fingerprint(request(1), provider=PROVIDER)

    assert ReplayCache.empty().nearest(fingerprint) is None


def _populated() -> ReplayCache:
    cache = ReplayCache.empty()
    keys = [insert(cache, n, now_ms=T0 + n, seq=n) for n in range(10)]
    cache.lookup(keys[3], now_ms=T0 + 50)
    insert(cache, 11, policy=CachePolicy(retain_payloads=False), seq=12)
    return cache


def test_the_same_operations_give_the_same_body_bytes() -> None:
    assert _populated().to_body().SerializeToString(
        deterministic=True
    ) == _populated().to_body().SerializeToString(deterministic=True)


def test_body_round_trip_is_byte_stable() -> None:
    data = _populated().to_body().SerializeToString(deterministic=True)

    reloaded = ReplayCache.from_body(LlmCacheBody.FromString(data))

    assert reloaded.to_body().SerializeToString(deterministic=True) == data
    assert [e.cache_key for e in reloaded.entries_by_recency()] == [
        e.cache_key for e in _populated().entries_by_recency()
    ]


def test_body_entries_are_ordered_by_cache_key() -> None:
    keys = [entry.cache_key for entry in _populated().to_body().entries]

    assert keys == sorted(keys)


def test_a_reloaded_cache_continues_the_recency_tick() -> None:
    cache = ReplayCache.from_body(_populated().to_body())
    newest = insert(cache, 20)

    assert cache.entries_by_recency()[0].cache_key == newest


def test_from_body_copies_and_copy_is_independent() -> None:
    body = _populated().to_body()
    before = body.SerializeToString(deterministic=True)
    cache = ReplayCache.from_body(body)
    twin = cache.copy()

    insert(cache, 30)

    assert body.SerializeToString(deterministic=True) == before
    assert len(twin) == len(cache) - 1


def test_a_body_with_two_entries_under_one_key_is_corrupt() -> None:
    entry = LlmCacheEntry(cache_key="b" * 64)

    with pytest.raises(CorruptBlobError, match="two entries"):
        ReplayCache.from_body(LlmCacheBody(entries=[entry, entry]))


# --- copy-on-write and the body the cache keeps ----------------------------------------------


def body_bytes_of(cache: ReplayCache) -> bytes:
    return cache.to_body().SerializeToString(deterministic=True)


def test_a_hit_on_a_copy_leaves_the_original_unchanged() -> None:
    original = _populated()
    before = body_bytes_of(original)
    key = next(iter(e.cache_key for e in original.entries_by_recency()[3:]))
    held = original.get(key)
    assert held is not None
    held_before = held.SerializeToString(deterministic=True)

    twin = original.copy()
    assert twin.lookup(key, now_ms=T0 + 99).status is LookupStatus.HIT

    assert body_bytes_of(original) == original.body_bytes() == before
    assert held.SerializeToString(deterministic=True) == held_before
    assert twin.entries_by_recency()[0].cache_key == key
    assert original.entries_by_recency()[0].cache_key != key


def test_hits_on_a_copy_copy_no_body_until_it_is_dumped() -> None:
    original = _populated()
    before = original.body_bytes()
    keys = [e.cache_key for e in original.entries_by_recency()]
    twin = original.copy()

    for offset, key in enumerate(keys[-1:-4:-1]):  # the three least recent, in turn
        assert twin.lookup(key, now_ms=T0 + 200 + offset).status is LookupStatus.HIT

    assert twin._body is original._body  # the hits were kept aside: no copy of the body
    assert [e.cache_key for e in twin.entries_by_recency()[:3]] == keys[-3:]
    assert original.body_bytes() == before
    dumped = LlmCacheBody.FromString(twin.body_bytes())
    assert twin._body is not original._body
    used = {e.cache_key: (e.last_used_ms, e.last_used_tick) for e in dumped.entries}
    tick = LlmCacheBody.FromString(before).tick
    assert [used[key] for key in keys[-1:-4:-1]] == [
        (T0 + 200, tick + 1),
        (T0 + 201, tick + 2),
        (T0 + 202, tick + 3),
    ]
    assert dumped.tick == tick + 3


def test_a_change_to_the_original_after_a_copy_leaves_the_copy_unchanged() -> None:
    original = _populated()
    twin = original.copy()
    before = twin.body_bytes()
    keys = [e.cache_key for e in original.entries_by_recency()]

    original.lookup(keys[-1], now_ms=T0 + 5)
    insert(original, 40, policy=CachePolicy(max_entries=4))

    assert twin.body_bytes() == body_bytes_of(twin) == before
    assert len(twin) == 11 and len(original) == 4


def test_a_copy_of_a_copy_is_independent_of_both() -> None:
    first = _populated()
    second = first.copy()
    third = second.copy()
    keys = [e.cache_key for e in first.entries_by_recency()]

    second.lookup(keys[-1], now_ms=T0 + 1)

    assert first.body_bytes() == third.body_bytes() != second.body_bytes()


def test_body_bytes_is_to_body_serialized_after_out_of_order_inserts_and_evictions() -> None:
    cache = ReplayCache.empty()
    for n in (5, 1, 9, 3, 7, 2):  # keys arrive in no particular order
        insert(cache, n, policy=CachePolicy(max_entries=4))
        assert cache.body_bytes() == body_bytes_of(cache)
    keys = [entry.cache_key for entry in cache.to_body().entries]
    assert keys == sorted(keys) and len(keys) == 4


def test_a_body_stored_out_of_key_order_is_dumped_in_key_order() -> None:
    body = _populated().to_body()
    body.entries.reverse()  # hand-made: the dumper never writes this order

    cache = ReplayCache.from_body(body)
    twin = cache.copy()

    expected = LlmCacheBody(entries=sorted(body.entries, key=lambda e: e.cache_key), tick=body.tick)
    assert cache.body_bytes() == expected.SerializeToString(deterministic=True)
    assert twin.body_bytes() == cache.body_bytes() == body_bytes_of(twin)


def test_fields_of_the_body_unknown_here_are_dropped_and_those_of_entries_kept() -> None:
    known = _populated().to_body()
    entry_extra = b"\xa0\x06\x01"  # field 100, varint 1: unknown to LlmCacheEntry
    known.entries[0].MergeFromString(entry_extra)
    data = known.SerializeToString(deterministic=True)
    body_extra = b"\x18\x07"  # field 3, varint 7: unknown to LlmCacheBody

    for copying in (True, False):
        cache = ReplayCache.from_body(LlmCacheBody.FromString(data + body_extra), copy=copying)

        assert cache.body_bytes() == data == body_bytes_of(cache)


def test_a_replaced_or_evicted_entry_stays_as_it_was_for_whoever_holds_it() -> None:
    cache = ReplayCache.empty()
    first = cache.insert(
        *cache_key_and_fingerprint(request(1), provider=PROVIDER),
        response(1),
        model="gpt-test-1",
        provider=PROVIDER,
        now_ms=T0,
        seq=1,
        policy=POLICY,
    )
    snapshot = first.SerializeToString(deterministic=True)

    insert(cache, 1, seq=2, resp=response(77))  # replaces it
    for n in range(2, 5):
        insert(cache, n, policy=CachePolicy(max_entries=2))  # evicts the replacement too

    assert first.SerializeToString(deterministic=True) == snapshot
    assert first.response == response(1) and first.inserted_seq == 1


def test_from_body_without_copy_takes_the_body_over() -> None:
    body = _populated().to_body()
    data = body.SerializeToString(deterministic=True)

    cache = ReplayCache.from_body(body, copy=False)

    assert cache.body_bytes() == data
    assert len(cache) == len(body.entries)


class ReferenceCache:
    """The replay cache as it was before copy-on-write: a dict of independent entry copies.

    ``ReplayCache`` must behave exactly like it, operation for operation and byte for byte.
    """

    def __init__(self, entries: dict[str, LlmCacheEntry], tick: int) -> None:
        self.entries = entries
        self.tick = tick

    @classmethod
    def from_body(cls, body: LlmCacheBody) -> ReferenceCache:
        entries = {}
        for stored in body.entries:
            entry = LlmCacheEntry()
            entry.CopyFrom(stored)
            entries[entry.cache_key] = entry
        newest = max((e.last_used_tick for e in entries.values()), default=0)
        return cls(entries, max(body.tick, newest))

    def to_bytes(self) -> bytes:
        body = LlmCacheBody(entries=[self.entries[k] for k in sorted(self.entries)], tick=self.tick)
        return body.SerializeToString(deterministic=True)

    def copy(self) -> ReferenceCache:
        return ReferenceCache.from_body(LlmCacheBody.FromString(self.to_bytes()))

    def lookup(self, key: str, now_ms: int, visible: int | None) -> LookupStatus:
        entry = self.entries.get(key)
        if entry is None:
            return LookupStatus.ABSENT
        if now_ms >= entry.inserted_ms + entry.ttl_ms:
            return LookupStatus.EXPIRED
        if entry.digest_only:
            return LookupStatus.DIGEST_ONLY
        if visible is not None and entry.inserted_seq > visible:
            return LookupStatus.MINTED_LATER
        self.tick += 1
        entry.last_used_ms, entry.last_used_tick = now_ms, self.tick
        return LookupStatus.HIT

    def insert(self, n: int, now_ms: int, seq: int, policy: CachePolicy) -> None:
        key, fingerprint = cache_key_and_fingerprint(request(n), provider=PROVIDER)
        payload = response(n).SerializeToString(deterministic=True)
        digest_only = not policy.retain_payloads or len(payload) > policy.max_payload_bytes
        self.tick += 1
        entry = LlmCacheEntry(
            cache_key=key,
            digest_only=digest_only,
            response_sha256=hashlib.sha256(payload).digest(),
            response_size=len(payload),
            inserted_ms=now_ms,
            inserted_seq=seq,
            last_used_ms=now_ms,
            ttl_ms=policy.ttl_ms,
            model="gpt-test-1",
            provider=PROVIDER,
            fingerprint=fingerprint,
            last_used_tick=self.tick,
        )
        if not digest_only:
            entry.response.CopyFrom(response(n))
        self.entries[key] = entry
        for k in [k for k, e in self.entries.items() if now_ms >= e.inserted_ms + e.ttl_ms]:
            del self.entries[k]
        excess = len(self.entries) - policy.max_entries
        if excess > 0:
            by_recency = sorted(
                self.entries.values(), key=lambda e: (e.last_used_tick, e.cache_key)
            )
            for entry in by_recency[:excess]:
                del self.entries[entry.cache_key]


POLICIES = [
    POLICY,
    CachePolicy(max_entries=3),
    CachePolicy(ttl_ms=50),
    CachePolicy(retain_payloads=False),
    CachePolicy(max_payload_bytes=40),
]
OPERATION = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 7),  # which cache
        st.integers(0, 9),  # which request
        st.integers(0, 120),  # clock offset
        st.integers(-1, 5),  # seq
        st.integers(0, len(POLICIES) - 1),
    ),
    st.tuples(
        st.just("lookup"),
        st.integers(0, 7),
        st.integers(0, 9),
        st.integers(0, 120),
        st.one_of(st.none(), st.integers(-1, 5)),
    ),
    st.tuples(st.just("copy"), st.integers(0, 7)),
    st.tuples(st.just("reload"), st.integers(0, 7)),
    st.tuples(st.just("to_body"), st.integers(0, 7)),
)


def _recency_keys(reference: ReferenceCache) -> list[str]:
    by_recency = sorted(reference.entries.values(), key=lambda e: (-e.last_used_tick, e.cache_key))
    return [e.cache_key for e in by_recency]


def _nearest_key(reference: ReferenceCache, fingerprint: Any) -> str | None:
    """The reference's ``nearest``: fewest differences, then most recently used, then key."""
    ranked = sorted(
        (
            0 if entry.fingerprint.key_format else 1,
            len(fingerprint_differences(entry.fingerprint, fingerprint)),
            -entry.last_used_tick,
            entry.cache_key,
        )
        for entry in reference.entries.values()
    )
    return ranked[0][3] if ranked else None


def _check_recency(caches: list[ReplayCache], references: list[ReferenceCache]) -> None:
    """Recency as read without dumping (a hit on a shared body keeps it aside)."""
    wanted = cache_key_and_fingerprint(request(99, extra_messages=1), provider=PROVIDER)[1]
    for each, expected in zip(caches, references, strict=True):
        assert [e.cache_key for e in each.entries_by_recency()] == _recency_keys(expected)
        nearest = each.nearest(wanted)
        assert (nearest[0].cache_key if nearest else None) == _nearest_key(expected, wanted)


def _run_against_reference(operations: list[tuple[Any, ...]], *, dump_every_step: bool) -> None:
    caches, references = [ReplayCache.empty()], [ReferenceCache({}, 0)]
    for operation in operations:
        kind, which = operation[0], operation[1] % len(caches)
        cache, reference = caches[which], references[which]
        if kind == "insert":
            _, _, n, offset, seq, policy = operation
            insert(cache, n, now_ms=T0 + offset, seq=seq, policy=POLICIES[policy])
            reference.insert(n, T0 + offset, seq, POLICIES[policy])
        elif kind == "lookup":
            _, _, n, offset, visible = operation
            key = cache_key_and_fingerprint(request(n), provider=PROVIDER)[0]
            found = cache.lookup(key, now_ms=T0 + offset, visible_through_seq=visible)
            assert found.status is reference.lookup(key, T0 + offset, visible)
        elif kind == "copy":
            caches.append(cache.copy())
            references.append(reference.copy())
        elif kind == "reload":
            caches[which] = ReplayCache.from_body(LlmCacheBody.FromString(cache.body_bytes()))
        else:
            assert cache.to_body().SerializeToString(deterministic=True) == reference.to_bytes()
        # Every cache, not only the one changed: a copy must never see another's change.
        _check_recency(caches, references)
        if dump_every_step:
            for each, expected in zip(caches, references, strict=True):
                assert each.body_bytes() == expected.to_bytes()
    for each, expected in zip(caches, references, strict=True):
        assert each.body_bytes() == expected.to_bytes()
    _check_recency(caches, references)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPERATION, max_size=40))
def test_every_operation_sequence_matches_the_reference_cache(
    operations: list[tuple[Any, ...]],
) -> None:
    _run_against_reference(operations, dump_every_step=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPERATION, max_size=40))
def test_hits_kept_aside_on_a_shared_body_match_the_reference_until_dumped(
    operations: list[tuple[Any, ...]],
) -> None:
    # Dumping writes the uses kept aside into a private body; here they pile up (hits
    # on copies, copies of copies with uses kept aside) until the end.
    _run_against_reference(operations, dump_every_step=False)


def test_a_body_whose_tick_lags_its_entries_continues_after_the_newest_use() -> None:
    body = _populated().to_body()
    newest = max(entry.last_used_tick for entry in body.entries)
    body.tick = 0  # hand-made: behind its own entries
    oldest = min(body.entries, key=lambda entry: entry.last_used_tick).cache_key

    cache = ReplayCache.from_body(body)
    assert LlmCacheBody.FromString(cache.body_bytes()).tick == newest

    cache.lookup(oldest, now_ms=T0)
    assert cache.entries_by_recency()[0].cache_key == oldest
    assert LlmCacheBody.FromString(cache.body_bytes()).tick == newest + 1


@pytest.mark.parametrize(
    "duplicate",
    [lambda c: pickle.loads(pickle.dumps(c)), copy.deepcopy, copy.copy],
    ids=["pickle", "deepcopy", "copy"],
)
def test_a_pickled_or_copied_cache_is_the_same_cache_and_independent(
    duplicate: Callable[[ReplayCache], ReplayCache],
) -> None:
    original = _populated()
    before = original.body_bytes()
    oldest = original.entries_by_recency()[-1].cache_key

    twin = duplicate(original)
    assert twin.body_bytes() == before
    twin.lookup(oldest, now_ms=T0 + 1)
    insert(twin, 50)

    assert original.body_bytes() == before
    assert twin.entries_by_recency()[1].cache_key == oldest
    assert twin.body_bytes() == body_bytes_of(twin) != before
