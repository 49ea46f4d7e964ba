"""An agent whose memory and recorded tool replay judges key by key, importable as
``memory_agents:ATTR`` (issue 22's four cases, from a real ``RunAgent`` run).

``fetch`` is ``@tool(recorded=True)``: it GETs ``{SERVICE_URL}/status/{name}`` from a
real HTTP service on 127.0.0.1 (``DriftingService``) whose answer changes with every
request it serves, as a live service's does between two activations.

Event types (``AGENT``):

    note      writes ``note.<seq>`` and ``last_note`` (the payload), reading no key; Done
    profile   writes ``profile`` (the payload), blind; Done
    peek      reads ``profile`` and answers with it; Done
    fetch     fetch(payload), Done with its status
    fetch_fail  fetch(payload), then raises: the answer it got is never committed
    hold      stages ``notify`` (released at once) and suspends on it; the resume fetches
              ``fetch(state's name)`` and answers with its status (no model call)

Mutants, which change only what ``note`` writes to memory (the events and the output
stay the same):

    DROPS_A_WRITE    leaves out ``last_note``
    ADDS_A_WRITE     also writes ``note_count``
    CHANGES_A_WRITE  writes ``last_note`` upper-cased
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from loopback_service import JsonService

from beam_agents import Agent, Done, Suspend, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext
from beam_agents.testing import ScriptedProvider, chat_request

MODEL = "memory-test-model"
SERVICE_URL = ""
"""Set by the tests to the running ``DriftingService``'s base URL."""


class DriftingService(JsonService):
    """A real HTTP status service on 127.0.0.1 (a free port): its n-th answer is ``v<n>``."""

    def answer(self, name: str) -> dict[str, Any]:
        return {"name": name, "status": f"v{self.requests}"}


@tool(recorded=True)
def fetch(name: str) -> dict[str, Any]:
    """Reads the status service over HTTP (recorded: replay serves it from the snapshot)."""
    with urllib.request.urlopen(f"{SERVICE_URL}/status/{name}", timeout=5) as response:
        value: dict[str, Any] = json.loads(response.read())
        return value


@tool(side_effect=True)
def notify(name: str) -> dict[str, Any]:  # pragma: no cover - never run by the pipeline
    """A side effect, performed by an executor."""
    raise AssertionError("a side-effect tool must never run")


TOOLS = ToolRegistry([fetch, notify])


class MemoryAgent(Agent):
    """See the module docstring."""

    def note(self, ctx: AgentContext, text: str) -> None:
        ctx.memory[f"note.{ctx.seq:06d}"] = text
        ctx.memory["last_note"] = text

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        text = event.payload.decode()
        if event.type == "note":
            reply = ctx.complete(chat_request(MODEL, ("user", f"noted: {text}")))
            self.note(ctx, text)
            return Done(output=reply.text.encode())
        if event.type == "profile":
            ctx.memory["profile"] = text
            return Done(output=b"profile set")
        if event.type == "peek":
            return Done(output=f"profile is {ctx.memory.get('profile')}".encode())
        if event.type in ("fetch", "fetch_fail"):
            status = ctx.call("fetch", name=text)["status"]
            if event.type == "fetch_fail":
                raise RuntimeError(f"gave up after the service said {status}")
            return Done(output=f"status {status}".encode())
        if event.type == "hold":
            intent = ctx.act("notify", name=text)
            return Suspend(state={"name": text}, awaiting=[intent])
        raise ValueError(f"unknown event type {event.type!r}")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        status = ctx.call("fetch", name=str(state["name"]))["status"]
        return Done(output=f"resumed: status {status}".encode())


class DropsAWrite(MemoryAgent):
    def note(self, ctx: AgentContext, text: str) -> None:
        ctx.memory[f"note.{ctx.seq:06d}"] = text


class AddsAWrite(MemoryAgent):
    def note(self, ctx: AgentContext, text: str) -> None:
        super().note(ctx, text)
        ctx.memory["note_count"] = 1


class ChangesAWrite(MemoryAgent):
    def note(self, ctx: AgentContext, text: str) -> None:
        ctx.memory[f"note.{ctx.seq:06d}"] = text
        ctx.memory["last_note"] = text.upper()


AGENT = MemoryAgent()
DROPS_A_WRITE = DropsAWrite()
ADDS_A_WRITE = AddsAWrite()
CHANGES_A_WRITE = ChangesAWrite()


def make_provider() -> ScriptedProvider:
    return ScriptedProvider(lambda request: f"ok: {request.messages[-1].content}", name="scripted-mem")
