"""Agents for the pending-intent reconstruction tests, importable as ``pending_agents:ATTR``.

``AGENT`` with ``TOOLS`` is what the pipeline ran (issue #17's scenario):

    stage   stages an approval-gated ``issue_refund`` (it stays pending); Done
    stage_many  stages as many refunds as its payload says; Done
    wait    a start on the same key whose payload names an earlier refund's intent id:
            stages a ``notify`` intent (released at once) and suspends awaiting both

(The id travels in the event, not in working memory: a snapshot holds the memory
as the *latest* activation left it, so an older activation that read a key a
later one rewrote cannot replay; that is another limit, see docs/replay.md.)

``resume`` finishes with an output naming the inbound (and raises on a ToolResult
with status ERROR: a failed resume). ``AGENT_OTHER_STATE`` is the
same agent with one change: the state it hands ``Suspend`` (so a replay of ``wait``
must diverge at the ``SUSPENDED`` event, and only there).
"""

from __future__ import annotations

from typing import Any

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Event, ToolResult
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext
from beam_agents.testing import ScriptedProvider


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:  # pragma: no cover
    """Performed by an executor after a human's approval."""
    raise AssertionError("a side-effect tool must never run")


@tool(side_effect=True)
def notify(channel: str, text: str) -> dict[str, Any]:  # pragma: no cover
    """Performed by an executor, no approval needed."""
    raise AssertionError("a side-effect tool must never run")


TOOLS = ToolRegistry([issue_refund, notify])


class EarlierIntentAgent(Agent):
    """See the module docstring."""

    suspend_version = 1

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        if event.type in ("stage", "stage_many"):
            count = int(event.payload) if event.type == "stage_many" else 1
            for n in range(count):
                ctx.act("issue_refund", order_id=f"A{n}", amount_cents=500)
            return Done(output=f"{ctx.seq}:staged {count}".encode())
        refund = event.payload.decode()
        note = ctx.act("notify", channel="ops", text=f"waiting for {refund}")
        return Suspend(
            state={"refund": refund, "note": note, "v": self.suspend_version},
            awaiting=[refund, note],
        )

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        if isinstance(inbound, ToolResult) and inbound.status == ToolResult.ERROR:
            raise RuntimeError(f"the executor failed: {inbound.error}")
        ctx.memory["resumed"] = step_index
        return Done(output=f"{ctx.seq}:{type(inbound).__name__}".encode())


class OtherStateAgent(EarlierIntentAgent):
    """The same agent, except for the state it suspends with."""

    suspend_version = 2


AGENT = EarlierIntentAgent()
AGENT_OTHER_STATE = OtherStateAgent()


def make_provider() -> ScriptedProvider:
    """The pipeline's provider_factory (these agents never call the model)."""
    return ScriptedProvider(lambda request: "unused", name="scripted-pending")
