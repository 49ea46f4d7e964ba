"""Picks a greeting with the random module's global functions."""

from __future__ import annotations

import random

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask

GREETINGS = ["Hi", "Hello", "Hey", "Good day", "Greetings", "Howdy"]


class RandomAgent(Agent):
    def start(self, ctx, event):
        greeting = random.choice(GREETINGS)  # doctor: randomness
        answer = ctx.complete(ask(f"{greeting}! {event.payload.decode()}"))
        return Done(output=answer.text.encode())


AGENT = RandomAgent()
TOOLS = ToolRegistry([])
