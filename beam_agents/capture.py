"""``ValueCapture``: the plaintext behind an activation's digests, kept only when replay asks.

A trace carries digests, never payloads. Replay re-runs the activation and wants
to show the values those digests are of: the requests it built, the responses
the cache served, tool arguments and results, intent arguments, the Suspend
state, the outputs, the committed memory. ``run_activation(..., replay=ReplayHooks(capture=...))``
hands a ``ValueCapture`` to the context, which appends, at each place a digest
is computed, the value it was computed from (no copy of anything not already
built; the pipeline passes no capture and pays one ``is None`` test per event).

It also records which top-level memory keys agent code read and wrote: replay
starts from a snapshot's memory, which is a *post*-image, so a memory write
that depends on a key the activation itself writes cannot be compared with the
traced memory digest (docs/replay.md §4).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from beam_agents.memory import JsonMemory

__all__ = ["CaptureKind", "CapturedValue", "ValueCapture"]


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

    def add(self, event_index: int, what: CaptureKind, value: Any) -> None:
        self.values.append(CapturedValue(event_index, what, value))

    def memory(self, initial: dict[str, Any]) -> JsonMemory:
        """The working memory agent code gets: a ``JsonMemory`` that notes reads and writes."""
        return _TrackedMemory(initial, self)


class _TrackedMemory(JsonMemory):
    """A ``JsonMemory`` noting the top-level keys read and written into a ``ValueCapture``."""

    def __init__(self, initial: dict[str, Any], capture: ValueCapture) -> None:
        super().__init__(initial)
        self._capture = capture

    def __getitem__(self, key: str) -> Any:
        self._capture.memory_reads.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._capture.memory_reads.add(key)
        return super().__contains__(key)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._capture.memory_writes.add(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._capture.memory_writes.add(key)

    def __iter__(self) -> Iterator[str]:
        self._capture.memory_reads.add("*")
        return super().__iter__()

    def to_dict(self) -> dict[str, Any]:
        self._capture.memory_reads.add("*")
        return super().to_dict()
