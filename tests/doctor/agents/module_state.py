"""Counts the messages it has seen in a module global, across keys."""

from __future__ import annotations

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask

_SEEN: list[str] = []


class CountingAgent(Agent):
    def start(self, ctx, event):
        _SEEN.append(event.payload.decode())  # doctor: module-state
        answer = ctx.complete(ask(f"message number {len(_SEEN)}"))
        return Done(output=answer.text.encode())


AGENT = CountingAgent()
TOOLS = ToolRegistry([])
