"""The agent of the outage test (tests/pipeline/test_outage.py), importable by the replay CLI
as ``outage_agents:AGENT`` / ``outage_agents:TOOLS``.

It answers each customer message with one model call, whose request carries the
activation clock (``at=MS``): the test's server decides from it whether the provider is
in its outage. A message whose text starts with ``bug`` makes the agent's own code
raise before any call: a permanent failure, dead-lettered at once. Memory is written
only after the call, so a failed attempt replays from any later snapshot of its key.
"""

from __future__ import annotations

from beam_agents import Agent, Done, ToolRegistry
from beam_agents._protos import Event
from beam_agents.agent import Outcome
from beam_agents.context import AgentContext
from beam_agents.testing import chat_request

MODEL = "support-model"
TOOLS = ToolRegistry([])


class ReplyAgent(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        text = event.payload.decode()
        if text.startswith("bug"):
            raise ValueError(f"cannot parse {text!r}")
        answer = ctx.complete(
            chat_request(
                MODEL,
                ("system", "Answer the customer briefly."),
                ("user", f"{text} at={ctx.now_ms}"),
            )
        )
        ctx.memory["replies"] = int(ctx.memory.get("replies", 0)) + 1
        return Done(output=f"reply to {text}: {answer.text}".encode())


AGENT = ReplyAgent()
