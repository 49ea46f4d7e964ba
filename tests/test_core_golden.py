"""Golden digests of the activation core: every byte it produces, pinned per scenario.

Each scenario below drives a chain of activations through ``run_activation`` (model
calls hitting and missing the replay cache, LRU eviction past 64 entries, TTL
expiry, digest-only entries, intents with and without approval, suspend,
approval, tool_result resume, rejection, timeout, failures at several points,
memory with non-ASCII text mutated in place, old-version cells, the replay
provider) and folds everything observable into one sha256:

- every trace event's ``serialize_trace_event`` bytes;
- every ``StateCells`` field of a commit, and the cells of ``result.state``
  dumped again (the state object and the cells must agree);
- every released intent's and approval request's deterministic bytes;
- outputs, the timer deadline, ``suspended``, the migrations applied;
- the error type of a failure, and every provider failure (event index, cache
  key, model, lookup status, fingerprint bytes, error type).

The expected digests pin the bytes the core produced when this test was written
(before the core's performance work), so an optimization that changes any byte
fails here. They may only change on purpose: when a trace or blob layout changes
deliberately, bump ``GOLDEN_VERSION``, record the new digests (run this file:
``.venv/bin/python tests/test_core_golden.py`` prints them) and say in the commit
which layout changed and why. A digest that changes without a layout change is a
bug, never a reason to re-record.

Besides the digests, every activation checks invariant 1 on the spot (the state
passed in is left exactly as it was, compared through an independent serialization
that does not go through ``dump_key_state``), and every scenario checks that no
later activation changed the results of an earlier one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from beam_agents import Agent, Done, Suspend, ToolRegistry, canonical_json, tool
from beam_agents._protos import (
    AgentEnvelope,
    Approval,
    Event,
    LlmRequest,
    LlmResponse,
    ToolCall,
    ToolResult,
    Usage,
)
from beam_agents.activation import (
    ActivationCommit,
    ActivationFailure,
    ActivationResult,
    ReplayHooks,
    TriggerAction,
    classify_trigger,
    hitl_timeout,
    run_activation,
)
from beam_agents.agent import Timeout
from beam_agents.errors import ProviderError
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import (
    KeyState,
    StateCells,
    dump_key_state,
    load_key_state,
    load_snapshot,
    make_snapshot,
)
from beam_agents.llm_cache import DEFAULT_CACHE_POLICY, CachePolicy
from beam_agents.memory_writes import MAX_TOMBSTONES, MemoryProvenance
from beam_agents.provider import Provider, UnservableProvider
from beam_agents.testing import (
    ScriptedProvider,
    approval_envelope,
    event_envelope,
    tool_result_envelope,
)
from beam_agents.trace_events import serialize_trace_event

GOLDEN_VERSION = 3
"""Bumped, with new digests, only when a trace or blob layout changes on purpose.

v3: ``ACTIVATION_END`` carries ``beam_agents.memory_writes_sha256`` (the activation's write
set), and the memory cell is blob v3 (the memory with its per-key provenance). Undoing
exactly those two (the attribute left out, the cell written at v2 and read without its
v2→v3 step) gave every v2 digest back, byte for byte; then the write set was folded in as a
record of its own and ``memory_writes_and_provenance`` added, and the v3 digests recorded."""

KEY = "golden-ключ-42".encode()
T0 = 1_734_000_000_000
HOUR_MS = 3_600_000
GOLDEN_BLOBS = Path(__file__).resolve().parent / "fixtures" / "blobs"


# --- tools ---------------------------------------------------------------------------------


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read-only: a JSON result."""
    return {"order_id": order_id, "status": "shipped", "total": 19.99, "note": "déjà vu ✓"}


@tool
def fetch_blob(name: str) -> bytes:
    """Read-only: a bytes result."""
    return f"blob:{name}".encode() + bytes(range(8))


@tool
def flaky(reason: str) -> None:
    """Read-only, always fails."""
    raise ValueError(reason)


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int) -> None:
    raise AssertionError("the core must never run a side-effect tool")


@tool(side_effect=True)
def send_email(to: str, body: str) -> None:
    raise AssertionError("the core must never run a side-effect tool")


@tool(side_effect=True)
def notify(channel: str) -> None:
    """Needs approval only where the HITL policy says so."""
    raise AssertionError("the core must never run a side-effect tool")


TOOLS = ToolRegistry([lookup_order, fetch_blob, flaky, issue_refund, send_email, notify])


# --- provider ------------------------------------------------------------------------------


def respond(request: LlmRequest) -> LlmResponse | str:
    """Deterministic answers; ``FAIL`` in the last message makes the provider raise."""
    last = request.messages[-1].content if request.messages else ""
    if "FAIL" in last:
        raise ConnectionError(f"provider down for {last!r}")
    if "BIG" in last:
        return "big answer " * 200
    if "TOOLCALL" in last:
        return LlmResponse(
            text="",
            tool_calls=[
                ToolCall(id="c-1", name="lookup_order", arguments_json='{"order_id":"A1"}')
            ],
            stop_reason="tool_calls",
            model=request.model + "-0613",
            usage=Usage(input_tokens=7, output_tokens=3),
        )
    return f"{request.model} says: {last[::-1]} ü"


