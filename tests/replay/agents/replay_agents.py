"""Agents and tools for the replay tests, importable as ``replay_agents:ATTR``.

``AGENT`` with ``TOOLS`` is what "the pipeline" ran. The variants provoke one
verdict each when replay imports them instead:

    TOOLS_CHANGED_LOOKUP   lookup_order returns another result        -> diverged at that TOOL_CALL
    AGENT_NEW_PROMPT       another system prompt (messages[0])         -> cache miss naming messages[0]
    TOOLS_ONLINE_RATE      fetch_rate opens a TCP connection           -> irreproducible, network
    AGENT_CATCHES_MISS     catches the provider error and carries on   -> still irreproducible
    AGENT_OTHER_OUTPUT     the same run, another Done output            -> diverged at ACTIVATION_END

``NOTES`` writes memory blindly (it reads no key it writes), so its committed
memory can be compared with the traced digest; ``NOTES_OTHER_MEMORY`` is the
same agent writing another value: diverged at ACTIVATION_END. ``AGENT`` writes
memory blindly too (a key per seq, and ``last``), so it replays from any later
snapshot; ``COUNTER`` is ``AGENT`` counting its turns (``turns += 1``): a read of
a key every activation rewrites, which replay can never judge (irreproducible).

``AGENT`` does one thing per event type:

    ask        lookup_order, one model call, a memory write, Done(output)
    rate       ask, plus the read-only fetch_rate
    boom       raises before any model call (a failed activation that reproduces fully)
    boom_late  one model call, then raises (replays up to that uncached call)
    refund     ask, then stages an approval-gated issue_refund and suspends awaiting it
    twice      two model calls

``resume`` makes one model call summarizing the inbound, then Done; a ToolResult
with status ERROR makes it raise first (a failed resume, before any model call).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from beam_agents import Agent, Done, HitlPolicy, Suspend, ToolRegistry, tool
from beam_agents._protos import Event, ToolResult
from beam_agents.agent import Inbound, Outcome, Timeout
from beam_agents.context import AgentContext
from beam_agents.errors import ProviderError
from beam_agents.testing import ScriptedProvider, chat_request

MODEL = "replay-test-model"
PROVIDER_NAME = "scripted-replay"
SYSTEM_PROMPT = "You are a support agent."

NETWORK_TARGET_ENV = "BEAM_AGENTS_TEST_NETWORK_TARGET"
"""``host:port`` the online fetch_rate connects to (set by the network test)."""


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read-only: runs in the pipeline and again in replay."""
    return {"order_id": order_id, "status": "shipped"}


@tool(name="lookup_order")
def lookup_order_changed(order_id: str) -> dict[str, Any]:
    """The same tool, returning something else today."""
    return {"order_id": order_id, "status": "lost in transit"}


@tool
def fetch_rate(currency: str) -> dict[str, Any]:
    """Read-only, offline."""
    return {"currency": currency, "rate": 1.25}


@tool(name="fetch_rate")
def fetch_rate_online(currency: str) -> dict[str, Any]:
    """The same tool reaching a rate service over TCP."""
    host, _, port = os.environ[NETWORK_TARGET_ENV].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(currency.encode())
        return {"currency": currency, "rate": float(conn.recv(64) or b"0")}


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> dict[str, Any]:  # pragma: no cover
    """Performed by an executor, never by the pipeline or replay."""
    raise AssertionError("a side-effect tool must never run")


TOOLS = ToolRegistry([lookup_order, fetch_rate, issue_refund])
TOOLS_CHANGED_LOOKUP = ToolRegistry([lookup_order_changed, fetch_rate, issue_refund])
TOOLS_ONLINE_RATE = ToolRegistry([lookup_order, fetch_rate_online, issue_refund])

HITL_SHORT = HitlPolicy(intent_ttl_ms=60_000, hitl_timeout_ms=30_000, approval_channel="ops")
"""A non-default policy (the pipeline's own, passed with --hitl)."""


