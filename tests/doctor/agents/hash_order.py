"""Lists the topics of a message by iterating a set of strings."""

from __future__ import annotations

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask

TOPICS = {"billing", "refund", "shipping", "warranty", "returns"}


class TopicsAgent(Agent):
    def start(self, ctx, event):
        text = event.payload.decode()
        found = {topic for topic in TOPICS} if text else set()
        listed = ", ".join(found)  # doctor: hash-order
        answer = ctx.complete(ask(f"topics: {listed}. {text}"))
        return Done(output=answer.text.encode())


AGENT = TopicsAgent()
TOOLS = ToolRegistry([])