def provider() -> ScriptedProvider:
    return ScriptedProvider(respond)


class Down:
    """A provider of the same name that cannot answer anything."""

    name = "scripted"

    def complete(self, request: LlmRequest) -> LlmResponse:
        raise ConnectionError("provider down")


# --- the scripted agent ----------------------------------------------------------------------
# An event's payload (and a suspension's state) is a JSON program: a list of steps the agent
# runs in order. Everything it sees (responses, tool results, random numbers, inbound
# answers) goes into its outputs, so the outputs pin what agent code observed.

Step = list[Any]


def request_of(step: Step) -> LlmRequest:
    _, model, messages, *rest = step
    request = LlmRequest(model=model)
    for role, content in messages:
        request.messages.add(role=role, content=content)
    if rest:
        for name, value in rest[0].items():
            setattr(request.params, name, value)
    return request


class ProgramAgent(Agent):
    """Runs the JSON program carried by the trigger (see ``run_program``)."""

    def start(self, ctx: Any, event: Event) -> Any:
        return run_program(ctx, json.loads(event.payload), seen=[f"start:{event.type}"])

    def resume(self, ctx: Any, state: Any, step_index: int, inbound: Any) -> Any:
        seen: list[Any] = [f"resume:{step_index}", describe_inbound(inbound)]
        programs = state.get("resume") if isinstance(state, dict) else None
        if not programs:  # a continuation not written by this agent (the v1 golden)
            program: list[Step] = [
                ["complete", "m-1", [["user", f"resume of {canonical_json.dumps(state)!r}"]]],
                ["set", "resumed", step_index],
                ["done"],
            ]
        else:
            program = programs[min(step_index, len(programs)) - 1]
        return run_program(ctx, program, seen=seen)


def describe_inbound(inbound: Any) -> Any:
    if isinstance(inbound, ToolResult):
        return ["tool_result", inbound.intent_id, int(inbound.status), inbound.payload.hex()]
    if isinstance(inbound, Approval):
        return ["approval", inbound.intent_id, inbound.approved, inbound.reason]
    if isinstance(inbound, Timeout):
        return ["timeout", inbound.deadline_ms, list(inbound.awaiting_intent_ids)]
    return ["?", type(inbound).__name__]


def run_program(ctx: Any, program: list[Step], *, seen: list[Any]) -> Any:
    intents: list[str] = []
    for step in program:
        op = step[0]
        if op == "complete":
            response = ctx.complete(request_of(step))
            seen.append(["llm", response.text[:40], len(response.tool_calls)])
        elif op == "complete_catch":  # agent code that swallows a provider failure
            try:
                ctx.complete(request_of(step))
            except (ConnectionError, ProviderError) as exc:
                seen.append(["llm-failed", type(exc).__name__])
        elif op == "call":
            result = ctx.call(step[1], **step[2])
            seen.append(["tool", result.hex() if isinstance(result, bytes) else result])
        elif op == "call_catch":
            try:
                ctx.call(step[1], **step[2])
            except Exception as exc:
                seen.append(["tool-failed", type(exc).__name__])
        elif op == "act":
            intents.append(ctx.act(step[1], **step[2]))
        elif op == "set":
            ctx.memory[step[1]] = step[2]
        elif op == "del":
            del ctx.memory[step[1]]
        elif op == "append":  # in-place mutation of a stored container: no __setitem__
            ctx.memory[step[1]].append(step[2])
        elif op == "append_new":  # a new list, then grown in place after the assignment
            ctx.memory[step[1]] = []
            ctx.memory[step[1]].append(step[2])
        elif op == "nested_set":  # the same, one level down
            ctx.memory[step[1]][step[2]] = step[3]
        elif op == "read":
            seen.append(["mem", step[1], ctx.memory.get(step[1])])
        elif op == "random":
            seen.append(["rand", ctx.random.randint(0, 10**9), ctx.random.random()])
        elif op == "clock":
            seen.append(["clock", ctx.now_ms, ctx.seq, ctx.entity_key.hex()])
        elif op == "raise":
            raise RuntimeError("agent code broke")
        elif op == "bad_tool_args":
            ctx.call("lookup_order", order_id={1, 2})
        elif op == "bad_act_args":
            ctx.act("send_email", to="x", body=object())
        elif op == "bad_memory":  # passes the write check, fails at the commit
            ctx.memory["sneaky"] = {"list": []}
            ctx.memory["sneaky"]["list"].append(object())
        elif op == "return_garbage":
            return "not a Done"
        elif op == "bad_output":
            return Done(output="a str, not bytes")  # type: ignore[arg-type]
        elif op == "suspend":
            # step: ["suspend", [ordinals of this activation's intents], state, extra ids]
            awaiting = [intents[i] for i in step[1]] + list(step[3] if len(step) > 3 else [])
            return Suspend(state=step[2], awaiting=awaiting)
        elif op == "suspend_bad_state":
            return Suspend(state={"x": float("nan")}, awaiting=[])
        elif op == "done":  # ["done"] or ["done", number of extra outputs]
            extra = [b"extra-%d" % i for i in range(step[1] if len(step) > 1 else 0)]
            return Done(output=canonical_json.dumps(seen), outputs=extra)
        else:  # pragma: no cover - a typo in a scenario
            raise AssertionError(f"unknown step {op!r}")
    return Done(output=canonical_json.dumps(seen))


