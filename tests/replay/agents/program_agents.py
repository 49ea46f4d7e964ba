"""An agent that runs the program its event carries, importable as ``program_agents:ATTR``.

The property test (``test_replay_property.py``) generates random programs and
sends each as an event's payload (JSON), so one importable agent covers them all.
A program is ``{"ops": [...], "end": ..., "await": [...], "resumes": [...]}``:

    ["llm", text]        a model call; the request carries ``text`` and what the
                         activation has seen so far (tool results, replies, reads)
    ["tool", arg]        the read-only ``lookup`` tool
    ["mem", value]       a memory log write under ``log.<seq>.<i>``
    ["read"]             reads the memory log *below* ``ctx.seq`` (a later activation
                         never changes it, so it replays from any later snapshot)
    ["act", gated, n]    stages ``wire`` (approval-gated) or ``notify`` (released)
    ["random"]           draws from ``ctx.random``
    ["fail"]             raises: a failed activation

``end`` is ``"done"`` or ``"suspend"``: suspend awaits the intents this activation
staged, the ids listed in ``await`` (intents earlier activations staged, still
pending — or ids never staged, which fails the activation), and, on a resume
whose program says ``"keep": true``, what the suspension it resumed from still
awaited. ``resumes[k - 1]`` is the program of the resume at step ``k`` (a resume
with none left finishes with ``Done``).
"""

from __future__ import annotations

import hashlib
import json
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


TOOLS = ToolRegistry([lookup, wire, notify])


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
                ctx.memory[f"log.{ctx.seq:06d}.{i}"] = op[1]
            elif kind == "read":
                below = sorted(
                    k for k in ctx.memory if k.startswith("log.") and int(k.split(".")[1]) < ctx.seq
                )
                material = json.dumps([ctx.memory[k] for k in below], sort_keys=True)
                seen.append(f"{len(below)}:{hashlib.sha256(material.encode()).hexdigest()[:8]}")
            elif kind == "act":
                staged.append(ctx.act("wire" if op[1] else "notify", amount=int(op[2])))
            elif kind == "random":
                seen.append(str(ctx.random.randint(0, 3)))
            elif kind == "fail":
                raise ValueError(f"the program fails at op {i}")
            else:  # pragma: no cover - the generator writes only the ops above
                raise AssertionError(f"unknown op {op!r}")
        if program["end"] == "done":
            return Done(output=f"{ctx.seq}:{'|'.join(seen)}".encode())
        awaiting = [*staged, *program.get("await", []), *carried]
        later = program.get("resumes", []) if resumes is None else resumes
        return Suspend(state={"resumes": later, "awaiting": awaiting}, awaiting=awaiting)


def _request(text: str, seen: list[str]) -> LlmRequest:
    return chat_request(MODEL, ("system", "program"), ("user", f"{text} after {'/'.join(seen)}"))


AGENT = ProgramAgent()


def answer(request: LlmRequest) -> str:
    """The scripted model: deterministic, offline."""
    return "re:" + hashlib.sha256(request.messages[-1].content.encode()).hexdigest()[:16]


def make_provider() -> ScriptedProvider:
    """The pipeline's provider_factory."""
    return ScriptedProvider(answer, name=PROVIDER_NAME)
