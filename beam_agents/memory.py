"""``JsonMemory``: an agent's working memory (``ctx.memory``), JSON values only.

Its own module so that ``context`` (which hands it to agent code) and ``capture``
(whose subclass notes the order of reads and writes for replay) both import it,
neither importing the other.

It notes which top-level keys agent code assigned or deleted, and which values it
was handed (those alone can change in place), so that ``run_activation`` can tell
the activation's write set (``memory_writes.MemoryWrites``) without comparing the
whole memory before and after.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from beam_agents import canonical_json
from beam_agents.errors import MemoryValueError
from beam_agents.memory_writes import MemoryWrites, memory_writes

__all__ = ["JsonMemory"]


class JsonMemory(MutableMapping[str, Any]):
    """Working memory: a mutable mapping that accepts JSON values only, checked at the write.

    Values nested inside a stored container can still be mutated in place; the
    whole memory is checked again when the activation commits.
    """

    # No instance ``__dict__``: ``vars(ctx.memory)`` read the underlying dict past every
    # read replay tracks (``capture._TrackedMemory``), and ``__class__`` cannot be set to
    # a class of another layout.
    __slots__ = ("_assigned", "_data", "_exposed", "_handed")

    def __init__(self, initial: dict[str, Any]) -> None:
        self._data = initial
        self._assigned: set[str] = set()
        self._handed: set[str] = set()
        self._exposed = False

    def __getitem__(self, key: str) -> Any:
        value = self._data[key]
        self._handed.add(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise MemoryValueError(f"[{key!r}]", f"key is a {type(key).__name__}, not a string")
        why = canonical_json.check_json_value(value, f"[{key!r}]")
        if why is not None:
            raise MemoryValueError(f"[{key!r}]", why)
        self._data[key] = value
        self._assigned.add(key)

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self._assigned.add(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def to_dict(self) -> dict[str, Any]:
        """The underlying dict itself: whatever agent code does to it is committed."""
        self._exposed = True
        return self._data

    def write_set(self, before: Mapping[str, Any]) -> MemoryWrites:
        """What agent code wrote so far, against ``before``, the memory it started from."""
        return memory_writes(
            before,
            self._data,
            assigned=self._assigned,
            read=self._handed,
            exposed=self._exposed,
        )

    def __repr__(self) -> str:
        return f"JsonMemory({self._data!r})"
