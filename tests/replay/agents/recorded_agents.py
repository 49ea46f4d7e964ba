"""An agent whose read-only tool reads a real HTTP service, importable as ``recorded_agents:ATTR``.

``read_order`` is ``@tool(recorded=True)``: it GETs ``{SERVICE_URL}/orders/{order_id}``
from an ``http.server`` the tests start on 127.0.0.1 (``OrderService``). The
pipeline runs it and records its result; replay serves it from the snapshot's
tool cache with the service stopped and the network blocked.

Event types (``AGENT``):

    ask      read_order(payload), one model call with the order's status, Done
    twice    read_order(payload) twice (the service may answer differently in between)
    other    read_order(payload + "-X"): the variant ``AGENT_OTHER_ARGS`` does this for "ask"
    bad      read_order_raw(...) returns a set (not JSON): the activation fails
    catch    like bad, but agent code catches the error (the activation still fails)
    peek     read_order(payload) (JSON) and read_label(payload) (bytes); the output says only
             whether each was truthy (a value of the other kind would pass unnoticed)
    hold     stages an approval-gated ``escalate`` and suspends; its resume reads
             read_order(payload + "-R"), a call never recorded (a what-if stops there)

``TOOLS_PLAIN`` declares the same function without ``recorded=True`` (replay then
re-runs it and the network guard blocks it).
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from typing import Any

from loopback_service import JsonService

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext
from beam_agents.errors import RecordedResultError
from beam_agents.testing import ScriptedProvider, chat_request

MODEL = "recorded-test-model"
SERVICE_URL = ""
"""Set by the tests to the running ``OrderService``'s base URL."""


class OrderService(JsonService):
    """A real HTTP order service on 127.0.0.1 (a free port); ``orders`` is what it answers."""

    def __init__(self) -> None:
        self.orders: dict[str, dict[str, Any]] = {}
        super().__init__()

    def answer(self, name: str) -> dict[str, Any]:
        return self.orders.get(name, {"order_id": name, "status": "unknown"})


def _get_order(order_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{SERVICE_URL}/orders/{order_id}", timeout=5) as response:
        value: dict[str, Any] = json.loads(response.read())
        return value


@tool(recorded=True)
def read_order(order_id: str) -> dict[str, Any]:
    """Reads the order service over HTTP (recorded: replay serves it from the snapshot)."""
    return _get_order(order_id)


@tool(name="read_order")
def read_order_plain(order_id: str) -> dict[str, Any]:
    """The same read, not recorded: replay re-runs it, and the network guard blocks it."""
    return _get_order(order_id)


@tool(recorded=True)
def read_order_raw(order_id: str) -> Any:
    """Returns a set: not JSON, so it cannot be recorded."""
    return {order_id}


@tool(recorded=True)
def read_label(order_id: str) -> bytes:
    """A shipping label's bytes (canonical JSON text, so only the recorded kind tells them apart)."""
    return json.dumps({"label": order_id}, separators=(",", ":")).encode()


@tool(side_effect=True, requires_approval=True)
def escalate(order_id: str) -> dict[str, Any]:  # pragma: no cover - never run by the pipeline
    """A side effect, performed by an executor after approval."""
    raise AssertionError("a side-effect tool must never run")


TOOLS = ToolRegistry([read_order, read_order_raw, read_label, escalate])
TOOLS_PLAIN = ToolRegistry([read_order_plain, read_order_raw, escalate])


class OrderAgent(Agent):
    """See the module docstring."""

    suffix = ""

    def _ask(self, ctx: AgentContext, order_id: str) -> str:
        order = ctx.call("read_order", order_id=order_id + self.suffix)
        reply = ctx.complete(
            chat_request(MODEL, ("user", f"order {order_id} is {order['status']}"))
        )
        ctx.memory["last_status"] = order["status"]
        return str(reply.text)

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        order_id = event.payload.decode()
        if event.type == "bad":
            ctx.call("read_order_raw", order_id=order_id)
        if event.type == "catch":
            with contextlib.suppress(RecordedResultError):
                ctx.call("read_order_raw", order_id=order_id)
        if event.type == "peek":
            order = ctx.call("read_order", order_id=order_id)
            label = ctx.call("read_label", order_id=order_id)
            return Done(output=f"{bool(order)}:{bool(label)}".encode())
        if event.type == "hold":
            intent = ctx.act("escalate", order_id=order_id)
            return Suspend(state={"order_id": order_id}, awaiting=[intent])
        answer = self._ask(ctx, order_id)
        if event.type == "twice":
            answer += "|" + self._ask(ctx, order_id)
        return Done(output=f"{ctx.seq}:{answer}".encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        order = ctx.call("read_order", order_id=str(state["order_id"]) + "-R")
        return Done(output=f"resumed: {order['status']}".encode())


class OtherArgsAgent(OrderAgent):
    """The same agent after a change that asks the service about another order id."""

    suffix = "-X"


AGENT = OrderAgent()
AGENT_OTHER_ARGS = OtherArgsAgent()


def make_provider() -> ScriptedProvider:
    return ScriptedProvider(
        lambda request: f"ok: {request.messages[-1].content}", name="scripted-rec"
    )
