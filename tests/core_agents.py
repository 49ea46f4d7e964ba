"""Small agents for the core's tests (importable by subprocesses with PYTHONPATH=tests)."""

from __future__ import annotations

from typing import Any

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Event, LlmResponse
from beam_agents.testing import ScriptedProvider, chat_request

ORDERS = {"A1": {"status": "shipped", "total_cents": 1999}}


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read-only order lookup."""
    return dict(ORDERS.get(order_id, {"status": "unknown"}))


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """Side effect: performed by an executor, never by the pipeline."""
    raise AssertionError("the pipeline must never run a side-effect tool")


@tool(side_effect=True)
def send_email(to: str, body: str) -> None:
    raise AssertionError("the pipeline must never run a side-effect tool")


TOOLS = ToolRegistry([lookup_order, issue_refund, send_email])


def answer(request: Any) -> str:
    return f"answer to: {request.messages[-1].content}"


def make_provider() -> ScriptedProvider:
    return ScriptedProvider(answer)


class SupportAgent(Agent):
    """Looks up an order, asks the model, refunds with approval, and suspends for the result."""

    def start(self, ctx: Any, event: Event) -> Done | Suspend:
        text = event.payload.decode()
        reply: LlmResponse = ctx.complete(chat_request("m-1", ("user", text)))
        order = ctx.call("lookup_order", order_id="A1")
        ctx.memory["last_order"] = order
        ctx.memory["turns"] = ctx.memory.get("turns", 0) + 1
        ctx.memory["lucky"] = ctx.random.randint(0, 1_000_000)
        if "refund" in text:
            refund = ctx.act("issue_refund", order_id="A1", amount_cents=500)
            ctx.act("send_email", to="c@example.com", body=reply.text)
            return Suspend(state={"refund": refund, "asked_at": ctx.now_ms}, awaiting=[refund])
        return Done(output=reply.text.encode())

    def resume(self, ctx: Any, state: Any, step_index: int, inbound: Any) -> Done | Suspend:
        ctx.memory["resumed"] = step_index
        summary = ctx.complete(chat_request("m-1", ("user", f"summarize {type(inbound).__name__}")))
        return Done(output=summary.text.encode())


AGENT = SupportAgent()
