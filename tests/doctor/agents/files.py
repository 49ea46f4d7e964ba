"""Reads a file of canned answers in every activation."""

from __future__ import annotations

from pathlib import Path

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask

FAQ = Path(__file__).with_name("faq.txt")


class FaqAgent(Agent):
    def start(self, ctx, event):
        faq = FAQ.read_text(encoding="utf-8")  # doctor: files
        answer = ctx.complete(ask(f"{faq.splitlines()[0]} {event.payload.decode()}"))
        return Done(output=answer.text.encode())


AGENT = FaqAgent()
TOOLS = ToolRegistry([])
