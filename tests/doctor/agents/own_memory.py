"""Keeps a turn counter in memory and overwrites it: replayed from a later snapshot, it reads
its own write."""

from __future__ import annotations

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask


class TurnCounter(Agent):
    def start(self, ctx, event):
        turns = ctx.memory.get("turns", 0)  # doctor: own-memory
        ctx.memory["turns"] = turns + 1
        answer = ctx.complete(ask(f"turn {turns}: {event.payload.decode()}"))
        return Done(output=answer.text.encode())


AGENT = TurnCounter()
TOOLS = ToolRegistry([])