AGENT = ProgramAgent()


def event(program: list[Any], now: int, type: str = "msg") -> AgentEnvelope:
    return event_envelope(KEY, type, canonical_json.dumps(program), time_ms=now)


# --- recording -----------------------------------------------------------------------------


def state_fingerprint(state: KeyState) -> bytes:
    """An independent serialization of a KeyState (does not call ``dump_key_state``)."""
    parts = [
        canonical_json.dumps(state.memory),
        str(len(state.cache)).encode(),
        state.cache.to_body().SerializeToString(deterministic=True),
    ]
    parts += [e.SerializeToString(deterministic=True) for e in state.cache.entries_by_recency()]
    parts.append(
        b"-"
        if state.continuation is None
        else state.continuation.SerializeToString(deterministic=True)
    )
    parts += [i.SerializeToString(deterministic=True) for i in state.pending]
    parts += [r.SerializeToString(deterministic=True) for r in state.resume_history]
    parts += [s.encode() for s in state.migrations_applied]
    parts.append(canonical_json.dumps(state.memory_provenance.to_json()))
    return b"\x00".join(hashlib.sha256(p).digest() for p in parts)


CELL_FIELDS = ("memory", "llm_cache", "continuation", "pending", "resume_history")


def result_record(result: ActivationResult) -> list[tuple[str, bytes]]:
    """Everything observable of one activation result, as labelled byte strings."""
    rec: list[tuple[str, bytes]] = [
        ("type", type(result).__name__.encode()),
        ("seq", str(result.seq).encode()),
        ("kind", result.kind.encode()),
    ]
    rec += [("trace", serialize_trace_event(e)) for e in result.trace]
    for f in result.provider_failures:
        rec += [
            ("pf.index", str(f.event_index).encode()),
            ("pf.key", f.cache_key.encode()),
            ("pf.model", f.model.encode()),
            ("pf.status", f.lookup_status.name.encode()),
            ("pf.fingerprint", f.fingerprint.SerializeToString(deterministic=True)),
            ("pf.error", f"{type(f.error).__module__}.{type(f.error).__qualname__}".encode()),
        ]
    if isinstance(result, ActivationFailure):
        rec.append(("error_type", result.error_type.encode()))
        return rec
    rec += [(f"cells.{name}", getattr(result.cells, name)) for name in CELL_FIELDS]
    redumped = dump_key_state(result.state)
    rec += [(f"state.{name}", getattr(redumped, name)) for name in CELL_FIELDS]
    rec += [("outputs", out) for out in result.outputs]
    rec.append(("memory_writes", result.memory_writes.body()))
    rec += [("released", i.SerializeToString(deterministic=True)) for i in result.released_intents]
    rec += [("approval", i.SerializeToString(deterministic=True)) for i in result.approval_requests]
    rec += [
        ("timer", str(result.timer_deadline_ms).encode()),
        ("suspended", str(result.suspended).encode()),
        ("migrations", ",".join(result.state.migrations_applied).encode()),
    ]
    return rec


@dataclass
class Chain:
    """One key's serial history: each activation loads the previous commit's cells."""

    cells: StateCells = field(default_factory=StateCells)
    seq: int = 0
    hitl: HitlPolicy = DEFAULT_HITL_POLICY
    policy: CachePolicy = DEFAULT_CACHE_POLICY
    results: list[ActivationResult] = field(default_factory=list)
    records: list[list[tuple[str, bytes]]] = field(default_factory=list)

    def state(self) -> KeyState:
        return load_key_state(self.cells)

    def run(
        self,
        trigger: AgentEnvelope | Timeout,
        *,
        now: int,
        pre: KeyState | None = None,
        with_provider: Provider | None = None,
        visible_through: int | None = None,
        seq: int | None = None,
        advance: bool = True,
    ) -> ActivationResult:
        """Run one activation on ``pre`` (default: the chain's committed cells, loaded)."""
        state = pre if pre is not None else self.state()
        decision = classify_trigger(state, trigger)
        assert decision.action in (TriggerAction.START, TriggerAction.RESUME), decision
        before = state_fingerprint(state)
        result = run_activation(
            AGENT,
            TOOLS,
            with_provider or provider(),
            state,
            trigger,
            now_ms=now,
            seq=seq if seq is not None else self.seq + 1,
            entity_key=KEY,
            hitl=self.hitl,
            cache_policy=self.policy,
            replay=ReplayHooks(visible_through_seq=visible_through),
        )
        # Invariant 1: the state passed in is untouched, whatever the outcome.
        assert state_fingerprint(state) == before
        self.results.append(result)
        self.records.append(result_record(result))
        if advance:
            self.seq += 1
            if isinstance(result, ActivationCommit):
                self.cells = result.cells
        return result

    def digest(self) -> str:
        # No later activation may have changed an earlier result.
        assert [result_record(r) for r in self.results] == self.records
        h = hashlib.sha256(f"core-golden/v{GOLDEN_VERSION}".encode())
        for number, record in enumerate(self.records):
            for label, data in record:
                h.update(f"{number}:{label}:{len(data)}:".encode())
                h.update(data)
        return h.hexdigest()


