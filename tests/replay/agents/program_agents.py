"""An agent that runs the program its event carries, importable as ``program_agents:ATTR``.

The property test (``test_replay_property.py``) generates random programs and
sends each as an event's payload (JSON), so one importable agent covers them all.
A program is ``{"ops": [...], "end": ..., "await": [...], "resumes": [...]}``:

    ["llm", text]        a model call; the request carries ``text`` and what the
                         activation has seen so far (tool results, replies, reads)
    ["tool", arg]        the read-only ``lookup`` tool
    ["mem", value]       a memory log write under ``log.<seq>.<i>``
    ["read"]             reads the memory log of the three activations before this one,
                         key by key (a later activation never rewrites those keys, so it
                         replays from any later snapshot)
    ["rw", name]         reads the shared counter ``shared.<name>`` and writes it + 1 (a
                         read of a key this activation itself rewrites: never judged)
    ["peek", name]       reads ``shared.<name>`` (exact unless a later seq rewrote it)
    ["forget", name]     deletes ``shared.<name>`` if it is there (a read, then a deletion)
    ["scan"]             counts the memory's keys (a read of the memory as a whole)
    ["rec", name]        the recorded tool ``status`` (a "service" whose answer drifts)
    ["act", gated, n]    stages ``wire`` (approval-gated) or ``notify`` (released)
    ["random"]           draws from ``ctx.random``
    ["fail"]             raises: a failed activation

``end`` is ``"done"`` or ``"suspend"``: suspend awaits the intents this activation
staged, the ids listed in ``await`` (intents earlier activations staged, still
pending — or ids never staged, which fails the activation), and, on a resume
whose program says ``"keep": true``, what the suspension it resumed from still
awaited. ``resumes[k - 1]`` is the program of the resume at step ``k`` (a resume
with none left finishes with ``Done``).

Mutants (``DROP_WRITE``, ``ADD_WRITE``, ``CHANGE_WRITE``, ``READ_THEN_WRITE``) run the
same programs and change only what the activation writes to memory: the first memory
write left out, one more key written at the end, the first write's value changed, the
first write made to depend on a read of its own key. Each counts in ``MUTATED`` the
activations it changed, so the property test knows which replays ran a real mutant.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from beam_agents import Agent, Done, HitlPolicy, Suspend, ToolRegistry, tool
from beam_agents._protos import Approval, Event, LlmRequest, ToolResult
from beam_agents.agent import Inbound, Outcome, Timeout
from beam_agents.context import AgentContext
from beam_agents.llm_cache import CachePolicy
from beam_agents.testing import ScriptedProvider, chat_request

MODEL = "program-model"
PROVIDER_NAME = "scripted-program"

HITL = HitlPolicy(intent_ttl_ms=50_000, hitl_timeout_ms=20_000, approval_channel="fuzz")
"""The pipeline's policy (replay gets it with ``--hitl program_agents:HITL``)."""

CACHE = CachePolicy(max_entries=6, ttl_ms=120_000)
"""A small cache, so eviction and expiry happen within a short history."""


@tool
def lookup(key: str) -> dict[str, Any]:
    """Read-only and offline: runs in the pipeline and again in replay."""
    return {"key": key, "h": hashlib.sha256(key.encode()).hexdigest()[:8]}


@tool(side_effect=True, requires_approval=True)
def wire(amount: int) -> dict[str, Any]:  # pragma: no cover
    """Performed by an executor after approval, never by the pipeline or replay."""
    raise AssertionError("a side-effect tool must never run")


@tool(side_effect=True)
def notify(amount: int) -> dict[str, Any]:  # pragma: no cover
    """Performed by an executor, no approval needed."""
    raise AssertionError("a side-effect tool must never run")


