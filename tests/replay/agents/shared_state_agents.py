"""Agents whose verdict depends on what else ran in their interpreter, for ``check``'s isolation.

    COUNTING   counts activations in a module global and outputs the count: in the pipeline
               (one process per key here: the count is reset before each key is recorded)
               a key's seq N outputs ``N``. Alone, every activation outputs ``1``: a
               bundle of seq 1 reproduces, one of seq 2 diverges (at ACTIVATION_END's
               outputs digest). Replayed one after another in one interpreter, the count
               carries over: seq 2 after seq 1 read "reproduced", and three first
               activations of three keys read 1, 2, 3 (two "diverged").
    LEAKY      its first activation in a process starts a daemon thread that waits for the
               next activation to begin in the same process, then connects to
               ``$BEAM_AGENTS_TEST_NETWORK_TARGET`` (refused by the guard): alone each
               activation reproduces; after another one in the same interpreter, the
               thread left by that one made it irreproducible.
    TOOLS      one read-only tool, so the activations have a TOOL_CALL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext

NETWORK_TARGET_ENV = "BEAM_AGENTS_TEST_NETWORK_TARGET"

COUNT = [0]
"""Activations run in this interpreter (the module global the verdicts must not share)."""


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "shipped"}


TOOLS = ToolRegistry([lookup_order])


class Counting(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        COUNT[0] += 1
        ctx.call("lookup_order", order_id="A1")
        return Done(output=str(COUNT[0]).encode())

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError


_AGAIN = threading.Event()
_TRIED = threading.Event()
_RAN: list[int] = []


def _connect_when_another_starts() -> None:
    _AGAIN.wait()
    host, _, port = os.environ.get(NETWORK_TARGET_ENV, "").rpartition(":")
    if host:
        # replay's guard refuses it (careless code swallows that)
        with contextlib.suppress(Exception):
            socket.create_connection((host, int(port)), timeout=5).close()
    _TRIED.set()


class Leaky(Agent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        if os.environ.get(NETWORK_TARGET_ENV):  # (not while the pipeline records it)
            if _RAN:
                _AGAIN.set()  # another activation in this interpreter: the thread goes
            else:
                threading.Thread(target=_connect_when_another_starts, daemon=True).start()
            _RAN.append(ctx.seq)
        ctx.call("lookup_order", order_id="A1")
        if len(_RAN) > 1:  # the thread a previous activation left makes its attempt now
            _TRIED.wait(5)
        return Done(output=b"done")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError


COUNTING = Counting()
LEAKY = Leaky()