class SupportAgent(Agent):
    """See the module docstring."""

    system_prompt = SYSTEM_PROMPT

    def _ask(self, ctx: AgentContext, text: str) -> str:
        order = ctx.call("lookup_order", order_id="A1")
        reply = ctx.complete(
            chat_request(
                MODEL,
                ("system", self.system_prompt),
                ("user", f"{text} (order {order['status']})"),
            )
        )
        self._remember(ctx, text)
        return str(reply.text)

    def _remember(self, ctx: AgentContext, text: str) -> None:
        # Blind writes: a key per seq, read by nobody, and the last question asked.
        ctx.memory[f"asked.{ctx.seq:04d}"] = text
        ctx.memory["last"] = text

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        text = event.payload.decode()
        if event.type == "boom":
            ctx.call("lookup_order", order_id="A1")
            raise ValueError(f"cannot handle {text!r}")
        if event.type == "boom_late":
            self._ask(ctx, text)
            raise RuntimeError("failed after the model answered")
        answer = self._ask(ctx, text)
        if event.type == "twice":
            answer += "|" + self._ask(ctx, text + " again")
        if event.type == "rate":
            rate = ctx.call("fetch_rate", currency="EUR")
            answer += f"|rate={rate['rate']}"
        if event.type == "refund":
            intent = ctx.act("issue_refund", order_id="A1", amount_cents=500)
            return Suspend(state={"refund": intent, "asked": text}, awaiting=[intent])
        return Done(output=f"{ctx.seq}:{answer}".encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        if isinstance(inbound, ToolResult):
            if inbound.status == ToolResult.ERROR:
                raise RuntimeError(f"the executor failed: {inbound.error}")
            how = f"result {ToolResult.Status.Name(inbound.status)}"
        elif isinstance(inbound, Timeout):
            how = "timeout"
        else:
            # A rejection needs no model call: nothing happened to summarize.
            ctx.memory["resumed"] = step_index
            return Done(
                output=f"{ctx.seq}:refund rejected by {inbound.approver or 'a human'}".encode()
            )
        summary = ctx.complete(chat_request(MODEL, ("user", f"summarize {how} for {state}")))
        ctx.memory["resumed"] = step_index
        return Done(output=f"{ctx.seq}:{summary.text}".encode())


class CounterAgent(SupportAgent):
    """``SupportAgent`` that also counts its turns: it reads the key it then rewrites."""

    def _remember(self, ctx: AgentContext, text: str) -> None:
        ctx.memory["turns"] = int(ctx.memory.get("turns", 0)) + 1
        ctx.memory["last"] = text


class NewPromptAgent(SupportAgent):
    """The same agent after someone edited its system prompt."""

    system_prompt = "You are a terse support agent."


class CatchingAgent(SupportAgent):
    """Catches the provider's error and answers from a fallback (the replay must not pass)."""

    def _ask(self, ctx: AgentContext, text: str) -> str:
        try:
            return super()._ask(ctx, text)
        except ProviderError:
            return "fallback"


class NoModelAgent(SupportAgent):
    """Reads the order and answers without asking the model (another event where it asked)."""

    def _ask(self, ctx: AgentContext, text: str) -> str:
        order = ctx.call("lookup_order", order_id="A1")
        return f"order {order['status']}"


class OtherOutputAgent(SupportAgent):
    """The same steps; only the bytes of its Done output changed (a new output format)."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        outcome = super().start(ctx, event)
        if isinstance(outcome, Done):
            return Done(output=outcome.output.upper())
        return outcome


class NotesAgent(Agent):
    """One lookup, one model call, blind memory writes, Done(reply)."""

    def status(self, order: dict[str, Any]) -> str:
        return str(order["status"])

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        order = ctx.call("lookup_order", order_id="A1")
        reply = ctx.complete(chat_request(MODEL, ("user", event.payload.decode())))
        ctx.memory["last_status"] = self.status(order)
        ctx.memory["last_event"] = {"type": event.type, "seq": ctx.seq}
        return Done(output=reply.text.encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError("NotesAgent never suspends")


class OtherMemoryNotesAgent(NotesAgent):
    """The same steps and output; only the value it writes to memory changed."""

    def status(self, order: dict[str, Any]) -> str:
        return str(order["status"]).upper()


class ResultEditingNotesAgent(NotesAgent):
    """Edits the tool result it was handed after the call (its own object to keep)."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        order = ctx.call("lookup_order", order_id="A1")
        order["status"] = "seen by the agent"
        order["score"] = float("nan")  # no longer a JSON value
        return Done(output=b"ok")


class VandalAgent(SupportAgent):
    """``SupportAgent``, then it spoils every object it was handed or got back (the event,
    the continuation's state, the inbound result, the model's reply, the tool's result):
    a replay must give the next one nothing of them (a bundle's seqs share one load)."""

    def _ask(self, ctx: AgentContext, text: str) -> str:
        order = ctx.call("lookup_order", order_id="A1")
        reply = ctx.complete(
            chat_request(
                MODEL,
                ("system", self.system_prompt),
                ("user", f"{text} (order {order['status']})"),
            )
        )
        self._remember(ctx, text)
        answer = str(reply.text)
        order.clear()
        order["status"] = "vandalized"
        reply.Clear()
        reply.text = "vandalized"
        return answer

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        outcome = super().start(ctx, event)
        event.payload, event.type = b"vandalized", "vandalized"
        return outcome

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        outcome = super().resume(ctx, state, step_index, inbound)
        if isinstance(state, dict):
            state.clear()
            state["asked"] = "vandalized"
        if isinstance(inbound, ToolResult):
            inbound.status, inbound.error = ToolResult.ERROR, "vandalized"
        return outcome


AGENT = SupportAgent()
COUNTER = CounterAgent()
AGENT_VANDAL = VandalAgent()
NOTES_EDITS_RESULT = ResultEditingNotesAgent()
AGENT_OTHER_OUTPUT = OtherOutputAgent()
NOTES = NotesAgent()
NOTES_OTHER_MEMORY = OtherMemoryNotesAgent()
AGENT_NEW_PROMPT = NewPromptAgent()
AGENT_NO_MODEL = NoModelAgent()
AGENT_CATCHES_MISS = CatchingAgent()
NOT_AN_AGENT = {"just": "a dict"}


def answer(request: Any) -> str:
    """The scripted model: deterministic, offline."""
    return f"answer to: {request.messages[-1].content}"


def make_provider() -> ScriptedProvider:
    """The pipeline's provider_factory in these tests."""
    return ScriptedProvider(answer, name=PROVIDER_NAME)
