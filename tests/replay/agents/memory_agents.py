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

Readers that see the memory another way than by key (issue 23, hostile pass), each
``READS_BY_<HOW>``: ``peek`` reads ``profile`` from what ``how`` hands it (a deep copy, a
pickle round trip, ``vars()``, ``__reduce_ex__(2)``, ``__getstate__()``), and answers
"gold" when it finds "platinum", which only a later seq wrote. Replayed from the final
snapshot, an untracked read of that later memory answers what seq 3 answered.
"""

from __future__ import annotations

import copy
import json
import pickle
import urllib.request
from collections.abc import Callable, Mapping
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


def _by_vars(memory: Any) -> Mapping[str, Any]:
    try:
        return vars(memory)["_data"]  # type: ignore[no-any-return]
    except TypeError:  # no __dict__ to read: the memory itself, by key
        return memory  # type: ignore[no-any-return]


def _by_getstate(memory: Any) -> Mapping[str, Any]:
    state = memory.__getstate__()
    return state["_data"] if isinstance(state, dict) and "_data" in state else state  # type: ignore[no-any-return]


def _by_reduce(memory: Any) -> Mapping[str, Any]:
    return copy._reconstruct(memory, None, *memory.__reduce_ex__(2))  # type: ignore[attr-defined,no-any-return]


_READERS: dict[str, Callable[[Any], Mapping[str, Any]]] = {
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
    "pickle": lambda memory: pickle.loads(pickle.dumps(memory)),
    "vars": _by_vars,
    "reduce_ex": _by_reduce,
    "getstate": _by_getstate,
}


class ReadsBy(MemoryAgent):
    def __init__(self, how: Callable[[Any], Mapping[str, Any]]) -> None:
        self.how = how

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        if event.type != "peek":
            return super().start(ctx, event)
        profile = self.how(ctx.memory).get("profile")
        return Done(output=f"profile is {'gold' if profile == 'platinum' else profile}".encode())


AGENT = MemoryAgent()
READS_BY_DEEPCOPY = ReadsBy(_READERS["deepcopy"])
READS_BY_COPY = ReadsBy(_READERS["copy"])
READS_BY_PICKLE = ReadsBy(_READERS["pickle"])
READS_BY_VARS = ReadsBy(_READERS["vars"])
READS_BY_REDUCE_EX = ReadsBy(_READERS["reduce_ex"])
READS_BY_GETSTATE = ReadsBy(_READERS["getstate"])
DROPS_A_WRITE = DropsAWrite()
ADDS_A_WRITE = AddsAWrite()
CHANGES_A_WRITE = ChangesAWrite()


def make_provider() -> ScriptedProvider:
    return ScriptedProvider(lambda request: f"ok: {request.messages[-1].content}", name="scripted-mem")
