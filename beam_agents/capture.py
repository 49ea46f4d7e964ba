"""``ValueCapture``: the plaintext behind an activation's digests, kept only when replay asks.

A trace carries digests, never payloads. Replay re-runs the activation and wants
to show the values those digests are of: the requests it built, the responses
the cache served, tool arguments and results, intent arguments, the Suspend
state, the outputs, the committed memory. ``run_activation(..., replay=ReplayHooks(capture=...))``
hands a ``ValueCapture`` to the context, which appends, at each place a digest
is computed, the value it was computed from (no copy of anything not already
built; the pipeline passes no capture and pays one ``is None`` test per event).

It also records how agent code used working memory, in order: replay starts
from a snapshot's memory, which is a *post*-image, so a key the re-run reads
before writing it holds what the snapshot holds, which is what the original read
only if no activation from the target's seq on wrote that key (the memory blob's
provenance says which did, docs/replay.md §4). For each key, the first read that
came before the re-run's own first write of it is kept, with the position in the
trace it came before; so is the first read of the memory as a whole (iterating
it, ``len``, ``to_dict``, ``repr``), with the keys written before it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, SupportsIndex

from beam_agents.memory import JsonMemory

__all__ = ["CaptureKind", "CapturedValue", "MemoryScan", "ValueCapture"]


class CaptureKind(StrEnum):
    """What a captured value is: which digest of its trace event it was computed from."""

    REQUEST = "request"
    """The ``LlmRequest`` an ``LLM_CALL`` sent (its cache key and component digests)."""
    RESPONSE = "response"
    """The ``LlmResponse`` it was served (``response_sha256``)."""
    ARGS = "args"
    """A tool call's arguments (``args_sha256``)."""
    RESULT = "result"
    """A tool call's result (``result_sha256``)."""
    ERROR = "error"
    """The exception a tool call or the activation raised (``error.type``)."""
    INTENT_ARGS = "intent_args"
    """A staged intent's canonical arguments (``INTENT_STAGED``'s ``args_sha256``)."""
    SUSPEND_STATE = "suspend_state"
    """The ``Suspend(state=...)`` the activation ended with (``state_sha256``)."""
    OUTPUTS = "outputs"
    """The outputs of ``Done`` (``ACTIVATION_END``'s ``outputs.sha256``)."""
    MEMORY = "memory"
    """The committed memory's canonical JSON (``memory_sha256``)."""
    MEMORY_WRITES = "memory_writes"
    """The activation's ``MemoryWrites`` (``memory_writes_sha256``)."""


@dataclass(frozen=True, slots=True)
class CapturedValue:
    """One value behind a digest of the trace event at ``event_index``."""

    event_index: int
    what: CaptureKind
    value: Any
    """As the activation held it (an ``LlmRequest``, a JSON value, bytes, an exception...)."""


@dataclass
class ValueCapture:
    """What one activation's re-run computed its digests from (see the module docstring)."""

    values: list[CapturedValue] = field(default_factory=list)
    memory_reads: set[str] = field(default_factory=set)
    """Top-level memory keys agent code read (``*`` when it iterated the whole memory)."""
    memory_writes: set[str] = field(default_factory=set)
    """Top-level memory keys agent code assigned or deleted."""
    memory_reads_before_write: dict[str, int] = field(default_factory=dict)
    """Each key agent code read before it wrote that key itself (or without writing it),
    with the position of the trace event that came next (the first such read)."""
    memory_scan: MemoryScan | None = None
    """The first read of the memory as a whole (its set of keys), if agent code made one."""

    def add(self, event_index: int, what: CaptureKind, value: Any) -> None:
        self.values.append(CapturedValue(event_index, what, value))

    def memory(self, initial: dict[str, Any], *, position: Callable[[], int]) -> JsonMemory:
        """The working memory agent code gets: a ``JsonMemory`` that notes reads and writes.

        Args:
            initial: The memory the activation starts from.
            position: How many trace events the activation has recorded so far.
        """
        return _TrackedMemory(initial, self, position)


@dataclass(frozen=True, slots=True)
class MemoryScan:
    """Agent code read the memory as a whole: iterated it, took its ``len``, its ``repr``,
    or the underlying dict (``to_dict``)."""

    event_index: int
    """The position of the trace event that came next."""
    written_before: frozenset[str]
    """The keys agent code had written (set or deleted) before it."""


class _TrackedMemory(JsonMemory):
    """A ``JsonMemory`` noting the top-level keys read and written into a ``ValueCapture``.

    Every way Python has to read a mapping's contents goes through a method noted here: the
    mapping protocol (``Mapping``'s mixins and ``==`` use ``__getitem__``, ``__iter__``,
    ``__len__``), ``repr``/``str``/``format``, and the copy and pickle protocols
    (``__copy__``, ``__deepcopy__``, ``__reduce__``, ``__reduce_ex__``, ``__getstate__``),
    which read the memory as a whole and hand back a plain ``JsonMemory`` copy (whose own
    reads are then not the memory's; its writes are not the activation's). The slots leave
    no ``__dict__`` for ``vars()``. What is left is reading the private attributes, or
    ``gc.get_referents``: interpreter internals, not a way to read a mapping
    (docs/agent-api.md).
    """

    __slots__ = ("_capture", "_position")

    def __init__(
        self, initial: dict[str, Any], capture: ValueCapture, position: Callable[[], int]
    ) -> None:
        super().__init__(initial)
        self._capture = capture
        self._position = position

    def _read(self, key: str) -> None:
        capture = self._capture
        capture.memory_reads.add(key)
        if key not in capture.memory_writes and key not in capture.memory_reads_before_write:
            capture.memory_reads_before_write[key] = self._position()

    def _scan(self) -> None:
        capture = self._capture
        capture.memory_reads.add("*")
        if capture.memory_scan is None:
            capture.memory_scan = MemoryScan(self._position(), frozenset(capture.memory_writes))

    def __getitem__(self, key: str) -> Any:
        self._read(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._read(key)
        return super().__contains__(key)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._capture.memory_writes.add(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._capture.memory_writes.add(key)

    def __iter__(self) -> Iterator[str]:
        self._scan()
        return super().__iter__()

    def __len__(self) -> int:
        self._scan()
        return super().__len__()

    def to_dict(self) -> dict[str, Any]:
        self._scan()
        return super().to_dict()

    def __repr__(self) -> str:
        self._scan()
        return super().__repr__()

    # The copy and pickle protocols: object's own read the slots (the whole dict, and this
    # capture) untracked, and a deep copy's reads then went to a copy of the capture.
    def __copy__(self) -> JsonMemory:
        self._scan()
        return JsonMemory(dict(self._data))

    def __deepcopy__(self, memo: dict[int, Any]) -> JsonMemory:
        self._scan()
        return JsonMemory(copy.deepcopy(self._data, memo))

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return self.__reduce__()

    def __reduce__(self) -> tuple[Any, ...]:
        self._scan()
        return (JsonMemory, (dict(self._data),))

    def __getstate__(self) -> dict[str, Any]:
        self._scan()
        return dict(self._data)