class _DriftingService:
    """What ``status`` reads: its answer changes every other call, as a live service's does
    between activations (the pipeline records each answer; replay never calls it)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def answer(self, key: str) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            return {"key": key, "status": f"s{self.calls // 2}"}


SERVICE = _DriftingService()


@tool(recorded=True)
def status(key: str) -> dict[str, Any]:
    """Recorded: runs in the pipeline (its answer drifts), served from the snapshot in replay."""
    return SERVICE.answer(key)


TOOLS = ToolRegistry([lookup, status, wire, notify])


def _inbound(inbound: Inbound) -> str:
    if isinstance(inbound, ToolResult):
        return f"result:{inbound.intent_id}:{ToolResult.Status.Name(inbound.status)}"
    if isinstance(inbound, Approval):
        return f"approval:{inbound.intent_id}:{inbound.approved}"
    assert isinstance(inbound, Timeout)
    return f"timeout:{inbound.deadline_ms}"


def _awaited_by(inbound: Inbound) -> str:
    if isinstance(inbound, (ToolResult, Approval)):
        return inbound.intent_id
    return ""


class ProgramAgent(Agent):
    """See the module docstring."""

    def write(self, ctx: AgentContext, key: str, value: Any) -> None:
        """Every memory write of a program goes through here (the mutants change it)."""
        ctx.memory[key] = value

    def finish(self, ctx: AgentContext) -> None:
        """Called when a program has run all its ops (before it returns Done or Suspend)."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        program = json.loads(event.payload)
        return self._run(ctx, program, seen=[event.type], carried=[])

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        resumes = state["resumes"]
        if step_index - 1 >= len(resumes):
            return Done(output=f"{ctx.seq}:end:{_inbound(inbound)}".encode())
        program = resumes[step_index - 1]
        answered = _awaited_by(inbound)
        carried = [i for i in state["awaiting"] if i != answered] if program.get("keep") else []
        return self._run(ctx, program, seen=[_inbound(inbound)], carried=carried, resumes=resumes)

    def _run(
        self,
        ctx: AgentContext,
        program: dict[str, Any],
        *,
        seen: list[str],
        carried: list[str],
        resumes: list[Any] | None = None,
    ) -> Outcome:
        staged: list[str] = []
        for i, op in enumerate(program["ops"]):
            kind = op[0]
            if kind == "llm":
                reply = ctx.complete(_request(op[1], seen))
                seen.append(reply.text[-12:])
            elif kind == "tool":
                seen.append(ctx.call("lookup", key=op[1])["h"])
            elif kind == "mem":
                self.write(ctx, f"log.{ctx.seq:06d}.{i}", op[1])
            elif kind == "read":
                keys = [
                    f"log.{seq:06d}.{j}"
                    for seq in range(max(1, ctx.seq - 3), ctx.seq)
                    for j in range(6)
                ]
                values = [ctx.memory[k] for k in keys if k in ctx.memory]
                material = json.dumps(values, sort_keys=True)
                seen.append(f"{len(values)}:{hashlib.sha256(material.encode()).hexdigest()[:8]}")
            elif kind == "rw":
                key = f"shared.{op[1]}"
                self.write(ctx, key, int(ctx.memory.get(key, 0)) + 1)
            elif kind == "peek":
                seen.append(f"peek:{ctx.memory.get(f'shared.{op[1]}')}")
            elif kind == "forget":
                if ctx.memory.pop(f"shared.{op[1]}", None) is not None:
                    seen.append("forgot")
            elif kind == "scan":
                seen.append(f"keys:{len(ctx.memory)}")
            elif kind == "rec":
                seen.append(ctx.call("status", key=op[1])["status"])
            elif kind == "act":
                staged.append(ctx.act("wire" if op[1] else "notify", amount=int(op[2])))
            elif kind == "random":
                seen.append(str(ctx.random.randint(0, 3)))
            elif kind == "fail":
                raise ValueError(f"the program fails at op {i}")
            else:  # pragma: no cover - the generator writes only the ops above
                raise AssertionError(f"unknown op {op!r}")
        self.finish(ctx)
        if program["end"] == "done":
            return Done(output=f"{ctx.seq}:{'|'.join(seen)}".encode())
        awaiting = [*staged, *program.get("await", []), *carried]
        later = program.get("resumes", []) if resumes is None else resumes
        return Suspend(state={"resumes": later, "awaiting": awaiting}, awaiting=awaiting)


def _request(text: str, seen: list[str]) -> LlmRequest:
    return chat_request(MODEL, ("system", "program"), ("user", f"{text} after {'/'.join(seen)}"))


MUTATED: Counter[str] = Counter()
"""Activations each mutant changed, by mutant (read by the property test after a replay)."""


class _Mutant(ProgramAgent):
    """A ``ProgramAgent`` that changes what one activation writes (see the module docstring)."""

    name = ""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        self._first = True
        return super().start(ctx, event)

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        self._first = True
        return super().resume(ctx, state, step_index, inbound)

    def first_write(self) -> bool:
        first, self._first = self._first, False
        return first


class _DropsAWrite(_Mutant):
    name = "drop"

    def write(self, ctx: AgentContext, key: str, value: Any) -> None:
        if self.first_write():
            MUTATED[self.name] += 1
            return
        super().write(ctx, key, value)


class _AddsAWrite(_Mutant):
    name = "add"

    def finish(self, ctx: AgentContext) -> None:
        MUTATED[self.name] += 1
        ctx.memory["mutant.extra"] = ctx.seq


class _ChangesAWrite(_Mutant):
    name = "change"

    def write(self, ctx: AgentContext, key: str, value: Any) -> None:
        if self.first_write():
            MUTATED[self.name] += 1
            value = {"mutated": value}
        super().write(ctx, key, value)


class _ReadsThenWrites(_Mutant):
    name = "read-then-write"

    def write(self, ctx: AgentContext, key: str, value: Any) -> None:
        if self.first_write():
            MUTATED[self.name] += 1
            value = [ctx.memory.get(key), value]
        super().write(ctx, key, value)


AGENT = ProgramAgent()
DROP_WRITE = _DropsAWrite()
ADD_WRITE = _AddsAWrite()
CHANGE_WRITE = _ChangesAWrite()
READ_THEN_WRITE = _ReadsThenWrites()
MUTANTS: Mapping[str, str] = {
    "drop": "DROP_WRITE",
    "add": "ADD_WRITE",
    "change": "CHANGE_WRITE",
    "read-then-write": "READ_THEN_WRITE",
}
"""Mutant name -> its ``program_agents`` attribute."""


def answer(request: LlmRequest) -> str:
    """The scripted model: deterministic, offline."""
    return "re:" + hashlib.sha256(request.messages[-1].content.encode()).hexdigest()[:16]


def make_provider() -> ScriptedProvider:
    """The pipeline's provider_factory."""
    return ScriptedProvider(answer, name=PROVIDER_NAME)
