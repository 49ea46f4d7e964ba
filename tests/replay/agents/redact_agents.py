"""Agents whose refused attempts and exits quote a value, for ``--redact``.

The value is the event's payload (``SECRET`` in the tests): the agent looks up the
order it names with ``lookup``, then answers. ``TOOLS`` is what the pipeline ran; each
variant's ``lookup`` first tries something the guard refuses, built from its argument,
and swallows the refusal as careless code would:

    TOOLS_RUN     starts the process ``order-cli lookup <order id>``
    TOOLS_PATH    writes the file ``$TMPDIR/order-<order id>.json`` (``/tmp`` by default)

``AGENT_EXIT`` is the agent that ran, but exits with ``sys.exit(f"no such order: {order}")``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext


@tool
def lookup(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


@tool(name="lookup")
def lookup_running(order_id: str) -> dict[str, Any]:
    with contextlib.suppress(OSError):
        subprocess.run(["order-cli", "lookup", order_id], check=False)
    return {"order_id": order_id, "status": "shipped"}


@tool(name="lookup")
def lookup_writing(order_id: str) -> dict[str, Any]:
    with contextlib.suppress(OSError), open(
        os.path.join(os.environ.get("TMPDIR", "/tmp"), f"order-{order_id}.json"), "w"
    ) as f:
        f.write("{}")
    return {"order_id": order_id, "status": "shipped"}


TOOLS = ToolRegistry([lookup])
TOOLS_RUN = ToolRegistry([lookup_running])
TOOLS_PATH = ToolRegistry([lookup_writing])


class Orders(Agent):
    exits = False

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        order = event.payload.decode()
        found = ctx.call("lookup", order_id=order)
        if self.exits:
            sys.exit(f"no such order: {order}")
        return Done(output=f"{found['status']}".encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError


class OrdersExiting(Orders):
    exits = True


AGENT = Orders()
AGENT_EXIT = OrdersExiting()
