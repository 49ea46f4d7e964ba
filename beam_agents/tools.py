"""Tools: the ``@tool`` decorator and the ``ToolRegistry`` an agent is run with.

A read-only tool (the default) runs inline through ``ctx.call``, in the pipeline
and again in replay. A ``side_effect=True`` tool is never run by the pipeline:
``ctx.act`` stages a ``ToolIntent`` for an executor, and ``ctx.call`` refuses it
before it runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, overload

from beam_agents.errors import AgentDefinitionError, UnknownToolError


@dataclass(frozen=True)
class Tool:
    """A function declared as a tool."""

    name: str
    fn: Callable[..., Any]
    side_effect: bool = False
    requires_approval: bool = False
    description: str = ""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, side_effect: bool = False, requires_approval: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    side_effect: bool = False,
    requires_approval: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: ``@tool`` (read-only) or ``@tool(side_effect=True, requires_approval=True)``."""
    if requires_approval and not side_effect:
        raise AgentDefinitionError(
            f"tool {name or getattr(fn, '__name__', '?')!r}: requires_approval=True needs "
            "side_effect=True (a read-only tool runs inline; there is nothing to approve)"
        )

    def wrap(f: Callable[..., Any]) -> Tool:
        if not callable(f):
            raise AgentDefinitionError(f"@tool expects a function, got {f!r}")
        return Tool(
            name=name or f.__name__,
            fn=f,
            side_effect=side_effect,
            requires_approval=requires_approval,
            description=inspect.getdoc(f) or "",
        )

    return wrap(fn) if fn is not None else wrap


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
