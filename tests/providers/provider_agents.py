"""An agent that uses a model's tool calls, for the provider pipeline test.

Importable as ``provider_agents:AGENT`` / ``provider_agents:TOOLS`` by the replay CLI.
``start`` asks the model with the ``lookup_order`` tool offered; when the model calls
it, the tool runs and its result goes back in a second request; the final text is
the output.
"""

from __future__ import annotations

import json
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import ChatMessage, Event, LlmRequest, ToolSpec
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext

MODEL = "served-model"

LOOKUP_SPEC = ToolSpec(
    name="lookup_order",
    description="Look an order up by id.",
    parameters_json=json.dumps(
        {"type": "object", "properties": {"order_id": {"type": "string"}}}, sort_keys=True
    ),
)


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read-only: runs in the pipeline and again in replay."""
    return {"order_id": order_id, "status": "shipped"}


TOOLS = ToolRegistry([lookup_order])


class ToolUsingAgent(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        request = LlmRequest(
            model=MODEL,
            messages=[
                ChatMessage(role="system", content="Answer order questions."),
                ChatMessage(role="user", content=event.payload.decode()),
            ],
            tools=[LOOKUP_SPEC],
        )
        request.params.temperature = 0.0
        reply = ctx.complete(request)
        while reply.tool_calls:
            request.messages.append(
                ChatMessage(role="assistant", content=reply.text, tool_calls=reply.tool_calls)
            )
            for call in reply.tool_calls:
                result = ctx.call(call.name, **json.loads(call.arguments_json))
                request.messages.append(
                    ChatMessage(
                        role="tool",
                        tool_call_id=call.id,
                        content=json.dumps(result, sort_keys=True),
                    )
                )
            reply = ctx.complete(request)
        # A key per seq, read by nobody: replays from any later snapshot (a counter it read
        # and rewrote would not: replay cannot judge a read of its own write).
        ctx.memory[f"answer.{ctx.seq}"] = reply.text
        return Done(output=reply.text.encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise AssertionError("this agent never suspends")


AGENT = ToolUsingAgent()
