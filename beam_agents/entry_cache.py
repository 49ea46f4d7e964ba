"""What the replay cache and the tool cache share: a keyed, bounded body of entries.

A key's model responses (``llm_cache``, ``beam_agents.llm_cache.ReplayCache``) and
its recorded tool results (``tool_cache``, ``beam_agents.tool_cache.ToolCache``)
are both a protobuf body ``{repeated entries; int64 tick}`` whose entries carry a
``cache_key`` and the same bookkeeping fields (``inserted_ms``, ``inserted_seq``,
``ttl_ms``, ``last_used_ms``, ``last_used_tick``, ``digest_only``). ``EntryCache``
is that body in memory: one parse to load, one serialization to dump, LRU by a
monotonic tick, TTL judged on the activation clock, copy-on-write copies. The two
caches differ only in what an entry holds and how one is inserted.

Time is the *activation clock* passed in as ``now_ms`` (the triggering envelope's
event time), never the wall clock: replay takes that clock from the trace, so an
entry that was live when the activation ran is live when it is replayed. Recency
is a monotonic tick stored in the body, not a time, so LRU order is exact even
when many uses share one ``now_ms``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from google.protobuf.unknown_fields import UnknownFieldSet

from beam_agents.errors import CorruptBlobError


class LookupStatus(enum.Enum):
    """The outcome of a cache lookup."""

    HIT = "hit"
    """Live, with its payload, visible to the caller: serve it."""
    ABSENT = "absent"
    """No entry under this key."""
    EXPIRED = "expired"
    """An entry whose TTL has run out at the activation clock."""
    DIGEST_ONLY = "digest_only"
    """An entry that kept only the payload's digest: it cannot be served."""
    MINTED_LATER = "minted_later"
    """Replay only: the entry was inserted by an activation after the target, so it is
    not the payload the target consumed."""
    AMBIGUOUS = "ambiguous"
    """Tool cache only: the activation that recorded the entry got two different results
    for the same call, so replay cannot tell which one each call received."""


class CacheEntry(Protocol):
    """The bookkeeping fields every cache entry message has (``LlmCacheEntry``, ``ToolCacheEntry``)."""

    cache_key: str
    digest_only: bool
    inserted_ms: int
    inserted_seq: int
    last_used_ms: int
    ttl_ms: int
    last_used_tick: int


EntryT = TypeVar("EntryT", bound=CacheEntry)
CacheT = TypeVar("CacheT", bound="EntryCache[Any]")


def expired(entry: CacheEntry, now_ms: int) -> bool:
    """True if ``entry``'s TTL has run out at the activation clock ``now_ms``."""
    return now_ms >= entry.inserted_ms + entry.ttl_ms


def entry_status(
    entry: CacheEntry, *, now_ms: int, visible_through_seq: int | None
) -> LookupStatus:
    """What a lookup of ``entry`` at ``now_ms`` finds, without using it (no LRU touch).

    Checked in this order: ``EXPIRED``, ``DIGEST_ONLY``, ``MINTED_LATER``, else ``HIT``.
    The lookups and replay's views of the caches both decide through this function, so
    a cache table can never call an entry servable that a lookup would refuse.
    """
    if expired(entry, now_ms):
        return LookupStatus.EXPIRED
    if entry.digest_only:
        return LookupStatus.DIGEST_ONLY
    if visible_through_seq is not None and entry.inserted_seq > visible_through_seq:
        return LookupStatus.MINTED_LATER
    return LookupStatus.HIT


def _recency_order(entry: CacheEntry) -> tuple[int, str]:
    # Least recent first; equal ticks (only possible in hand-made bodies) fall back
    # to the key so that eviction never depends on dict order. Evictions run on a
    # private body only (after _own_body()), where no use is kept aside.
    return (entry.last_used_tick, entry.cache_key)


def _by_cache_key(entry: CacheEntry) -> str:
    return entry.cache_key