def commit(result: ActivationResult) -> ActivationCommit:
    assert isinstance(result, ActivationCommit), getattr(result, "error", result)
    return result


def failure(result: ActivationResult) -> ActivationFailure:
    assert isinstance(result, ActivationFailure), result
    return result


# --- scenarios -----------------------------------------------------------------------------


def scenario_model_and_tool_calls() -> Chain:
    """Several model and tool calls, hits and misses, multi-output Done, unicode memory."""
    chain = Chain()
    first = [
        ["clock"],
        ["complete", "m-1", [["system", "Sei knapp."], ["user", "Wo ist A1? 📦"]]],
        ["complete", "m-1", [["system", "Sei knapp."], ["user", "Wo ist A1? 📦"]]],  # staged hit
        ["complete", "m-2", [["user", "TOOLCALL please"]], {"temperature": 0.0, "max_tokens": 9}],
        ["complete", "m-2", [["user", "TOOLCALL please"]], {"temperature": 0.5}],
        ["call", "lookup_order", {"order_id": "A1"}],
        ["call", "fetch_blob", {"name": "ß"}],
        ["call_catch", "flaky", {"reason": "nope"}],
        ["call_catch", "send_email", {"to": "x", "body": "y"}],
        ["call_catch", "no_such_tool", {}],
        ["set", "customer", {"name": "Zoë Ångström", "city": "東京", "tags": ["💸", "vip"]}],
        ["set", "turns", 1],
        ["random"],
        ["done", 2],
    ]
    commit(chain.run(event(first, T0), now=T0))
    again = [
        ["complete", "m-1", [["system", "Sei knapp."], ["user", "Wo ist A1? 📦"]]],  # hit
        ["complete", "m-3", [["user", "new question"]]],  # miss
        ["read", "customer"],
        ["nested_set", "customer", "city", "Zürich"],
        ["nested_set", "customer", "score", 3.5],
        ["set", "turns", 2],
        ["random"],
        ["done"],
    ]
    commit(chain.run(event(again, T0 + 1_000), now=T0 + 1_000))
    # No model call, no memory write: every blob as it was.
    commit(chain.run(event([["read", "turns"], ["done"]], T0 + 2_000), now=T0 + 2_000))
    # Only a cache hit: the cache's recency changes, memory does not.
    hit_only = [["complete", "m-3", [["user", "new question"]]], ["done"]]
    commit(chain.run(event(hit_only, T0 + 3_000), now=T0 + 3_000))
    # A write that leaves memory equal to what it was, and a delete.
    same = [["set", "turns", 2], ["set", "tmp", "x"], ["del", "tmp"], ["done"]]
    commit(chain.run(event(same, T0 + 4_000), now=T0 + 4_000))
    commit(chain.run(event([["del", "customer"], ["done"]], T0 + 5_000), now=T0 + 5_000))
    return chain


def scenario_memory_unicode_and_in_place_mutation() -> Chain:
    """Memory written only by in-place mutation of nested containers must still commit."""
    chain = Chain()
    setup = [
        ["set", "notes", ["erste Notiz", "第二", "🎉"]],
        ["set", "profile", {"name": "Zoë", "prefs": {"lang": "de", "emoji": "✓"}}],
        ["set", "escaped", 'line\nbreak "quoted" \\ \u2028 \x00'],
        ["set", "numbers", [0, -1, 2**53, 1.5, 1e-7, 123456789.125, True, None]],
        ["done"],
    ]
    commit(chain.run(event(setup, T0), now=T0))
    commit(chain.run(event([["append", "notes", "четвёртый"], ["done"]], T0 + 1), now=T0 + 1))
    nested = [["nested_set", "profile", "prefs", {"lang": "日本語"}], ["done"]]
    commit(chain.run(event(nested, T0 + 2), now=T0 + 2))
    commit(chain.run(event([["read", "profile"], ["done"]], T0 + 3), now=T0 + 3))
    # The same in-place mutation on a state object reused for a second activation.
    state = chain.state()
    commit(chain.run(event([["append", "notes", "A"], ["done"]], T0 + 4), now=T0 + 4, pre=state))
    commit(
        chain.run(
            event([["append", "notes", "B"], ["done"]], T0 + 5), now=T0 + 5, pre=state, seq=99
        )
    )
    return chain


def lru_request(n: int) -> Step:
    return ["complete", "m-lru", [["user", f"question {n}"]]]


