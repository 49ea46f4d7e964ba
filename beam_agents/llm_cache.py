"""The replay cache: a key's cached model responses (LRU, 64 entries, 6-hour TTL per entry).

``ReplayCache`` is the in-memory form of an ``llm_cache`` blob body
(``LlmCacheBody``). The same class serves the pipeline (cache-first
``ctx.complete``) and replay (which can serve only what is cached), so both judge
a hit the same way.

Time is the *activation clock* passed in as ``now_ms`` (the triggering
envelope's event time), never the wall clock: replay takes that clock from the
trace, so an entry that was live when the activation ran is live when it is
replayed, however much later that is. Recency is a monotonic tick stored in the
body, not a time, so LRU order is exact even when many uses share one ``now_ms``.

The cache is mutated in place (a hit refreshes recency, an insert may evict);
callers work on a fresh ``ReplayCache`` per activation and discard it if the
activation fails, which is what makes a failed activation commit nothing.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from beam_agents._protos import LlmCacheBody, LlmCacheEntry, LlmResponse, RequestFingerprint
from beam_agents.cache_key import fingerprint_differences
from beam_agents.errors import ConfigError, CorruptBlobError

DEFAULT_MAX_ENTRIES = 64
DEFAULT_TTL_MS = 6 * 3600 * 1000
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20
UNKNOWN_SEQ = -1
"""``inserted_seq`` of an entry whose inserting activation is unknown (migrated from v1)."""


@dataclass(frozen=True, kw_only=True)
class CachePolicy:
    """How the replay cache keeps responses."""

    retain_payloads: bool = True
    """False: every response is stored digest-only (replay cannot serve it, and says so)."""
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """A response whose deterministic serialization is larger is stored digest-only."""
    max_entries: int = DEFAULT_MAX_ENTRIES
    """Entries beyond this are evicted, least recently used first."""
    ttl_ms: int = DEFAULT_TTL_MS
    """An entry expires this long after it was inserted (activation clock)."""

    def __post_init__(self) -> None:
        for name in ("max_payload_bytes", "max_entries", "ttl_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"CachePolicy.{name} must be a positive int, got {value!r}")
        if not isinstance(self.retain_payloads, bool):
            raise ConfigError(
                f"CachePolicy.retain_payloads must be a bool, got {self.retain_payloads!r}"
            )


DEFAULT_CACHE_POLICY = CachePolicy()


class LookupStatus(enum.Enum):
    """The outcome of a cache lookup."""

    HIT = "hit"
    """Live, with its payload, visible to the caller: serve it."""
    ABSENT = "absent"
    """No entry under this key."""
    EXPIRED = "expired"
    """An entry whose TTL has run out at the activation clock."""
    DIGEST_ONLY = "digest_only"
    """An entry that kept only the response's digest: it cannot be served."""
    MINTED_LATER = "minted_later"
    """Replay only: the entry was inserted by an activation after the target, so it is
    not the response the target consumed."""


@dataclass(frozen=True)
class CacheLookup:
    """What ``ReplayCache.lookup`` found."""

    status: LookupStatus
    """The outcome."""
    entry: LlmCacheEntry | None = None
    """The entry under the key, whatever its status (None when ABSENT)."""

    @property
    def response(self) -> LlmResponse | None:
        """The cached response for a HIT, otherwise None."""
        if self.status is LookupStatus.HIT and self.entry is not None:
            return self.entry.response
        return None


def response_digest(response: LlmResponse) -> bytes:
    """sha256 of the deterministic serialization of ``response`` (also used by the trace)."""
    return hashlib.sha256(response.SerializeToString(deterministic=True)).digest()


def _expired(entry: LlmCacheEntry, now_ms: int) -> bool:
    return now_ms >= entry.inserted_ms + entry.ttl_ms


def _recency_order(entry: LlmCacheEntry) -> tuple[int, str]:
    # Least recent first; equal ticks (only possible in hand-made bodies) fall back
    # to the key so that eviction never depends on dict order.
    return (entry.last_used_tick, entry.cache_key)


