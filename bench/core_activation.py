"""What one activation costs in the core, without Beam: µs per activation and where it goes.

Usage (from the repository root):

    .venv/bin/python bench/core_activation.py [--activations 20000] [--keys 1000] [--repeat 3]

The scenario is bench/pipeline_overhead.py's core measurement: ``--activations``
event envelopes spread evenly over ``--keys`` keys, a trivial agent making one
model call per activation (the same request every time, so each key's first
activation misses and inserts, every later one hits the replay cache), one
output. Per activation it times what the DoFn calls for each element:

    load_key_state(cells)             the key's cells -> KeyState
    run_activation(...)               the activation, including dump_key_state
    serialize_trace_event(e) per e    the trace output's bytes

and then the same envelopes (as bytes) through ``KeyStep.envelope`` on one
``MemoryKeyStore`` per key: the per-key step ``AgentDoFn`` runs for each element
(parse, load, classify, run, commit, trace serialization), without Beam.

It runs the whole set ``--repeat`` times and prints the fastest run (the machine
is shared and noisy; the minimum is the least disturbed measurement), then a
breakdown of the pieces of an activation timed on their own.

Then recorded tools: the same activations with one read-only tool call added
(``read_order``, a ~200-byte JSON result, the same arguments per key), once as a
plain ``@tool`` and once as ``@tool(recorded=True)`` (run, recorded in the key's
tool cache, committed in the ``tool_cache`` cell), timed side by side in
alternating runs, and the ratio of the two (target: recorded <= 1.3x plain). The
tool reads a dict, not a service, so the ratio is the recording's own cost.
Not a test: timings depend on the machine (see STYLE.md).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import AgentEnvelope, Event, TraceEvent
from beam_agents.activation import ActivationCommit, run_activation
from beam_agents.cache_key import cache_key_and_fingerprint
from beam_agents.config import DEFAULT_INBOX_LIMIT
from beam_agents.context import AgentContext
from beam_agents.key_state import StateCells, dump_key_state, load_key_state
from beam_agents.key_step import KeyStep, MemoryKeyStore, activation_runner
from beam_agents.testing import ScriptedProvider, chat_request, event_envelope
from beam_agents.trace_events import make_event, serialize_trace_event

T0 = 1_734_000_000_000
REQUEST = chat_request("bench-model", ("system", "Be brief."), ("user", "Status?"))


class CachedCallAgent(Agent):
    """One model call (the same request every time, so it is cached after the first)."""

    def start(self, ctx: AgentContext, event: Event) -> Done:
        answer = ctx.complete(REQUEST)
        return Done(output=answer.text.encode())


ORDER = {
    "order_id": "A-1001",
    "status": "in_transit",
    "carrier": "UPS",
    "tracking": "1Z999AA10123456784",
    "items": [{"sku": "KT-220", "qty": 1, "price_cents": 4900}],
    "eta": "2024-12-13",
}


def _read_order(order_id: str) -> dict[str, Any]:
    return {**ORDER, "order_id": order_id}


PLAIN_TOOLS = ToolRegistry([tool(name="read_order")(_read_order)])
RECORDED_TOOLS = ToolRegistry([tool(name="read_order", recorded=True)(_read_order)])


class ToolCallAgent(CachedCallAgent):
    """The cached model call plus one read-only tool call (plain or recorded, by registry)."""

    def start(self, ctx: AgentContext, event: Event) -> Done:
        order = ctx.call("read_order", order_id=ctx.entity_key.decode())
        answer = ctx.complete(REQUEST)
        return Done(output=f"{answer.text} {order['status']}".encode())


def make_provider() -> ScriptedProvider:
    return ScriptedProvider(lambda request: "All good.")


def envelopes(activations: int, keys: int) -> list[AgentEnvelope]:
    return [
        event_envelope(f"key-{i % keys:05d}".encode(), "tick", time_ms=T0 + i, envelope_id=f"e{i}")
        for i in range(activations)
    ]


def time_core(
    data: list[AgentEnvelope], agent: Agent | None = None, registry: ToolRegistry | None = None
) -> tuple[float, float, float]:
    """Seconds in load_key_state, run_activation and trace serialization over ``data``."""
    agent = agent or CachedCallAgent()
    registry = registry if registry is not None else ToolRegistry([])
    provider = make_provider()
    cells: dict[bytes, tuple[int, StateCells]] = {}
    load = run = serialize = 0.0
    clock = time.perf_counter
    for envelope in data:
        key = envelope.entity_key
        seq, key_cells = cells.get(key, (0, StateCells()))
        t0 = clock()
        state = load_key_state(key_cells)
        t1 = clock()
        result = run_activation(
            agent, registry, provider, state, envelope,
            now_ms=envelope.event_time_ms, seq=seq + 1, entity_key=key,
        )  # fmt: skip
        t2 = clock()
        for event in result.trace:
            serialize_trace_event(event)
        t3 = clock()
        load, run, serialize = load + t1 - t0, run + t2 - t1, serialize + t3 - t2
        assert isinstance(result, ActivationCommit)
        cells[key] = (seq + 1, result.cells)
    return load, run, serialize


def time_step(data: list[AgentEnvelope], agent: Agent | None = None) -> float:
    """Seconds in ``KeyStep.envelope`` over ``data``: what AgentDoFn runs per element, sans Beam."""
    activate = activation_runner(agent or CachedCallAgent(), ToolRegistry([]), make_provider())
    step = KeyStep(activate, inbox_limit=DEFAULT_INBOX_LIMIT)
    keyed = [(envelope.entity_key, envelope.SerializeToString()) for envelope in data]
    stores: dict[bytes, MemoryKeyStore] = {key: MemoryKeyStore() for key, _ in keyed}
    started = time.perf_counter()
    for key, raw in keyed:
        step.envelope(key, raw, stores[key])
    elapsed = time.perf_counter() - started
    assert all(store.seq for store in stores.values())
    return elapsed


def per_call_us(
    function: Callable[[], object],
    calls: int = 5_000,
    repeat: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The fastest of ``repeat`` runs of ``calls`` calls, in µs per call."""
    best = float("inf")
    for _ in range(repeat):
        started = clock()
        for _ in range(calls):
            function()
        best = min(best, clock() - started)
    return best / calls * 1e6