def scenario_chained_through_result_state() -> Chain:
    """Each activation runs on the previous commit's ``result.state`` object itself."""
    chain = Chain()
    q = ["complete", "m-s", [["user", "q"]]]
    steps: list[list[Step]] = [
        [q, ["set", "log", ["α"]], ["done"]],
        [q, ["append", "log", "β"], ["done"]],  # a hit, memory mutated in place
        [["read", "log"], ["done"]],  # nothing changes
        [["complete", "m-s", [["user", "r"]]], ["append", "log", "γ"], ["done"]],
        [
            ["act", "send_email", {"to": "a", "body": "b"}],
            ["suspend", [0], {"resume": [[q, ["done"]]]}],
        ],
    ]
    pre: KeyState = chain.state()
    last: ActivationResult | None = None
    for number, program in enumerate(steps):
        last = commit(chain.run(event(program, T0 + number), now=T0 + number, pre=pre))
        pre = last.state
    assert isinstance(last, ActivationCommit)
    awaited = last.released_intents[0].intent_id
    done = chain.run(tool_result_envelope(KEY, awaited, time_ms=T0 + 9), now=T0 + 9, pre=pre)
    # A failure on a result's state leaves that result as it was.
    failure(
        chain.run(
            event([q, ["append", "log", "δ"], ["raise"]], T0 + 10),
            now=T0 + 10,
            pre=commit(done).state,
        )
    )
    commit(
        chain.run(
            event([q, ["append", "log", "ε"], ["done"]], T0 + 11),
            now=T0 + 11,
            pre=commit(done).state,
        )
    )
    return chain


def scenario_lru_eviction() -> Chain:
    """Past 64 entries the least recently used go; a hit refreshes recency."""
    chain = Chain()
    commit(chain.run(event([*(lru_request(n) for n in range(40)), ["done"]], T0), now=T0))
    # Touch 0..4 so they are the most recently used of the first batch.
    touch = [*(lru_request(n) for n in range(5)), ["done"]]
    commit(chain.run(event(touch, T0 + 10), now=T0 + 10))
    # 30 more: 70 entries, the 6 least recently used (5..10) are evicted.
    more = [*(lru_request(n) for n in range(40, 70)), ["done"]]
    commit(chain.run(event(more, T0 + 20), now=T0 + 20))
    # 0..4 still hit; 5 and 6 were evicted and miss (and evict again).
    probe = [*(lru_request(n) for n in (0, 4, 5, 6, 69)), ["done"]]
    commit(chain.run(event(probe, T0 + 30), now=T0 + 30))
    # Many evictions within one activation, including entries it inserted itself.
    flood = [*(lru_request(n) for n in range(100, 180)), lru_request(100), ["done"]]
    commit(chain.run(event(flood, T0 + 40), now=T0 + 40))
    return chain


def scenario_ttl_expiry() -> Chain:
    """TTL judged on the activation clock; an insert purges every expired entry."""
    chain = Chain(policy=CachePolicy(ttl_ms=10 * HOUR_MS))
    a, b = ["complete", "m-ttl", [["user", "a"]]], ["complete", "m-ttl", [["user", "b"]]]
    commit(chain.run(event([a, ["done"]], T0), now=T0))
    commit(chain.run(event([b, ["done"]], T0 + 5 * HOUR_MS), now=T0 + 5 * HOUR_MS))
    # Last millisecond of a's life: a hit.
    last = T0 + 10 * HOUR_MS - 1
    commit(chain.run(event([a, ["done"]], last), now=last))
    # a expired; the provider fails, so nothing is inserted and nothing purged.
    expired = T0 + 10 * HOUR_MS
    fail = ["complete_catch", *a[1:]]
    commit(chain.run(event([fail, ["done"]], expired), now=expired, with_provider=Down()))
    # a expired: a miss, re-inserted, still under its key.
    commit(chain.run(event([a, ["done"]], expired + 1), now=expired + 1))
    # b expired by now (a was re-inserted): b misses and is replaced; c is new.
    later = T0 + 16 * HOUR_MS
    c = ["complete", "m-ttl", [["user", "c"]]]
    commit(chain.run(event([b, c, ["done"]], later), now=later))
    # Much later everything but d is expired: inserting d purges them all.
    much_later = T0 + 40 * HOUR_MS
    d = ["complete", "m-ttl", [["user", "d"]]]
    commit(chain.run(event([d, ["done"]], much_later), now=much_later))
    return chain


def scenario_digest_only() -> Chain:
    """Oversized responses and a no-retention policy are stored digest-only and re-billed."""
    chain = Chain(policy=CachePolicy(max_payload_bytes=512))
    big, small = ["complete", "m-d", [["user", "BIG one"]]], ["complete", "m-d", [["user", "hi"]]]
    commit(chain.run(event([big, small, ["done"]], T0), now=T0))
    commit(chain.run(event([big, small, ["done"]], T0 + 1), now=T0 + 1))
    chain.policy = CachePolicy(retain_payloads=False)
    commit(
        chain.run(
            event([small, ["complete", "m-d", [["user", "x"]]], ["done"]], T0 + 2), now=T0 + 2
        )
    )
    commit(chain.run(event([small, ["done"]], T0 + 3), now=T0 + 3))
    return chain


