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

import enum
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.unknown_fields import UnknownFieldSet

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


def _by_cache_key(entry: LlmCacheEntry) -> str:
    return entry.cache_key


class ReplayCache:
    """A key's replay cache, in memory. Deterministic: same operations, same ``to_body()``.

    The cache *is* an ``LlmCacheBody`` (``_body``, usually the body parsed from the
    cell) plus ``_entries``, an index from cache key to the entry inside
    ``_body.entries``. Entries are never unpacked into separate copies: loading a
    blob is one parse and one pass over the keys, dumping it is one serialization
    (``body_bytes``), and a hit changes its entry where it lies.

    ``copy()`` is copy-on-write: the two caches share one body until either changes
    it, and that one first takes a private copy (``_own_body``). So an activation
    that never changes its cache never copies it.

    Invariants (``body_bytes`` and ``to_body`` rely on them; every method keeps them):

    1. ``_body.entries`` holds exactly the entries indexed by ``_entries`` (the same
       objects), one per key.
    2. ``_body.tick`` is the recency tick: no entry's ``last_used_tick`` exceeds it.
    3. ``_body`` carries no field of its own that this code does not know (its
       entries may): to_body never wrote such fields.
    4. If ``_sorted``, ``_body.entries`` are in cache-key order.
    5. If ``_shared``, another cache may hold this ``_body`` and ``_entries``:
       neither is changed before ``_own_body()`` replaced them with private copies.
    """

    __slots__ = ("_body", "_entries", "_shared", "_sorted")

    def __init__(self) -> None:
        """An empty cache; see also ``empty()`` and ``from_body()``."""
        self._body = LlmCacheBody()
        self._entries: dict[str, LlmCacheEntry] = {}
        self._shared = False
        self._sorted = True

    @classmethod
    def empty(cls) -> ReplayCache:
        """A cache with no entries."""
        return cls()

    @classmethod
    def from_body(cls, body: LlmCacheBody, *, copy: bool = True) -> ReplayCache:
        """The cache an ``llm_cache`` body (current layout) holds.

        Args:
            body: The body.
            copy: False hands ``body`` over to the cache without copying it (for a
                body parsed just for this): the cache then reads and changes it in
                place, so the caller must not use it afterwards.

        Raises:
            CorruptBlobError: The body holds an entry without a key, or two entries
                under one key.
        """
        if len(UnknownFieldSet(body)):
            # Fields of the body itself that this code does not know: keep only the
            # entries (with everything they hold) and the tick, as to_body always did.
            body = LlmCacheBody(entries=body.entries, tick=body.tick)
        elif copy:
            own = LlmCacheBody()
            own.CopyFrom(body)
            body = own
        entries: dict[str, LlmCacheEntry] = {}
        in_key_order = True
        previous_key = ""
        newest_use: int | None = None
        for entry in body.entries:
            key = entry.cache_key
            if not key:
                raise CorruptBlobError("llm_cache", "an entry has an empty cache_key")
            if key in entries:
                raise CorruptBlobError("llm_cache", f"two entries under cache key {key}")
            if key < previous_key:
                in_key_order = False
            previous_key = key
            entries[key] = entry
            used = entry.last_used_tick
            if newest_use is None or used > newest_use:
                newest_use = used
        tick = max(body.tick, 0 if newest_use is None else newest_use)
        if body.tick != tick:
            body.tick = tick
        cache = cls()
        cache._body = body
        cache._entries = entries
        cache._sorted = in_key_order
        return cache

    def to_body(self) -> LlmCacheBody:
        """The body of this cache: entries ordered by cache key, so equal caches give equal bytes.

        The body holds copies: changing it does not change the cache.
        """
        body = LlmCacheBody()
        body.CopyFrom(self._sorted_body())
        return body

    def body_bytes(self) -> bytes:
        """``to_body().SerializeToString(deterministic=True)``, without copying any entry."""
        return self._sorted_body().SerializeToString(deterministic=True)

    def copy(self) -> ReplayCache:
        """An independent copy (for a caller that must keep the original untouched).

        Copy-on-write: the copy shares this cache's body until either of them
        changes, so copying costs nothing whatever the number of entries.
        """
        twin = ReplayCache()
        twin._body = self._body
        twin._entries = self._entries
        twin._sorted = self._sorted
        twin._shared = self._shared = True
        return twin

    def __reduce__(self) -> tuple[Callable[[bytes], ReplayCache], tuple[bytes]]:
        # Pickle and copy.copy/deepcopy go through the serialized body: the index must
        # point into the body it indexes, which copying the two separately would break.
        return (_cache_from_body_bytes, (self.body_bytes(),))

    def _own_body(self) -> None:
        """Make ``_body`` and ``_entries`` this cache's own; call before any change."""
        if self._shared:
            body = LlmCacheBody()
            body.CopyFrom(self._body)
            self._body = body
            self._entries = {entry.cache_key: entry for entry in body.entries}
            self._shared = False

    def _sorted_body(self) -> LlmCacheBody:
        """``_body`` with its entries in cache-key order (sorting it first if needed)."""
        if not self._sorted:
            self._own_body()  # reordering is a change like any other
            self._body.entries.sort(key=_by_cache_key)
            self._sorted = True
        return self._body

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cache_key: object) -> bool:
        return cache_key in self._entries

    def get(self, cache_key: str) -> LlmCacheEntry | None:
        """The entry under ``cache_key`` whatever its state, without touching its recency.

        The entry is owned by the cache (and may be shared with its copies): read
        it, do not change it.
        """
        return self._entries.get(cache_key)

    def _next_tick(self) -> int:
        # Only after _own_body(): the tick lives in the body.
        self._body.tick += 1
        return self._body.tick

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
        entry = self._entries.get(cache_key)
        if entry is None:
            return CacheLookup(LookupStatus.ABSENT)
        if _expired(entry, now_ms):
            return CacheLookup(LookupStatus.EXPIRED, entry)
        if entry.digest_only:
            return CacheLookup(LookupStatus.DIGEST_ONLY, entry)
        if visible_through_seq is not None and entry.inserted_seq > visible_through_seq:
            return CacheLookup(LookupStatus.MINTED_LATER, entry)
        self._own_body()
        entry = self._entries[cache_key]  # the same key's entry in the (now) private body
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
        self._own_body()
        if cache_key in self._entries:
            self._delete({cache_key})  # the replaced entry leaves the body unchanged
        stored = self._body.entries
        if self._sorted and len(stored) and stored[-1].cache_key > cache_key:
            self._sorted = False  # appended out of key order: sorted when dumped
        entry = stored.add(
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

    def _delete(self, keys: set[str]) -> None:
        """Remove the entries under ``keys`` (all present) from the body and the index.

        The remaining entries keep their order. A removed entry object stays readable
        by whoever still holds it, unchanged.
        """
        stored = self._body.entries
        for index in range(len(stored) - 1, -1, -1):
            if stored[index].cache_key in keys:
                del stored[index]
        for key in keys:
            del self._entries[key]

    def _purge_expired(self, now_ms: int) -> None:
        expired = {key for key, entry in self._entries.items() if _expired(entry, now_ms)}
        if expired:
            self._delete(expired)

    def _evict_beyond(self, max_entries: int) -> None:
        excess = len(self._entries) - max_entries
        if excess <= 0:
            return
        by_recency = sorted(self._entries.values(), key=_recency_order)
        self._delete({entry.cache_key for entry in by_recency[:excess]})

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


def _cache_from_body_bytes(data: bytes) -> ReplayCache:
    """The cache ``ReplayCache.body_bytes()`` serialized (how a cache is unpickled)."""
    return ReplayCache.from_body(LlmCacheBody.FromString(data), copy=False)
