"""Tool declarations and the registry."""

from __future__ import annotations

import pytest

from beam_agents import ToolRegistry, tool
from beam_agents.errors import AgentDefinitionError, UnknownToolError


def test_tool_decorator_bare_and_with_options() -> None:
    @tool
    def read(x: int) -> int:
        """Doubles x."""
        return 2 * x

    @tool(side_effect=True, requires_approval=True)
    def write(x: int) -> None: ...

    assert (read.name, read.side_effect, read.requires_approval) == ("read", False, False)
    assert read.description == "Doubles x."
    assert read(2) == 4
    assert (write.side_effect, write.requires_approval) == (True, True)


def test_approval_on_a_read_only_tool_is_refused_at_definition() -> None:
    with pytest.raises(AgentDefinitionError, match="side_effect=True"):

        @tool(requires_approval=True)
        def read() -> None: ...


def test_registry_refuses_duplicate_names_and_names_unknown_tools() -> None:
    @tool
    def a() -> None: ...

    with pytest.raises(AgentDefinitionError, match="'a'"):
        ToolRegistry([a, a])
    registry = ToolRegistry([a])
    with pytest.raises(UnknownToolError, match=r"no tool named 'b'.*has: a"):
        registry.get("b")
    assert "a" in registry and len(registry) == 1