def refund_program(resume: list[list[Step]] | None = None) -> list[Step]:
    return [
        ["complete", "m-1", [["user", "refund please"]]],
        ["act", "issue_refund", {"order_id": "A1", "amount_cents": 500}],
        ["act", "send_email", {"to": "zoë@example.com", "body": "Ihre Rückerstattung"}],
        ["act", "notify", {"channel": "ops"}],
        ["set", "stage", "awaiting"],
        [
            "suspend",
            [0],
            {
                "why": "refund",
                "resume": resume
                or [
                    [
                        ["complete", "m-1", [["user", "summarize"]]],
                        ["set", "stage", "done"],
                        ["done"],
                    ]
                ],
            },
        ],
    ]


def scenario_hitl_round_trip() -> Chain:
    """Approval-gated and plain intents, suspend, approval releases, tool_result resumes."""
    chain = Chain(
        hitl=HitlPolicy(
            intent_ttl_ms=2 * HOUR_MS,
            hitl_timeout_ms=HOUR_MS,
            approval_channel="refunds",
            approval_required_tools=frozenset({"notify"}),
        )
    )
    start = commit(chain.run(event(refund_program(), T0), now=T0))
    refund_id, notify_id = (i.intent_id for i in start.approval_requests)
    # A start event for a suspended key would queue (the DoFn's inbox), not run.
    assert classify_trigger(chain.state(), event([["done"]], T0)).action is TriggerAction.QUEUE
    # Approving the refund releases it without running agent code; the key stays suspended.
    commit(
        chain.run(approval_envelope(KEY, refund_id, approved=True, time_ms=T0 + 10), now=T0 + 10)
    )
    # Rejecting the non-awaited notify intent drops it, again without agent code.
    commit(
        chain.run(
            approval_envelope(KEY, notify_id, approved=False, reason="nö", time_ms=T0 + 20),
            now=T0 + 20,
        )
    )
    result = tool_result_envelope(KEY, refund_id, time_ms=T0 + 30, payload=b'{"ok":true}')
    commit(chain.run(result, now=T0 + 30))
    return chain


def scenario_multi_step_resume_and_history() -> Chain:
    """A resume that suspends again (step 2), and a resume history capped at 8."""
    chain = Chain()
    for round_ in range(10):
        now = T0 + round_ * 100
        # Step 1 stages another intent and suspends again; step 2 finishes.
        step_two: list[Step] = [["read", "round"], ["done"]]
        step_one: list[Step] = [
            ["act", "send_email", {"to": f"r{round_}", "body": "again"}],
            ["set", "round", round_],
            ["suspend", [0], {"resume": [[["raise"]], step_two]}],
        ]
        program = [
            ["act", "send_email", {"to": "a", "body": f"round {round_}"}],
            ["suspend", [0], {"round": round_, "resume": [step_one, step_two]}],
        ]
        start = commit(chain.run(event(program, now), now=now))
        first_id = start.released_intents[0].intent_id
        again = commit(chain.run(tool_result_envelope(KEY, first_id, time_ms=now + 1), now=now + 1))
        second_id = again.released_intents[0].intent_id
        commit(
            chain.run(
                tool_result_envelope(
                    KEY, second_id, time_ms=now + 2, status=ToolResult.ERROR, error="smtp"
                ),
                now=now + 2,
            )
        )
    return chain


def scenario_rejection_and_timeout() -> Chain:
    """Rejecting an awaited intent resumes the agent; so does the HITL deadline."""
    chain = Chain()
    start = commit(chain.run(event(refund_program(), T0), now=T0))
    refund_id = start.approval_requests[0].intent_id
    suspended = chain.state()
    # Two forks of one pre-state: a rejection and a timeout (as replay and tests do).
    rejection = approval_envelope(KEY, refund_id, approved=False, reason="zu teuer", time_ms=T0 + 5)
    commit(chain.run(rejection, now=T0 + 5, pre=suspended, advance=False))
    assert suspended.continuation is not None
    deadline = suspended.continuation.deadline_ms
    commit(chain.run(hitl_timeout(suspended.continuation, deadline), now=deadline, pre=suspended))
    # After a timeout the key starts afresh.
    commit(chain.run(event([["read", "stage"], ["done"]], deadline + 1), now=deadline + 1))
    return chain


