"""Small agents for the pipeline tests (importable: replay tests reuse them as ``module:ATTR``).

``SHOP_AGENT`` with ``SHOP_TOOLS`` does one thing per event type, so one agent
covers every path of the DoFn:

    echo      one model call, a memory write, Done(output="{seq}:echo:{payload}:{answer}")
    fail      a memory write, then an exception (nothing may be committed)
    fail_call a model call (a staged cache insert), then an exception
    act       stages a ``ship_order`` intent (no approval) and suspends awaiting it
    refund    stages an approval-gated ``issue_refund`` intent and suspends awaiting it
    flaky     payload ``until=MS``: one model call, which the scripted model refuses with a
              rate limit (transient) while the activation clock is before MS; then as echo
    exit, interrupt, genexit  a memory write, then SystemExit / KeyboardInterrupt /
              GeneratorExit (each fails the activation only)
    forget    a memory write, then ``return None`` (a forgotten return: a failure)

``resume`` finishes with ``Done(output="{seq}:{how}:...")`` for a tool result, a
rejection or a timeout. Outputs start with the activation's seq so tests can
check order.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Approval, Event, LlmRequest, LlmResponse, ToolResult
from beam_agents.agent import Inbound, Outcome, Timeout
from beam_agents.context import AgentContext
from beam_agents.errors import ProviderRateLimitError
from beam_agents.testing import ScriptedProvider, chat_request

MODEL = "test-model"


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """A read-only tool: runs inline, in the pipeline and in replay."""
    return {"order_id": order_id, "status": "shipped"}


@tool(side_effect=True)
def ship_order(order_id: str) -> dict[str, Any]:  # pragma: no cover - never run by the pipeline
    """A side-effecting tool without approval."""
    raise AssertionError("the pipeline never performs a side effect")


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:  # pragma: no cover
    """A side-effecting tool that needs a human's approval."""
    raise AssertionError("the pipeline never performs a side effect")


SHOP_TOOLS = ToolRegistry([lookup_order, ship_order, issue_refund])


class ShopAgent(Agent):
    """See the module docstring."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        payload = event.payload.decode()
        if event.type == "echo":
            answer = ctx.complete(chat_request(MODEL, ("user", payload)))
            ctx.memory["count"] = int(ctx.memory.get("count", 0)) + 1
            ctx.memory["last"] = payload
            return Done(output=f"{ctx.seq}:echo:{payload}:{answer.text}".encode())
        if event.type == "flaky":
            # The clock goes into the request: the scripted model decides on it.
            answer = ctx.complete(chat_request(MODEL, ("user", f"flaky {payload} at={ctx.now_ms}")))
            ctx.memory["count"] = int(ctx.memory.get("count", 0)) + 1
            return Done(output=f"{ctx.seq}:flaky:{payload}:{answer.text}".encode())
        if event.type == "fail":
            ctx.memory["poisoned"] = True
            raise RuntimeError("agent code broke")
        if event.type in ("exit", "interrupt", "genexit"):
            ctx.memory["poisoned"] = True
            if event.type == "exit":
                raise SystemExit(3)
            if event.type == "interrupt":
                raise KeyboardInterrupt
            raise GeneratorExit
        if event.type == "forget":
            ctx.memory["poisoned"] = True
            return None  # type: ignore[return-value]  # the bug the pipeline must catch
        if event.type == "fail_call":
            ctx.complete(chat_request(MODEL, ("user", "doomed " + payload)))
            raise RuntimeError("agent code broke after a model call")
        if event.type == "act":
            order = ctx.call("lookup_order", order_id=payload)
            intent = ctx.act("ship_order", order_id=payload)
            ctx.memory["shipping"] = order["order_id"]
            return Suspend(state={"intent": intent, "order": payload}, awaiting=[intent])
        if event.type == "refund":
            ctx.complete(chat_request(MODEL, ("user", "refund " + payload)))
            intent = ctx.act("issue_refund", order_id=payload, amount_cents=500)
            return Suspend(state={"intent": intent, "order": payload}, awaiting=[intent])
        raise ValueError(f"unknown event type {event.type!r}")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        ctx.memory["resumed"] = int(ctx.memory.get("resumed", 0)) + 1
        if isinstance(inbound, ToolResult):
            status = ToolResult.Status.Name(inbound.status)
            return Done(output=f"{ctx.seq}:result:{status}:{inbound.payload.decode()}".encode())
        if isinstance(inbound, Approval):
            return Done(output=f"{ctx.seq}:rejected:{inbound.reason}".encode())
        if isinstance(inbound, Timeout):
            return Done(output=f"{ctx.seq}:timeout:{inbound.deadline_ms}".encode())
        raise TypeError(f"unexpected inbound {inbound!r}")  # pragma: no cover


SHOP_AGENT = ShopAgent()


def answer(request: LlmRequest) -> str:
    """The scripted model: echoes the last message (refuses a flaky one before its time)."""
    content = request.messages[-1].content
    if content.startswith("flaky until="):
        until, at = (int(part.split("=")[1]) for part in content.split()[1:3])
        if at < until:
            raise ProviderRateLimitError("scripted", f"rate limited until {until}", status=429)
    return "ok:" + content


def make_provider() -> ScriptedProvider:
    """The tests' ``provider_factory``: deterministic and offline."""
    return ScriptedProvider(answer)


class UnpicklableProvider:
    """A provider holding a lock, as a real client holds sockets: it cannot be pickled."""

    name = "scripted"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inner = ScriptedProvider(answer)

    def complete(self, request: LlmRequest) -> LlmResponse:
        with self._lock:
            return self._inner.complete(request)


def make_unpicklable_provider() -> UnpicklableProvider:
    """A ``provider_factory`` whose provider would break the pipeline if it were pickled."""
    return UnpicklableProvider()


SLOW_CALL_S = 0.05
"""How long ``make_slow_provider``'s model takes to answer: long enough for calls to overlap."""


def slow_answer(request: LlmRequest) -> str:
    time.sleep(SLOW_CALL_S)
    return answer(request)


def make_slow_provider() -> ScriptedProvider:
    """A scripted model that answers after ``SLOW_CALL_S``, as a remote one would."""
    return ScriptedProvider(slow_answer)
