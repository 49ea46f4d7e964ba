"""Module state: what agent modules and the agent object hold between activations.

``StateProbe`` takes a digest of every value agent code keeps outside ``ctx``: the
globals of each agent module (not its functions, classes or imported modules), the
plain class attributes of the classes they define, and the attributes of the agent
and registry objects. The pipeline's run compares the digests around each input: a
value that changed was written by an activation and is carried into the next one,
which a replay (one activation in a fresh process) never sees. ``where_written``
finds the statement that writes it in the module's source.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import marshal
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from beam_agents.doctor.watch import AgentFiles

__all__ = ["StateProbe", "Write", "where_written"]

_MAX_ITEMS = 200
_MAX_DEPTH = 5
_MUTATORS = frozenset(
    {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove",
     "discard", "clear", "appendleft", "extendleft", "__setitem__", "sort", "reverse"}
)  # fmt: skip


def _shape(value: Any, depth: int, seen: set[int]) -> Any:
    """A structure of plain data that changes when ``value`` does (order-insensitive for sets)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if depth > _MAX_DEPTH or id(value) in seen:
        return f"<{type(value).__name__}>"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)):
        return f"<{type(value).__name__}>"
    seen = seen | {id(value)}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "deque":
        items = list(value)
        return [len(items), *(_shape(v, depth + 1, seen) for v in items[:_MAX_ITEMS])]
    if isinstance(value, (set, frozenset)):
        return sorted(repr(_shape(v, depth + 1, seen)) for v in list(value)[:_MAX_ITEMS])
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: repr(kv[0]))[:_MAX_ITEMS]
        return [len(value), *((repr(k), _shape(v, depth + 1, seen)) for k, v in items)]
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return [type(value).__qualname__, _shape(attributes, depth + 1, seen)]
    return f"<{type(value).__name__}>"


def _digest(value: Any) -> str:
    # Plain data (what most module values are: tables, strings, numbers, their containers)
    # is marshalled in C, some 20 times faster than walking it; anything else is walked.
    # Both only ever compare to a digest of the same value in the same process.
    try:
        # Version 2: no back-references, so equal values give equal bytes whatever they share.
        data = b"m" + marshal.dumps(value, 2)
    except ValueError:  # an object marshal does not know, somewhere inside
        try:
            shape = _shape(value, 0, set())
        except Exception as exc:  # a value whose iteration fails: its type names it
            shape = f"<{type(value).__name__}: {type(exc).__name__}>"
        data = b"s" + repr(shape).encode("utf-8", "backslashreplace")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Write:
    """Where a carried value is written: the module's file and the statement's line."""

    module: str
    name: str
    """``_SEEN``, ``Agent.counter`` (a class attribute) or ``AGENT.turns`` (the agent object)."""
    file: str
    line: int
    defined: int
    """The line the value is first bound at (0 when unknown)."""


class StateProbe:
    """Digests of the state agent code keeps outside ``ctx`` (see the module docstring)."""

    def __init__(self, files: AgentFiles, objects: dict[str, Any]) -> None:
        self.files = files
        self.objects = objects
        """``{"AGENT": agent, "TOOLS": registry}``: named by their module:ATTR attribute."""

    def modules(self) -> list[types.ModuleType]:
        return [
            module
            for name, module in sorted(sys.modules.items())
            if isinstance(module, types.ModuleType)
            and getattr(module, "__file__", None) in self.files
        ]

    def _values(self) -> Iterator[tuple[str, str, Any]]:
        for module in self.modules():
            for name, value in list(vars(module).items()):
                if name.startswith("__") or isinstance(
                    value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
                ):
                    continue
                if isinstance(value, type):
                    if getattr(value, "__module__", None) != module.__name__:
                        continue
                    for attr, held in list(vars(value).items()):
                        if attr.startswith("__") or callable(held) or isinstance(
                            held, (property, staticmethod, classmethod)
                        ):
                            continue
                        yield module.__name__, f"{name}.{attr}", held
                    continue
                if any(value is obj for obj in self.objects.values()):
                    continue  # the agent and registry: their attributes below
                yield module.__name__, name, value
        for label, obj in self.objects.items():
            attributes = getattr(obj, "__dict__", None)
            if isinstance(attributes, dict):
                owner = type(obj).__module__
                for attr, held in list(attributes.items()):
                    yield owner, f"{label}.{attr}", held

    def digests(self) -> dict[tuple[str, str], str]:
        return {(module, name): _digest(value) for module, name, value in self._values()}


def changed(before: dict[tuple[str, str], str], after: dict[tuple[str, str], str]) -> list[
    tuple[str, str]
]:
    """The values that differ (or appeared, or went) between two ``digests()``."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def where_written(module_name: str, name: str) -> Write | None:
    """The statement inside a function of ``module_name`` that writes ``name`` (a global,
    ``Class.attr``, or ``OBJECT.attr`` for an attribute of an object: written as
    ``self.attr``), and the line it is first bound at."""
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module is not None else None
    except (OSError, TypeError):
        source = None
    if source is None or module is None:
        return None
    tree = ast.parse(source)
    head, _, attr = name.partition(".")
    defined = 0
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        )
        if any(isinstance(t, ast.Name) and t.id == head for t in targets):
            defined = node.lineno
            break
    file = getattr(module, "__file__", "") or ""
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        line = _written_in(function, head, attr)
        if line:
            return Write(module_name, name, file, line, defined)
    return Write(module_name, name, file, defined, defined) if defined else None


def _is_target(node: ast.AST, head: str, attr: str) -> bool:
    """Whether ``node`` (an assignment target or a mutated object) is the watched value."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if attr:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls", head)
        )
    return isinstance(node, ast.Name) and node.id == head


def _written_in(function: ast.AST, head: str, attr: str) -> int:
    declared = any(
        isinstance(n, ast.Global) and head in n.names for n in ast.walk(function)
    )
    for node in ast.walk(function):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = [t for t in node.targets if isinstance(t, (ast.Subscript, ast.Attribute))]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            plain = isinstance(target, ast.Name) and not attr
            if plain and not declared and not isinstance(node, ast.Call):
                continue  # a local of the same name
            if _is_target(target, head, attr):
                return int(getattr(node, "lineno", 0))
    return 0