def scenario_failures() -> Chain:
    """A failure at every point commits nothing; the chain's state stays the pre-state."""
    chain = Chain()
    warm = [
        ["complete", "m-f", [["user", "warm"]]],
        ["set", "kept", {"ok": ["ja", "✓"]}],
        ["act", "issue_refund", {"order_id": "B2", "amount_cents": 1}],
        ["done"],
    ]
    commit(chain.run(event(warm, T0), now=T0))
    touching = [
        ["complete", "m-f", [["user", "warm"]]],  # a hit: refreshes recency in the copy
        ["complete", "m-f", [["user", "new"]]],  # a staged insert
        ["set", "kept", "overwritten"],
        ["set", "list", [1]],
        ["act", "send_email", {"to": "a", "body": "b"}],
        ["act", "issue_refund", {"order_id": "C3", "amount_cents": 2}],
    ]
    tails: list[list[Step]] = [
        [["raise"]],
        [["call", "flaky", {"reason": "unhandled"}]],
        [["bad_tool_args"]],
        [["bad_act_args"]],
        [["call", "send_email", {"to": "x", "body": "y"}]],
        [["call", "no_such_tool", {}]],
        [["complete", "m-f", [["user", "FAIL now"]]]],
        [["bad_memory"], ["done"]],
        [["return_garbage"]],
        [["bad_output"]],
        [["suspend_bad_state"]],
        [["suspend", [], None, ["in-never-staged"]]],
    ]
    for number, tail in enumerate(tails):
        now = T0 + 10 + number
        failure(chain.run(event([*touching, *tail], now), now=now))
    # A failure before anything else happened.
    failure(chain.run(event([["raise"]], T0 + 100), now=T0 + 100))
    # Agent code that swallows a provider failure commits, with the failure recorded.
    swallowed = [
        ["complete_catch", "m-f", [["user", "FAIL quietly"]]],
        ["set", "after", 1],
        ["done"],
    ]
    commit(chain.run(event(swallowed, T0 + 200), now=T0 + 200))
    # A failing resume leaves the suspension in place.
    start = commit(chain.run(event(refund_program([[["raise"]]]), T0 + 300), now=T0 + 300))
    refund_id = start.approval_requests[0].intent_id
    rejection = approval_envelope(KEY, refund_id, approved=False, time_ms=T0 + 301)
    failure(chain.run(rejection, now=T0 + 301))
    assert chain.state().continuation is not None
    return chain


def scenario_replay_provider() -> Chain:
    """Replay's provider: hits for what was cached, MINTED_LATER and ABSENT as failures."""
    chain = Chain()
    one = [["complete", "m-r", [["user", "one"]]], ["set", "n", 1], ["done"]]
    two = [["complete", "m-r", [["user", "two"]]], ["set", "n", 2], ["done"]]
    commit(chain.run(event(one, T0), now=T0))
    commit(chain.run(event(two, T0 + 1), now=T0 + 1))
    snapshot = make_snapshot(
        chain.cells, entity_key=KEY, seq=chain.seq, snapshot_at_ms=T0 + 2, request_id="r"
    )
    _, replay_state = load_snapshot(snapshot.SerializeToString(deterministic=True))
    unservable = UnservableProvider("scripted")
    both = [*one[:1], *two[:1], ["done"]]
    # Replaying seq 1 sees "two" as minted later (a miss); seq 2 sees both.
    for seq in (1, 2):
        chain.run(
            event(both, T0 + 5),
            now=T0 + 5,
            pre=replay_state,
            with_provider=unservable,
            visible_through=seq,
            seq=seq,
            advance=False,
        )
    absent = [["complete_catch", "m-r", [["user", "three"]]], ["done"]]
    chain.run(
        event(absent, T0 + 6),
        now=T0 + 6,
        pre=replay_state,
        with_provider=unservable,
        seq=3,
        advance=False,
    )
    return chain


def golden_cells() -> StateCells:
    return StateCells(
        **{name: (GOLDEN_BLOBS / f"{name}-v1.bin").read_bytes() for name in CELL_FIELDS}
    )


def scenario_old_version_cells() -> Chain:
    """Cells at v1 are migrated on load and written current by the next commit."""
    chain = Chain(cells=golden_cells(), seq=7)
    state = chain.state()
    assert state.continuation is not None
    refund_id = state.pending[0].intent_id
    # Approving the golden's pending refund (a resume without agent code).
    commit(
        chain.run(approval_envelope(KEY, refund_id, approved=True, time_ms=T0 + 10), now=T0 + 10)
    )
    # The HITL deadline of the golden's continuation resumes the agent.
    cont = chain.state().continuation
    assert cont is not None
    commit(chain.run(hitl_timeout(cont, cont.deadline_ms), now=cont.deadline_ms))
    # From the original golden cells: rejecting the awaited refund resumes the agent.
    fresh = Chain(cells=golden_cells(), seq=7)
    rejection = approval_envelope(KEY, refund_id, approved=False, time_ms=T0 + 20)
    commit(fresh.run(rejection, now=T0 + 20))
    chain.results += fresh.results
    chain.records += fresh.records
    return chain


