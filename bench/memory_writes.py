"""What judging memory by its writes costs the pipeline: the write set and per-key provenance.

Usage (from the repository root):

    .venv/bin/python bench/memory_writes.py [--activations 3000] [--keys 10,1000] [--repeat 5]

Each activation of a key with ``--keys`` memory keys (a ~60-byte JSON value each) reads
three keys, writes one new key and one it read, and makes one cached model call: the
shape of an agent keeping a log with a key per seq. Per activation it times
``run_activation`` on the previous commit's loaded state, as the DoFn does, and the
pieces issue 22 added, each on its own on the same states:

    write set     JsonMemory.write_set: the keys assigned, plus those handed out and
                  changed in place (compared as canonical JSON)
    provenance    MemoryProvenance.after: who last wrote each key, once committed
    encoding      encode_memory with the provenance, against without it (v2's body)

and prints each as a share of the activation, measured side by side in alternating
runs (the fastest run of ``--repeat``: the machine is shared and noisy). Not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, canonical_json
from beam_agents._protos import Event
from beam_agents.activation import ActivationCommit, run_activation
from beam_agents.blobs import encode_blob, encode_memory
from beam_agents.context import AgentContext
from beam_agents.key_state import KeyState, load_key_state
from beam_agents.memory import JsonMemory
from beam_agents.memory_writes import MemoryWrites
from beam_agents.testing import ScriptedProvider, chat_request, event_envelope

T0 = 1_734_000_000_000
REQUEST = chat_request("bench-model", ("system", "Be brief."), ("user", "Status?"))
VALUE = {"customer": "Zoë", "note": "asked about the refund", "n": 1}


class LogAgent(Agent):
    """Reads three earlier keys, writes its own and rewrites one it read, one cached call."""

    def start(self, ctx: AgentContext, event: Event) -> Done:
        answer = ctx.complete(REQUEST)
        seen = [ctx.memory.get(f"k{(ctx.seq - i) % KEYS}") for i in (1, 2, 3)]
        ctx.memory[f"k{ctx.seq % KEYS}"] = {**VALUE, "n": ctx.seq}
        ctx.memory["counter"] = len(seen) + ctx.seq
        return Done(output=answer.text.encode())


KEYS = 10


def seeded(keys: int) -> KeyState:
    memory = {f"k{i}": dict(VALUE, n=i) for i in range(keys)}
    memory["counter"] = 0
    return KeyState(memory=memory)


def run_chain(keys: int, activations: int) -> tuple[float, list[KeyState], list[MemoryWrites]]:
    """µs per activation, and the pre-states and write sets it went through."""
    global KEYS
    KEYS = keys
    provider = ScriptedProvider(lambda request: "ok", name="bench")
    registry = ToolRegistry([])
    state = seeded(keys)
    states: list[KeyState] = []
    writes: list[MemoryWrites] = []
    started = time.perf_counter()
    for seq in range(1, activations + 1):
        envelope = event_envelope(b"k", "msg", b"x", time_ms=T0 + seq)
        result = run_activation(
            LogAgent(), registry, provider, state, envelope, now_ms=T0 + seq, seq=seq,
            entity_key=b"k",
        )  # fmt: skip
        assert isinstance(result, ActivationCommit)
        states.append(state)
        writes.append(result.memory_writes)
        state = load_key_state(result.cells)
    return (time.perf_counter() - started) / activations * 1e6, states, writes


def timed(fn: Callable[[], object], count: int) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) / count * 1e6


def write_sets(worked: list[tuple[JsonMemory, dict[str, Any]]]) -> None:
    for memory, before in worked:
        memory.write_set(before)


def provenances(states: list[KeyState], writes: list[MemoryWrites]) -> None:
    for state, write in zip(states, writes, strict=True):
        state.memory_provenance.after(write, 7)


def with_provenance(states: list[KeyState]) -> None:
    for state in states:
        encode_memory(state.memory, state.memory_provenance)


def without_provenance(states: list[KeyState]) -> None:
    """v2's dump_memory: the JSON check, then the memory's canonical JSON alone."""
    for state in states:
        assert canonical_json.check_json_value(state.memory) is None
        encode_blob("memory", canonical_json.dumps(state.memory))


def measure(keys: int, activations: int, repeat: int) -> None:
    best: dict[str, float] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(best.get(name, value), value)

    for _ in range(repeat):
        per_activation, states, writes = run_chain(keys, activations)
        keep("activation", per_activation)
        worked = []
        for state in states:  # what agent code did, before the commit asks what it wrote
            memory = JsonMemory(canonical_json.loads(canonical_json.dumps(state.memory)))
            seen = [memory.get(f"k{i}") for i in (1, 2, 3)]
            memory["k0"] = {**VALUE, "n": len(seen)}
            memory["counter"] = len(seen)
            worked.append((memory, state.memory))
        count = len(states)
        keep("write set", timed(lambda: write_sets(worked), count))  # noqa: B023
        keep("provenance", timed(lambda: provenances(states, writes), count))  # noqa: B023
        keep("encoding with provenance", timed(lambda: with_provenance(states), count))  # noqa: B023
        keep("encoding without", timed(lambda: without_provenance(states), count))  # noqa: B023
    activation = best["activation"]
    extra = best["encoding with provenance"] - best["encoding without"]
    print(f"memory of {keys + 1} keys, {activations} activations, fastest of {repeat}:")
    print(f"  activation (run_activation, all of it)   {activation:8.1f} µs")
    for name in ("write set", "provenance"):
        print(f"  {name:<40} {best[name]:8.1f} µs  ({best[name] / activation:.1%} of it)")
    print(
        f"  provenance in the cell's encoding        {extra:8.1f} µs  ({extra / activation:.1%}; "
        f"{best['encoding with provenance']:.1f} vs {best['encoding without']:.1f} µs, "
        f"ratio {best['encoding with provenance'] / best['encoding without']:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activations", type=int, default=3000)
    parser.add_argument("--keys", default="10,1000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for keys in (int(k) for k in args.keys.split(",")):
        measure(keys, args.activations, args.repeat)


if __name__ == "__main__":
    main()
