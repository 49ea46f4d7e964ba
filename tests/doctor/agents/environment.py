"""Picks its reply language from an environment variable, per activation."""

from __future__ import annotations

import os

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask


class RegionAgent(Agent):
    def start(self, ctx, event):
        region = os.environ.get("DOCTOR_CORPUS_REGION", "eu")  # doctor: environment
        answer = ctx.complete(ask(f"[{region}] {event.payload.decode()}"))
        return Done(output=answer.text.encode())


AGENT = RegionAgent()
TOOLS = ToolRegistry([])
