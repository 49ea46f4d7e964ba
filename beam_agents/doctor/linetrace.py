"""Which line a perturbation first changes: two runs traced line by line, compared.

When a replay under one condition differs from the control and no watched call
explains it (iterating a set, ``hash()`` of a string), the doctor re-runs that
activation under both with ``trace_lines`` on: every line agent code executes, with
a digest of each local variable as the line is reached, and every value a function
of agent code returns. ``first_difference`` walks the two recordings side by side;
the first entry that differs names the line that produced the difference (the line
just run in that frame), and the variables that differ.

Digests are of values as data: sets are sorted (a set's own order is not a
difference, what is built from it is), dicts keep their order, protobuf messages
are their deterministic bytes, other objects their class and attributes; nothing
that differs in every process (addresses, ids) is read.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from beam_agents.doctor.watch import AgentFiles

__all__ = ["Difference", "first_difference", "trace_lines"]

MAX_ENTRIES = 50_000
"""Entries one recording keeps (a loop in agent code stops being recorded past it)."""
_MAX_ITEMS = 100
_MAX_DEPTH = 4


def _data(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value if not isinstance(value, bytes) else ["bytes", value.hex()]
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__qualname__}>"
    serialize = getattr(value, "SerializeToString", None)
    if callable(serialize) and hasattr(value, "DESCRIPTOR"):
        try:
            return ["proto", type(value).__name__, serialize(deterministic=True).hex()]
        except Exception:
            return f"<{type(value).__name__}>"
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, *(_data(v, depth + 1) for v in list(value)[:_MAX_ITEMS])]
    if isinstance(value, (set, frozenset)):
        return ["set", *sorted(repr(_data(v, depth + 1)) for v in list(value)[:_MAX_ITEMS])]
    if isinstance(value, dict):
        return ["dict", *((repr(_data(k, depth + 1)), _data(v, depth + 1))
                          for k, v in list(value.items())[:_MAX_ITEMS])]  # fmt: skip
    module = type(value).__module__ or ""
    if module.startswith("beam_agents"):
        to_dict = getattr(value, "to_dict", None)  # ctx.memory
        return ["memory", _data(to_dict(), depth + 1)] if callable(to_dict) else (
            f"<{type(value).__qualname__}>"
        )
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and not callable(value):
        return [type(value).__qualname__, _data(attributes, depth + 1)]
    return f"<{type(value).__qualname__}>"


def _digest(value: Any) -> str:
    try:
        text = repr(_data(value))
    except Exception as exc:
        text = f"<{type(value).__name__}: {type(exc).__name__}>"
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]


class _Recorder:
    def __init__(self, files: AgentFiles) -> None:
        self.files = files
        self.entries: list[list[Any]] = []
        """``[kind, frame number, parent frame number, file, line, {name: digest}]``."""
        self.frames: dict[int, int] = {}
        self.lock = threading.Lock()

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event != "call" or frame.f_code.co_filename not in self.files:
            return None
        with self.lock:
            number = len(self.frames) + 1
            self.frames[id(frame)] = number
            parent = self.frames.get(id(frame.f_back), 0) if frame.f_back else 0
        self._add("call", number, parent, frame, {} if _in_comprehension(frame) else _locals(frame))
        return self.local

    def local(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        number = self.frames.get(id(frame), 0)
        if event == "line":
            # A comprehension is judged by what it makes (its return, each value a generator
            # yields), not by its loop variable: a set built from a set is the same set.
            values = {} if _in_comprehension(frame) else _locals(frame)
            self._add("line", number, 0, frame, values)
        elif event == "return":
            self._add("return", number, 0, frame, {"<returned>": _digest(arg)})
        return self.local

    def _add(self, kind: str, number: int, parent: int, frame: FrameType, values: dict[str, str]) -> None:
        with self.lock:
            if len(self.entries) < MAX_ENTRIES:
                self.entries.append(
                    [kind, number, parent, frame.f_code.co_filename, frame.f_lineno, values]
                )


def _in_comprehension(frame: FrameType) -> bool:
    return frame.f_code.co_name in ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")


def _locals(frame: FrameType) -> dict[str, str]:
    return {name: _digest(value) for name, value in list(frame.f_locals.items())}


@contextmanager
def trace_lines(files: AgentFiles) -> Iterator[list[list[Any]]]:
    """Record every line agent code runs in this process (every thread) while inside."""
    recorder = _Recorder(files)
    threading.settrace(recorder.trace)
    sys.settrace(recorder.trace)
    try:
        yield recorder.entries
    finally:
        sys.settrace(None)
        threading.settrace(None)


@dataclass(frozen=True)
class Difference:
    """Where two recordings first differ."""

    file: str
    line: int
    """The line that produced the difference."""
    names: tuple[str, ...]
    """The variables whose values differ (``<returned>``: a return value)."""
    how: str
    """``values`` (the same line, other values) or ``path`` (another line was run)."""


def first_difference(control: list[list[Any]], other: list[list[Any]]) -> Difference | None:
    """The line whose effect first differs between ``control`` and ``other`` (None: none)."""
    last_line: dict[int, list[Any]] = {}
    for mine, theirs in zip(control, other, strict=False):
        kind, number, parent, file, line, values = mine
        same_place = mine[:5] == theirs[:5]
        if same_place and values == theirs[5]:
            if kind == "line":
                last_line[number] = mine
            continue
        if same_place:
            names = tuple(sorted(n for n in values.keys() | theirs[5].keys()
                                 if values.get(n) != theirs[5].get(n)))  # fmt: skip
            # The values as this entry is reached were made by the line run before it.
            owner = parent if kind == "call" else number
            culprit = last_line.get(owner)
            if culprit is None:
                return Difference(file, line, names, "values")
            return Difference(culprit[3], culprit[4], names, "values")
        culprit = last_line.get(number) or last_line.get(theirs[1])
        if culprit is None:
            return Difference(file, line, (), "path")
        return Difference(culprit[3], culprit[4], (), "path")
    if len(control) != len(other):
        longer = control if len(control) > len(other) else other
        entry = longer[min(len(control), len(other)) - 1] if min(len(control), len(other)) else longer[0]
        return Difference(entry[3], entry[4], (), "path")
    return None
