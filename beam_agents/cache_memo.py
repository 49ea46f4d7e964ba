"""The two cache blobs as loaded, remembered by their cells' exact bytes (issue 29).

Loading a key's state parses its ``llm_cache`` blob (and its ``tool_cache`` blob, if it
has one) on every activation, and the commit serializes it again: most of what a
cache-hit activation costs in state is that round trip. A ``CacheMemo`` remembers, for a
cell's exact bytes, the cache those bytes load to, so the next load of the same bytes
hands out a copy-on-write copy of it instead of parsing them again. It is filled two
ways:

- ``load``: a cell loaded once is remembered under its bytes (a key whose activation
  did not change its cache loads it again for nothing);
- ``remember``: a commit's cells were *dumped from* its state, so the cache the commit
  holds is the cache its cell's bytes load to (the dump serialized that very body, owned
  and sorted, and nothing changes it afterwards). The key's next activation, which reads
  exactly those bytes back, does not parse them.

Why this is safe, also when Beam retries a bundle or a worker restarts: the memo is
keyed by the bytes, never by the key. Every activation still reads its cells from the
runner, and only bytes equal to remembered ones are served from memory, with what
loading *those bytes* gives. A retried bundle reads the cells as the runner committed
them before it, which are not the failed attempt's bytes (or, if they are equal, load
to the same cache); a restarted worker starts with an empty memo. Nothing of a key's
state is ever taken from memory on the strength of the key alone.

What is not remembered: an empty cell (nothing to parse), a cell of
``blobs.LARGE_CELL_BYTES`` or more (loaded in place, issue 14: holding it again would
double what a large cache costs), and a cell that needed a migration to load (the
migration steps are reported by each load, and the next commit rewrites the cell at
the current version anyway). The memory, continuation, pending and resume-history
blobs are always loaded: they are small or empty on a cache-hit activation, and they
are handed to code that must get fresh objects.

The memo holds at most ``budget_bytes`` of cell bytes (least recently used dropped),
beside the caches they load to. It serves one ``KeyStep`` (one thread at a time, as a
DoFn instance processes one bundle at a time).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from beam_agents.blobs import LARGE_CELL_BYTES
from beam_agents.entry_cache import EntryCache

DEFAULT_BUDGET_BYTES = 32 << 20
"""How many bytes of cells a memo remembers by default (32 MiB; about 80,000 one-entry
replay caches)."""

CacheT = TypeVar("CacheT", bound=EntryCache[Any])


class CacheMemo:
    """Cache cells' bytes -> the cache they load to (see the module docstring)."""

    __slots__ = ("_budget", "_by_cell", "_held")

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self._budget = budget_bytes
        self._by_cell: OrderedDict[tuple[str, bytes], EntryCache[Any]] = OrderedDict()
        self._held = 0

    def load(
        self, kind: str, raw: bytes, loader: Callable[[bytes], tuple[CacheT, list[str]]]
    ) -> tuple[CacheT, list[str]]:
        """``loader(raw)``, or a copy of the cache remembered for these very bytes."""
        if not raw or len(raw) >= LARGE_CELL_BYTES:
            return loader(raw)
        found = self._by_cell.get((kind, raw))
        if found is not None:
            self._by_cell.move_to_end((kind, raw))
            # Copy-on-write: the caller may change its copy, never the remembered cache.
            return found.copy(), []  # type: ignore[return-value]
        cache, steps = loader(raw)
        if not steps:
            self._keep(kind, raw, cache.copy())
        return cache, steps

    def remember(self, kind: str, raw: bytes, cache: EntryCache[Any]) -> None:
        """Note that ``raw`` is ``cache`` dumped (a commit's cell and the cache it holds).

        The caller guarantees that ``raw`` was serialized from ``cache``'s body and that
        the cache has not changed since; a copy is kept, so later changes to ``cache``
        through its owner do not reach the memo.
        """
        if raw and len(raw) < LARGE_CELL_BYTES:
            self._keep(kind, raw, cache.copy())

    def _keep(self, kind: str, raw: bytes, cache: EntryCache[Any]) -> None:
        key = (kind, raw)
        if key in self._by_cell:
            self._by_cell.move_to_end(key)
            return
        self._by_cell[key] = cache
        self._held += len(raw)
        while self._held > self._budget and self._by_cell:
            (_, dropped), _ = self._by_cell.popitem(last=False)
            self._held -= len(dropped)

    def __len__(self) -> int:
        return len(self._by_cell)


__all__ = ["DEFAULT_BUDGET_BYTES", "CacheMemo"]