def pieces() -> list[tuple[str, float]]:
    """The pieces of a cache-hit activation, each timed on its own (µs per call)."""
    key = b"key-00001"
    agent, registry, provider = CachedCallAgent(), ToolRegistry([]), make_provider()
    warm = run_activation(
        agent, registry, provider, load_key_state(StateCells()),
        event_envelope(key, "tick", time_ms=T0), now_ms=T0, seq=1, entity_key=key,
    )  # fmt: skip
    assert isinstance(warm, ActivationCommit)
    cells = warm.cells
    state = load_key_state(cells)
    envelope = event_envelope(key, "tick", time_ms=T0 + 1)
    hit = run_activation(
        agent, registry, provider, state, envelope, now_ms=T0 + 1, seq=2, entity_key=key
    )
    assert isinstance(hit, ActivationCommit)
    trace = hit.trace

    def activation() -> object:
        return run_activation(
            agent, registry, provider, state, envelope, now_ms=T0 + 1, seq=2, entity_key=key
        )

    def event() -> TraceEvent:
        return make_event(
            entity_key=key, seq=2, index=1, kind=TraceEvent.ACTIVATION_END, name="done",
            now_ms=T0, attributes={"beam_agents.outcome": "done", "beam_agents.outputs.count": 1},
        )  # fmt: skip

    return [
        ("load_key_state (one cached entry)", per_call_us(lambda: load_key_state(cells))),
        ("run_activation, cache hit", per_call_us(activation)),
        ("  cache_key_and_fingerprint", per_call_us(lambda: cache_key_and_fingerprint(REQUEST, provider="scripted"))),
        ("  make_event (2 attributes)", per_call_us(event)),
        ("  dump_key_state (result state)", per_call_us(lambda: dump_key_state(hit.state))),
        (f"serialize {len(trace)} trace events", per_call_us(lambda: [serialize_trace_event(e) for e in trace])),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activations", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = envelopes(args.activations, args.keys)
    time_core(data[:500])  # warm-up (imports, first allocations)
    runs = [time_core(data) for _ in range(args.repeat)]
    load, run, serialize = min(runs, key=sum)
    n = args.activations
    us = 1e6 / n
    print(
        f"{n} activations over {args.keys} keys ({n - args.keys} cache hits, {args.keys} misses),"
        f" fastest of {args.repeat} runs"
    )
    print(f"  core per activation: {(load + run + serialize) * us:6.1f} µs")
    print(f"    load_key_state:       {load * us:6.1f} µs")
    print(f"    run_activation:       {run * us:6.1f} µs")
    print(f"    trace serialization:  {serialize * us:6.1f} µs")
    print(f"  all runs (µs/activation): {', '.join(f'{sum(r) * us:.1f}' for r in runs)}")
    time_step(data[:500])
    steps = [time_step(data) for _ in range(args.repeat)]
    print(
        f"  per-key step (KeyStep.envelope, the DoFn's work without Beam): {min(steps) * us:6.1f} µs"
    )
    print(f"    all runs (µs/activation): {', '.join(f'{t * us:.1f}' for t in steps)}")
    print("pieces, each timed alone (µs per call, fastest of 5):")
    for name, cost in pieces():
        print(f"  {name:36s} {cost:6.1f}")
    print_recorded_tools(data, args.repeat)
    return 0


def steady_activation(registry: ToolRegistry) -> Callable[[], object]:
    """One steady-state activation of ``ToolCallAgent`` as the DoFn runs it (load, run, trace)."""
    key = b"key-00001"
    agent, provider = ToolCallAgent(), make_provider()
    warm = run_activation(
        agent, registry, provider, load_key_state(StateCells()),
        event_envelope(key, "tick", time_ms=T0), now_ms=T0, seq=1, entity_key=key,
    )  # fmt: skip
    assert isinstance(warm, ActivationCommit)
    cells = warm.cells
    envelope = event_envelope(key, "tick", time_ms=T0 + 1)

    def activation() -> object:
        state = load_key_state(cells)
        result = run_activation(
            agent, registry, provider, state, envelope, now_ms=T0 + 1, seq=2, entity_key=key
        )
        return [serialize_trace_event(event) for event in result.trace]

    return activation


def print_recorded_tools(data: list[AgentEnvelope], repeat: int) -> None:
    """One plain vs one recorded read-only call per activation, alternating runs, and the ratio."""
    agent = ToolCallAgent()
    rounds = max(repeat, 5) * 2
    plain_one, recorded_one = steady_activation(PLAIN_TOOLS), steady_activation(RECORDED_TOOLS)
    # CPU time of this process (the machine is shared: wall time measures the neighbours too),
    # alternating sides so a noisy spell hits both.
    cpu = time.process_time
    steady_plain = steady_recorded = float("inf")
    for _ in range(rounds):
        steady_plain = min(steady_plain, per_call_us(plain_one, 1_000, 1, cpu))
        steady_recorded = min(steady_recorded, per_call_us(recorded_one, 1_000, 1, cpu))
    plain: list[float] = []
    recorded: list[float] = []
    for _ in range(repeat):
        for runs, registry in ((plain, PLAIN_TOOLS), (recorded, RECORDED_TOOLS)):
            started = cpu()
            time_core(data, agent, registry)
            runs.append(cpu() - started)
    us = 1e6 / len(data)
    best_plain, best_recorded = min(plain) * us, min(recorded) * us
    print("recorded tools: one read-only tool call per activation (plus the cached model call)")
    print("  steady state, one key (load + run + trace), CPU time, fastest of alternating runs:")
    print(f"    plain @tool:              {steady_plain:6.1f} µs per activation")
    print(f"    @tool(recorded=True):     {steady_recorded:6.1f} µs per activation")
    print(
        f"    recorded / plain:         {steady_recorded / steady_plain:6.2f}x "
        f"(+{steady_recorded - steady_plain:.1f} µs; target <= 1.3x)"
    )
    print(f"  the {len(data)} activations above, CPU time, fastest of {repeat} alternating runs:")
    print(f"    plain @tool:              {best_plain:6.1f} µs per activation")
    print(f"    @tool(recorded=True):     {best_recorded:6.1f} µs per activation")
    print(f"    recorded / plain:         {best_recorded / best_plain:6.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
