"""What RunAgent costs over a bare stateful DoFn, on the BundleBasedDirectRunner.

Usage (from the repository root):

    .venv/bin/python bench/pipeline_overhead.py [--activations 20000] [--keys 1000]

In one run, two pipelines read the same serialized envelopes (``--activations``
events spread evenly over ``--keys`` keys) from an in-memory ``Create``:

(a) a bare stateful DoFn keyed by entity key that does the state traffic
    RunAgent does for this agent and nothing else: it reads SEQ and the five
    blob cells, writes SEQ and the replay-cache cell (the only blob a cached
    call changes) and emits one output;
(b) ``RunAgent`` with a trivial agent making one model call per activation,
    served from the replay cache (the first activation of each key warms it:
    ``keys`` misses, ``activations - keys`` hits), emitting one output and its
    trace (one element per activation; nobody reads the per-event ``.traces``).

It prints activations/s of both and the time ratio b/a. Target: <= 2.0 (issue #16).
The ratio cannot go below (bare + core) / bare: RunAgent does the bare DoFn's state
traffic plus the activation core, so the floor is printed next to it.
To show where RunAgent's time goes, it also times the activation core alone on
the same envelopes, without Beam: ``load_key_state`` + ``run_activation`` +
trace serialization per activation, and the whole per-key step the DoFn runs for
each element (``KeyStep.envelope`` on an in-memory store: parse, load, classify,
run, commit, serialize): RunAgent minus that step is what Beam itself costs.
Not a test: timings depend on the machine (see STYLE.md).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import apache_beam as beam
from apache_beam.coders import BytesCoder, IterableCoder, VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

# The same agent, provider and core timer as bench/core_activation.py (this directory is on
# sys.path when a bench script runs), so the two benchmarks measure one scenario.
from core_activation import T0, CachedCallAgent, make_provider, time_core, time_step

from beam_agents import AgentConfig, RunAgent, ToolRegistry
from beam_agents._protos import AgentEnvelope
from beam_agents.testing import event_envelope

SEQ = ReadModifyWriteStateSpec("seq", VarIntCoder())
MEMORY = ReadModifyWriteStateSpec("memory", BytesCoder())
LLM_CACHE = ReadModifyWriteStateSpec("llm_cache", BytesCoder())
CONTINUATION = ReadModifyWriteStateSpec("continuation", BytesCoder())
PENDING = ReadModifyWriteStateSpec("pending", BytesCoder())
RESUME_HISTORY = ReadModifyWriteStateSpec("resume_history", BytesCoder())
INBOX = ReadModifyWriteStateSpec("inbox", IterableCoder(BytesCoder()))
P_SEQ = beam.DoFn.StateParam(SEQ)
P_MEMORY = beam.DoFn.StateParam(MEMORY)
P_LLM_CACHE = beam.DoFn.StateParam(LLM_CACHE)
P_CONTINUATION = beam.DoFn.StateParam(CONTINUATION)
P_PENDING = beam.DoFn.StateParam(PENDING)
P_RESUME_HISTORY = beam.DoFn.StateParam(RESUME_HISTORY)
P_INBOX = beam.DoFn.StateParam(INBOX)
CACHE_BLOB = b"\x0a\x09llm_cache\x10\x02\x1a" + b"\x00" * 400  # about a one-entry cache blob


class BareStatefulDoFn(beam.DoFn):  # type: ignore[misc]
    """The same cells as AgentDoFn; the same reads and writes; no agent logic."""

    def process(
        self,
        element: tuple[bytes, bytes],
        seq: Any = P_SEQ,
        memory: Any = P_MEMORY,
        llm_cache: Any = P_LLM_CACHE,
        continuation: Any = P_CONTINUATION,
        pending: Any = P_PENDING,
        resume_history: Any = P_RESUME_HISTORY,
        inbox: Any = P_INBOX,
    ) -> Any:
        key, _ = element
        n = (seq.read() or 0) + 1
        _ = (memory.read(), continuation.read(), pending.read(), resume_history.read())
        cache = llm_cache.read() or CACHE_BLOB
        seq.write(n)
        llm_cache.write(cache)
        yield key, cache[:8]


def key_of(raw: bytes) -> tuple[bytes, bytes]:
    return AgentEnvelope.FromString(raw).entity_key, raw


def envelopes(activations: int, keys: int) -> list[bytes]:
    return [
        event_envelope(
            f"key-{i % keys:05d}".encode(), "tick", time_ms=T0 + i, envelope_id=f"e{i}"
        ).SerializeToString()
        for i in range(activations)
    ]


def options() -> PipelineOptions:
    return PipelineOptions(flags=[])


def run_bare(data: list[bytes]) -> float:
    started = time.perf_counter()
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options()) as p:
        _ = (
            p
            | beam.Create(data, reshuffle=False)
            | beam.Map(key_of).with_output_types(tuple[bytes, bytes])
            | beam.ParDo(BareStatefulDoFn())
        )
    return time.perf_counter() - started


def run_agent(data: list[bytes]) -> float:
    config = AgentConfig(provider_factory=make_provider)
    started = time.perf_counter()
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options()) as p:
        _ = (
            p
            | beam.Create(data, reshuffle=False)
            | RunAgent(CachedCallAgent(), ToolRegistry([]), config)
        )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activations", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    data = envelopes(args.activations, args.keys)
    # One small warm-up of each path (imports, pickling, runner start-up are not the point).
    run_bare(data[:200])
    run_agent(data[:200])
    bare = run_bare(data)
    agent = run_agent(data)
    parsed = [AgentEnvelope.FromString(raw) for raw in data]
    load, run, serialize = time_core(parsed)
    step = time_step(parsed)
    n = args.activations
    us = 1e6 / n
    print(f"{n} activations over {args.keys} keys, BundleBasedDirectRunner")
    print(f"  bare stateful DoFn: {bare:7.2f} s  {n / bare:9.0f} activations/s")
    print(
        f"  RunAgent:           {agent:7.2f} s  {n / agent:9.0f} activations/s"
        f"  ({n - args.keys} cache hits, {args.keys} misses)"
    )
    core = load + run + serialize
    print(
        f"  ratio RunAgent/bare: {agent / bare:.2f}  (target <= 2.0; floor (bare + core) / bare"
        f" = {(bare + core) / bare:.2f})"
    )
    print("per activation, microseconds:")
    print(f"  bare stateful DoFn (Beam + state traffic): {bare * us:6.1f}")
    print(f"  RunAgent:                                  {agent * us:6.1f}")
    print(
        f"  of which the core, timed without Beam:     {core * us:6.1f}"
        f"  (load_key_state {load * us:.1f}, run_activation {run * us:.1f},"
        f" trace serialization {serialize * us:.1f})"
    )
    print(f"  the per-key step (KeyStep), without Beam:  {step * us:6.1f}")
    print(f"  RunAgent minus the step (Beam's share):    {(agent - step) * us:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