class ReplayCache:
    """A key's replay cache, in memory. Deterministic: same operations, same ``to_body()``."""

    __slots__ = ("_entries", "_tick")

    def __init__(self) -> None:
        """An empty cache; see also ``empty()`` and ``from_body()``."""
        self._entries: dict[str, LlmCacheEntry] = {}
        self._tick = 0

    @classmethod
    def empty(cls) -> ReplayCache:
        """A cache with no entries."""
        return cls()

    @classmethod
    def from_body(cls, body: LlmCacheBody, *, copy: bool = True) -> ReplayCache:
        """The cache an ``llm_cache`` body (current layout) holds.

        Args:
            body: The body.
            copy: False lets the cache adopt the body's entries without copying them
                (for a body parsed just for this); later changes to either then show
                in both.

        Raises:
            CorruptBlobError: The body holds an entry without a key, or two entries
                under one key.
        """
        cache = cls()
        for stored in body.entries:
            if not stored.cache_key:
                raise CorruptBlobError("llm_cache", "an entry has an empty cache_key")
            if stored.cache_key in cache._entries:
                raise CorruptBlobError(
                    "llm_cache", f"two entries under cache key {stored.cache_key}"
                )
            entry = stored
            if copy:
                entry = LlmCacheEntry()
                entry.CopyFrom(stored)
            cache._entries[entry.cache_key] = entry
        newest_use = max((e.last_used_tick for e in cache._entries.values()), default=0)
        cache._tick = max(body.tick, newest_use)
        return cache

    def to_body(self) -> LlmCacheBody:
        """The body of this cache: entries ordered by cache key, so equal caches give equal bytes.

        The body holds copies: changing it does not change the cache.
        """
        return LlmCacheBody(
            entries=[self._entries[key] for key in sorted(self._entries)], tick=self._tick
        )

    def copy(self) -> ReplayCache:
        """An independent copy (for a caller that must keep the original untouched)."""
        return ReplayCache.from_body(self.to_body(), copy=False)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cache_key: object) -> bool:
        return cache_key in self._entries

    def get(self, cache_key: str) -> LlmCacheEntry | None:
        """The entry under ``cache_key`` whatever its state, without touching its recency."""
        return self._entries.get(cache_key)

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def lookup(
        self, cache_key: str, *, now_ms: int, visible_through_seq: int | None = None
    ) -> CacheLookup:
        """Look up ``cache_key`` at activation clock ``now_ms``.

        Args:
            cache_key: The request's key (``compute_cache_key``).
            now_ms: The activation clock; the TTL is judged against it, never the wall clock.
            visible_through_seq: Replay of activation ``seq``: entries inserted by a
                later activation (``inserted_seq > visible_through_seq``) are
                ``MINTED_LATER``, not hits. Entries whose inserting seq is unknown
                (negative) are visible. None (the pipeline): every entry is visible.

        Returns:
            The lookup, checked in this order: ``ABSENT``, ``EXPIRED``,
            ``DIGEST_ONLY``, ``MINTED_LATER``, else ``HIT``. A ``HIT`` makes the entry
            the most recently used (``last_used_ms = now_ms``).
        """
        entry = self._entries.get(cache_key)
        if entry is None:
            return CacheLookup(LookupStatus.ABSENT)
        if _expired(entry, now_ms):
            return CacheLookup(LookupStatus.EXPIRED, entry)
        if entry.digest_only:
            return CacheLookup(LookupStatus.DIGEST_ONLY, entry)
        if visible_through_seq is not None and entry.inserted_seq > visible_through_seq:
            return CacheLookup(LookupStatus.MINTED_LATER, entry)
        entry.last_used_ms = now_ms
        entry.last_used_tick = self._next_tick()
        return CacheLookup(LookupStatus.HIT, entry)

    def insert(
        self,
        cache_key: str,
        fingerprint: RequestFingerprint,
        response: LlmResponse,
        *,
        model: str,
        provider: str,
        now_ms: int,
        seq: int,
        policy: CachePolicy,
    ) -> LlmCacheEntry:
        """Store ``response`` under ``cache_key``, replacing any entry there.

        The response is kept digest-only (no payload; its sha256 and size only) when
        ``policy.retain_payloads`` is False or its deterministic serialization is
        over ``policy.max_payload_bytes``. Then entries expired at ``now_ms`` are
        purged and, beyond ``policy.max_entries``, the least recently used are
        evicted (ties by cache key).

        Args:
            cache_key: The request's key.
            fingerprint: The request's fingerprint, kept to explain later misses.
            response: The provider's response.
            model: The requested model.
            provider: The provider's name.
            now_ms: The activation clock (the entry's insertion time).
            seq: The inserting activation's seq.
            policy: Payload retention, size limit, capacity and TTL.

        Returns:
            The stored entry (owned by the cache: read it, do not change it).
        """
        payload = response.SerializeToString(deterministic=True)
        digest_only = not policy.retain_payloads or len(payload) > policy.max_payload_bytes
        entry = LlmCacheEntry(
            cache_key=cache_key,
            digest_only=digest_only,
            response_sha256=hashlib.sha256(payload).digest(),
            response_size=len(payload),
            inserted_ms=now_ms,
            inserted_seq=seq,
            last_used_ms=now_ms,
            ttl_ms=policy.ttl_ms,
            model=model,
            provider=provider,
            fingerprint=fingerprint,
            last_used_tick=self._next_tick(),
        )
        if not digest_only:
            entry.response.CopyFrom(response)
        self._entries[cache_key] = entry
        self._purge_expired(now_ms)
        self._evict_beyond(policy.max_entries)
        return entry

    def _purge_expired(self, now_ms: int) -> None:
        for key in [key for key, entry in self._entries.items() if _expired(entry, now_ms)]:
            del self._entries[key]

    def _evict_beyond(self, max_entries: int) -> None:
        excess = len(self._entries) - max_entries
        if excess <= 0:
            return
        for entry in sorted(self._entries.values(), key=_recency_order)[:excess]:
            del self._entries[entry.cache_key]

    def nearest(self, fingerprint: RequestFingerprint) -> tuple[LlmCacheEntry, list[str]] | None:
        """The entry whose request differs from ``fingerprint`` in the fewest components.

        Entries without a fingerprint (migrated from v1) rank after every entry that
        has one; ties go to the most recently used, then the smaller cache key.

        Returns:
            ``(entry, fingerprint_differences(entry.fingerprint, fingerprint))``, or
            None if the cache is empty.
        """
        best: tuple[tuple[int, int, int, str], LlmCacheEntry, list[str]] | None = None
        for entry in self._entries.values():
            differences = fingerprint_differences(entry.fingerprint, fingerprint)
            unavailable = 0 if entry.fingerprint.key_format else 1
            rank = (unavailable, len(differences), -entry.last_used_tick, entry.cache_key)
            if best is None or rank < best[0]:
                best = (rank, entry, differences)
        return None if best is None else (best[1], best[2])

    def entries_by_recency(self) -> list[LlmCacheEntry]:
        """The entries, most recently used first (LRU rank 1 is index 0)."""
        return sorted(self._entries.values(), key=lambda e: (-e.last_used_tick, e.cache_key))
