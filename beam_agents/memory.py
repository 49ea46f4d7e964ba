"""``JsonMemory``: an agent's working memory (``ctx.memory``), JSON values only.

Its own module so that ``context`` (which hands it to agent code) and ``capture``
(whose subclass notes the keys read and written for replay) both import it,
neither importing the other.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from beam_agents import canonical_json
from beam_agents.errors import MemoryValueError

__all__ = ["JsonMemory"]


class JsonMemory(MutableMapping[str, Any]):
    """Working memory: a mutable mapping that accepts JSON values only, checked at the write.

    Values nested inside a stored container can still be mutated in place; the
    whole memory is checked again when the activation commits.
    """

    def __init__(self, initial: dict[str, Any]) -> None:
        self._data = initial

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise MemoryValueError(f"[{key!r}]", f"key is a {type(key).__name__}, not a string")
        why = canonical_json.check_json_value(value, f"[{key!r}]")
        if why is not None:
            raise MemoryValueError(f"[{key!r}]", why)
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def to_dict(self) -> dict[str, Any]:
        return self._data

    def __repr__(self) -> str:
        return f"JsonMemory({self._data!r})"