class EntryCache(Generic[EntryT]):
    """A cache body in memory. Deterministic: same operations, same ``body_bytes()``.

    The cache *is* a body message (``_body``, usually the body parsed from the
    cell) plus ``_entries``, an index from cache key to the entry inside
    ``_body.entries``. Entries are never unpacked into separate copies: loading a
    blob is one parse and one pass over the keys, dumping it is one serialization
    (``body_bytes``), and a hit changes its entry where it lies.

    ``copy()`` is copy-on-write: the two caches share one body until either changes
    it, and that one first takes a private copy (``_own_body``). So an activation
    that never changes its cache never copies it. A hit is not such a change: while
    the body is shared, the recency a hit gives its entry (``last_used_ms``,
    ``last_used_tick``, the body's tick) is kept aside in ``_touched`` and
    ``_tick``, and written into the body when the cache takes its private copy
    (before any other change, and before its body is read out). So an activation
    whose cache only serves hits copies no body unless its cells are dumped: replay
    of a key with a large cache holds the body once (issue 14).

    Invariants (``body_bytes`` and ``to_body`` rely on them; every method keeps them):

    1. ``_body.entries`` holds exactly the entries indexed by ``_entries`` (the same
       objects), one per key.
    2. ``_body.tick`` is the recency tick: no entry's ``last_used_tick`` exceeds it.
    3. ``_body`` carries no field of its own that this code does not know (its
       entries may): to_body never wrote such fields.
    4. If ``_sorted``, ``_body.entries`` are in cache-key order.
    5. If ``_shared``, another cache may hold this ``_body`` and ``_entries``:
       neither is changed before ``_own_body()`` replaced them with private copies.
    6. ``_touched`` (cache key -> ``(last_used_ms, last_used_tick)``) and ``_tick``
       (the body's tick) are this cache's uses of a shared body, newer than what the
       body holds; ``_touched`` is None when there are none (always unless
       ``_shared``), and ``_tick`` is then unset. Recency is read through
       ``_used_tick``, and ``_own_body()`` writes them into the private copy.

    Subclasses set ``BODY`` (the body message class) and ``KIND`` (the blob kind,
    for errors) and add their own ``insert``.
    """

    __slots__ = ("_body", "_entries", "_shared", "_sorted", "_tick", "_touched")

    BODY: ClassVar[Callable[..., Any]]
    """The body message class (``LlmCacheBody``, ``ToolCacheBody``)."""
    KIND: ClassVar[str]
    """The blob kind, as errors name it."""

    def __init__(self) -> None:
        """An empty cache; see also ``empty()`` and ``from_body()``."""
        self._body: Any = self.BODY()
        self._entries: dict[str, EntryT] = {}
        self._shared = False
        self._sorted = True
        self._touched: dict[str, tuple[int, int]] | None = None
        self._tick: int

    @classmethod
    def empty(cls: type[CacheT]) -> CacheT:
        """A cache with no entries."""
        return cls()

    @classmethod
    def from_body(cls: type[CacheT], body: Any, *, copy: bool = True) -> CacheT:
        """The cache a body (current layout) holds.

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
            body = cls.BODY(entries=body.entries, tick=body.tick)
        elif copy:
            own = cls.BODY()
            own.CopyFrom(body)
            body = own
        entries: dict[str, Any] = {}
        in_key_order = True
        previous_key = ""
        newest_use: int | None = None
        for entry in body.entries:
            key = entry.cache_key
            if not key:
                raise CorruptBlobError(cls.KIND, "an entry has an empty cache_key")
            if key in entries:
                raise CorruptBlobError(cls.KIND, f"two entries under cache key {key}")
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

    @classmethod
    def from_body_bytes(cls: type[CacheT], data: bytes) -> CacheT:
        """The cache ``body_bytes()`` serialized (how a cache is unpickled)."""
        return cls.from_body(cls.BODY.FromString(data), copy=False)  # type: ignore[attr-defined]

    def to_body(self) -> Any:
        """The body of this cache: entries ordered by cache key, so equal caches give equal bytes.

        The body holds copies: changing it does not change the cache.
        """
        body = self.BODY()
        body.CopyFrom(self._sorted_body())
        return body

    def body_bytes(self) -> bytes:
        """``to_body().SerializeToString(deterministic=True)``, without copying any entry."""
        data: bytes = self._sorted_body().SerializeToString(deterministic=True)
        return data

    def copy(self: CacheT) -> CacheT:
        """An independent copy (for a caller that must keep the original untouched).

        Copy-on-write: the copy shares this cache's body until either of them
        changes, so copying costs nothing whatever the number of entries.
        """
        twin = object.__new__(type(self))  # no empty body built just to be replaced
        twin._body = self._body
        twin._entries = self._entries
        twin._sorted = self._sorted
        twin._touched = None
        if self._touched is not None:
            twin._touched = dict(self._touched)
            twin._tick = self._tick
        twin._shared = self._shared = True
        return twin

    def __reduce__(self) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
        # Pickle and copy.copy/deepcopy go through the serialized body: the index must
        # point into the body it indexes, which copying the two separately would break.
        return (type(self).from_body_bytes, (self.body_bytes(),))

    def _own_body(self) -> None:
        """Make ``_body`` and ``_entries`` this cache's own; call before any change.

        The uses kept aside while the body was shared (``_touched``, ``_tick``) are
        written into the private copy: it is then what the in-place hits would have made.
        """
        if self._shared:
            body = self.BODY()
            body.CopyFrom(self._body)
            self._body = body
            self._entries = entries = {entry.cache_key: entry for entry in body.entries}
            self._shared = False
            if self._touched is not None:
                for key, (used_ms, used_tick) in self._touched.items():
                    entry = entries[key]
                    entry.last_used_ms = used_ms
                    entry.last_used_tick = used_tick
                body.tick = self._tick
                self._touched = None

    def _used_tick(self, entry: CacheEntry) -> int:
        """``entry``'s recency tick, counting this cache's uses kept aside (``_touched``)."""
        touched = self._touched.get(entry.cache_key) if self._touched is not None else None
        return entry.last_used_tick if touched is None else touched[1]

    def _sorted_body(self) -> Any:
        """``_body`` with its entries in cache-key order (sorting it first if needed)."""
        if self._touched is not None:
            self._own_body()  # the uses kept aside belong in the body
        if not self._sorted:
            self._own_body()  # reordering is a change like any other
            self._body.entries.sort(key=_by_cache_key)
            self._sorted = True
        return self._body

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, cache_key: object) -> bool:
        return cache_key in self._entries

    def get(self, cache_key: str) -> EntryT | None:
        """The entry under ``cache_key`` whatever its state, without touching its recency.

        The entry is owned by the cache (and may be shared with its copies): read
        it, do not change it. Its ``last_used_ms`` and ``last_used_tick`` may predate
        this cache's own hits while the body is shared (they are kept aside until the
        body is copied); ``entries_by_recency`` and the dumped body count them.
        """
        return self._entries.get(cache_key)

    def _next_tick(self) -> int:
        # Only after _own_body(): the tick lives in the body.
        self._body.tick += 1
        tick: int = self._body.tick
        return tick

    def _touch(self, entry: EntryT, now_ms: int) -> None:
        """Make ``entry`` (this cache's) the most recently used, at ``now_ms``.

        On a shared body the use is kept aside (``_touched``, ``_tick``) instead of
        copying the whole body for two integers; ``_own_body()`` writes it in later.
        """
        if self._shared:
            if self._touched is None:
                self._touched = {}
                self._tick = self._body.tick
            self._tick += 1
            self._touched[entry.cache_key] = (now_ms, self._tick)
            return
        entry.last_used_ms = now_ms
        entry.last_used_tick = self._next_tick()

    def _find(
        self, cache_key: str, *, now_ms: int, visible_through_seq: int | None
    ) -> tuple[LookupStatus, EntryT | None]:
        """Look up ``cache_key`` at activation clock ``now_ms`` (see ``ReplayCache.lookup``).

        Checked in this order: ``ABSENT``, ``EXPIRED``, ``DIGEST_ONLY``,
        ``MINTED_LATER``, else ``HIT``. A ``HIT`` makes the entry the most recently
        used (``last_used_ms = now_ms``).
        """
        entry = self._entries.get(cache_key)
        if entry is None:
            return LookupStatus.ABSENT, None
        status = entry_status(entry, now_ms=now_ms, visible_through_seq=visible_through_seq)
        if status is not LookupStatus.HIT:
            return status, entry
        self._touch(entry, now_ms)
        return LookupStatus.HIT, entry

    def _add(self, cache_key: str, **fields: Any) -> EntryT:
        """Append a new entry under ``cache_key`` (replacing any there) as the most recently used.

        Call ``_own_body()`` first. The caller then purges and evicts.
        """
        if cache_key in self._entries:
            self._delete({cache_key})  # the replaced entry leaves the body unchanged
        stored = self._body.entries
        if self._sorted and len(stored) and stored[-1].cache_key > cache_key:
            self._sorted = False  # appended out of key order: sorted when dumped
        entry: EntryT = stored.add(cache_key=cache_key, last_used_tick=self._next_tick(), **fields)
        self._entries[cache_key] = entry
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
        gone = {key for key, entry in self._entries.items() if expired(entry, now_ms)}
        if gone:
            self._delete(gone)

    def _evict_beyond(self, max_entries: int) -> None:
        excess = len(self._entries) - max_entries
        if excess <= 0:
            return
        by_recency = sorted(self._entries.values(), key=_recency_order)
        self._delete({entry.cache_key for entry in by_recency[:excess]})

    def _evict_least_recent(self) -> None:
        """Evict the least recently used entry (ties by cache key)."""
        if self._entries:
            oldest = min(self._entries.values(), key=_recency_order)
            self._delete({oldest.cache_key})

    def entries_by_recency(self) -> list[EntryT]:
        """The entries, most recently used first (LRU rank 1 is index 0)."""
        return sorted(self._entries.values(), key=lambda e: (-self._used_tick(e), e.cache_key))
