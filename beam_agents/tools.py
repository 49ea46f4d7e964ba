"""Tools: the ``@tool`` decorator and the ``ToolRegistry`` an agent is run with.

A read-only tool (the default) runs inline through ``ctx.call``, in the pipeline
and again in replay. A ``recorded=True`` read-only tool (one that reads a
service: the network, a database, anything whose answer changes with time) runs
in the pipeline and its result is kept in the key's tool cache; replay serves it
from the snapshot and never runs it. A ``side_effect=True`` tool is never run by
the pipeline: ``ctx.act`` stages a ``ToolIntent`` for an executor, and
``ctx.call`` refuses it before it runs; so does the tool itself (called
directly, through ``registry.get`` or ``.fn``) inside an activation or a replay.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, overload

from beam_agents._running import side_effects_refused
from beam_agents.errors import AgentDefinitionError, SideEffectRefusedError, UnknownToolError


@dataclass(frozen=True)
class Tool:
    """A function declared as a tool."""

    name: str
    fn: Callable[..., Any]
    side_effect: bool = False
    requires_approval: bool = False
    description: str = ""
    recorded: bool = False
    """Read-only, and its results are recorded in the key's tool cache (served in replay)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    side_effect: bool = False,
    requires_approval: bool = False,
    recorded: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    side_effect: bool = False,
    requires_approval: bool = False,
    recorded: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: ``@tool`` (read-only), ``@tool(recorded=True)`` (read-only, reads a
    service: its results are recorded for replay) or ``@tool(side_effect=True,
    requires_approval=True)``."""
    if recorded and side_effect:
        raise AgentDefinitionError(
            f"tool {name or getattr(fn, '__name__', '?')!r}: recorded=True is for read-only "
            "tools (the pipeline never runs a side_effect=True tool, so there is no result "
            "to record)"
        )
    if requires_approval and not side_effect:
        raise AgentDefinitionError(
            f"tool {name or getattr(fn, '__name__', '?')!r}: requires_approval=True needs "
            "side_effect=True (a read-only tool runs inline; there is nothing to approve)"
        )

    def wrap(f: Callable[..., Any]) -> Tool:
        if not callable(f):
            raise AgentDefinitionError(f"@tool expects a function, got {f!r}")
        tool_name = name or f.__name__
        return Tool(
            name=tool_name,
            fn=_refusing_in_activations(f, tool_name) if side_effect else f,
            side_effect=side_effect,
            requires_approval=requires_approval,
            description=inspect.getdoc(f) or "",
            recorded=recorded,
        )

    return wrap(fn) if fn is not None else wrap


def _refusing_in_activations(f: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``f``, refusing to run inside an activation (pipeline or replay) or a replay.

    The tool object, ``registry.get(name)`` and ``.fn`` all hand out this wrapper,
    so agent code cannot perform the effect by calling around ``ctx.act``; an
    executor (outside any activation) calls it as the plain function.
    """

    def side_effect_tool(*args: Any, **kwargs: Any) -> Any:
        if side_effects_refused():
            raise SideEffectRefusedError(name, direct=True)
        return f(*args, **kwargs)

    side_effect_tool.__name__ = getattr(f, "__name__", name)
    side_effect_tool.__qualname__ = getattr(f, "__qualname__", name)
    side_effect_tool.__doc__ = f.__doc__
    side_effect_tool.__module__ = getattr(f, "__module__", __name__)
    return side_effect_tool


class ToolRegistry:
    """The tools an agent may use, by name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            declared = item if isinstance(item, Tool) else tool(item)
            if declared.name in self._tools:
                raise AgentDefinitionError(f"two tools are named {declared.name!r}")
            self._tools[declared.name] = declared

    def get(self, name: str) -> Tool:
        """The tool called ``name``; ``UnknownToolError`` if there is none."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, sorted(self._tools)) from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[n] for n in sorted(self._tools))

    def __len__(self) -> int:
        return len(self._tools)