def scenario_memory_writes_and_provenance() -> Chain:
    """Write sets and who last wrote each key: deletions past the tombstone cap (``since``
    moves past the oldest forgotten one), a key set again after its deletion, a failure
    whose writes never happened, and a v2 memory cell whose unknown provenance its first
    commit starts recording."""
    chain = Chain()
    many = MAX_TOMBSTONES + 4
    commit(
        chain.run(event([*(["set", f"k{i:03d}", i] for i in range(many)), ["done"]], T0), now=T0)
    )
    deletions = [["del", f"k{i:03d}"] for i in range(many)]
    commit(chain.run(event([*deletions[:8], ["done"]], T0 + 1), now=T0 + 1))
    commit(
        chain.run(event([*deletions[8:], ["set", "k000", "back"], ["done"]], T0 + 2), now=T0 + 2)
    )
    failure(
        chain.run(event([["set", "k001", "never"], ["del", "k000"], ["raise"]], T0 + 3), now=T0 + 3)
    )
    commit(
        chain.run(event([["read", "k000"], ["append_new", "log", 1], ["done"]], T0 + 4), now=T0 + 4)
    )
    state = chain.state()
    assert state.memory_provenance.since is not None and state.memory_provenance.since > 1
    assert state.memory_provenance.written["k000"] == 3
    old = Chain(cells=StateCells(memory=(GOLDEN_BLOBS / "memory-v2.bin").read_bytes()), seq=4)
    assert old.state().memory_provenance.since is None
    commit(old.run(event([["read", "notes"], ["done"]], T0 + 10), now=T0 + 10))
    commit(old.run(event([["set", "attempts", 4], ["done"]], T0 + 11), now=T0 + 11))
    assert old.state().memory_provenance == MemoryProvenance(written={"attempts": 6}, since=5)
    chain.results += old.results
    chain.records += old.records
    return chain


def scenario_fresh_key_trivial() -> Chain:
    """The benchmark's shape: one model call per activation, cached after the first."""
    chain = Chain()
    program = [
        ["complete", "bench-model", [["system", "Be brief."], ["user", "Status?"]]],
        ["done"],
    ]
    for i in range(5):
        commit(chain.run(event(program, T0 + i), now=T0 + i))
    return chain


SCENARIOS: dict[str, Callable[[], Chain]] = {
    "model_and_tool_calls": scenario_model_and_tool_calls,
    "chained_through_result_state": scenario_chained_through_result_state,
    "memory_unicode_and_in_place_mutation": scenario_memory_unicode_and_in_place_mutation,
    "lru_eviction": scenario_lru_eviction,
    "ttl_expiry": scenario_ttl_expiry,
    "digest_only": scenario_digest_only,
    "hitl_round_trip": scenario_hitl_round_trip,
    "multi_step_resume_and_history": scenario_multi_step_resume_and_history,
    "rejection_and_timeout": scenario_rejection_and_timeout,
    "failures": scenario_failures,
    "replay_provider": scenario_replay_provider,
    "old_version_cells": scenario_old_version_cells,
    "fresh_key_trivial": scenario_fresh_key_trivial,
    "memory_writes_and_provenance": scenario_memory_writes_and_provenance,
}

EXPECTED: dict[str, str] = {
    "chained_through_result_state": "70ac338d618e720ba6c7a802d19423b550449d3bdc39a3c48535976524d897fa",
    "digest_only": "aa443ca27fdf1693b92a385acd8a397c5b78304adbf49115ca09f7db5c0e37ae",
    "failures": "342f3c7abb388d44a28828cb8ee810220aea3102eaaab2a95ad30db996570379",
    "fresh_key_trivial": "91de4ba7d5d964f8039eca221f7f0ff602979ad66070e16b31cbabde40b9d6f8",
    "hitl_round_trip": "7197f3349ecd466d574b55fb159c784f66c5835ae16bdebfe10d33138aedbf28",
    "lru_eviction": "d8ee0ea7ecf0860598d136334e02ad88ca666438a6ab4f3c7fb48f6d0784ce93",
    "memory_unicode_and_in_place_mutation": "ed52f118920d418b2eeae132419ea58ddaa8fd417fb20ffc7605ddb48fc01a91",
    "memory_writes_and_provenance": "1f026ecfc8372b1172b7e3e4c4aeda4734b75c27bb182b4cf0ece3319a51ceaf",
    "model_and_tool_calls": "29fe176fc383237830362207ffc1f8d43adc9c57cb4241f51d109f2efd8ae214",
    "multi_step_resume_and_history": "b925140e6f0f26b0bb48dfe05efad93f6b03ae22950d61a7835888c203283e62",
    "old_version_cells": "026febfd38237246cf1a39338a024a6d569fb23b919450ab9e5592facf338fd4",
    "rejection_and_timeout": "a547736cc88b41f084cebf5099042bb237dcb117acdba8867527c2dae54a2459",
    "replay_provider": "bd965b891ee89e31407f09584eb526922b712b9a6f6306f70d1c143d9dc641a1",
    "ttl_expiry": "87860f4beefb3d8639404d59c0760449f9a0e5acd38f6fb4f2128d3ecab30cc6",
}
"""Scenario -> sha256 of everything it produced, with the core as of GOLDEN_VERSION."""


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_produces_the_pinned_bytes(name: str) -> None:
    assert SCENARIOS[name]().digest() == EXPECTED[name]


def test_every_scenario_is_pinned() -> None:
    assert sorted(EXPECTED) == sorted(SCENARIOS)


if __name__ == "__main__":
    for scenario_name in sorted(SCENARIOS):
        print(f'    "{scenario_name}": "{SCENARIOS[scenario_name]().digest()}",')
