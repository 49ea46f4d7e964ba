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
callers work on a fresh ``ReplayCache`` per activation (``copy()``, which is
copy-on-write and costs nothing until the copy changes) and discard it if the
activation fails, which is what makes a failed activation commit nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from beam_agents._protos import LlmCacheBody, LlmCacheEntry, LlmResponse, RequestFingerprint
from beam_agents.cache_key import fingerprint_differences
from beam_agents.entry_cache import EntryCache, LookupStatus
from beam_agents.errors import ConfigError

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


class ReplayCache(EntryCache[LlmCacheEntry]):
    """A key's replay cache, in memory: an ``LlmCacheBody`` (see ``EntryCache``).

    Deterministic: same operations, same ``to_body()``. ``copy()`` is copy-on-write.
    """

    __slots__ = ()

    BODY = LlmCacheBody
    KIND = "llm_cache"

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
            the most recently used (``last_used_ms = now_ms``). The entry is owned by
            the cache: read it, do not change it.
        """
        status, entry = self._find(
            cache_key, now_ms=now_ms, visible_through_seq=visible_through_seq
        )
        return CacheLookup(status, entry)

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
        self._own_body()
        entry = self._add(
            cache_key,
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
        )
        if not digest_only:
            entry.response.CopyFrom(response)
        self._purge_expired(now_ms)
        self._evict_beyond(policy.max_entries)
        return entry

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
            rank = (unavailable, len(differences), -self._used_tick(entry), entry.cache_key)
            if best is None or rank < best[0]:
                best = (rank, entry, differences)
        return None if best is None else (best[1], best[2])


__all__ = [
    "DEFAULT_CACHE_POLICY",
    "CacheLookup",
    "CachePolicy",
    "LookupStatus",
    "ReplayCache",
    "response_digest",
]
