"""Reads the wall clock to stamp its prompt."""

from __future__ import annotations

import time

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask


class ClockAgent(Agent):
    def start(self, ctx, event):
        hour = int(time.time() // 3600)  # doctor: wall-clock
        answer = ctx.complete(ask(f"hour {hour}: {event.payload.decode()}"))
        return Done(output=answer.text.encode())


AGENT = ClockAgent()
TOOLS = ToolRegistry([])
