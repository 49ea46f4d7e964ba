"""Agents whose import leaves what a fork of the importing process changes or shares.

Each module does one thing at import that makes a process forked after the import differ
from a fresh process that imported it, and its one activation outputs what it sees (so a
bundle recorded in a fresh process reproduces alone, and ``check`` must not fork its
workers from a template that imported it):

    at_fork        registers an ``os.register_at_fork`` hook: outputs ``forked`` in a child
    seeded_random  seeds ``random`` at import: outputs its first draw (a fork reseeds it)
    shared_page    maps an anonymous shared page at import: outputs ``primed`` once another
                   activation of a process forked from the same importer has written it
"""

from __future__ import annotations

from typing import Any

from beam_agents import Done, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents.agent import Agent, Inbound, Outcome
from beam_agents.context import AgentContext


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


TOOLS = ToolRegistry([lookup_order])


class OutputOnce(Agent):
    """Calls the tool, then outputs ``self.seen()``."""

    def seen(self) -> bytes:
        raise NotImplementedError

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        ctx.call("lookup_order", order_id="A1")
        return Done(output=self.seen())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError
