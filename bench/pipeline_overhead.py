"""What RunAgent costs over a bare stateful DoFn, on the BundleBasedDirectRunner.

Usage (from the repository root):

    .venv/bin/python bench/pipeline_overhead.py [--activations 20000] [--keys 1000] [--rounds 5]

In one run, two pipelines read the same serialized envelopes (``--activations``
events spread evenly over ``--keys`` keys) from an in-memory ``Create``, ``--rounds``
times each, interleaved (bare, RunAgent, bare, RunAgent, ...) so a noisy spell of the
shared machine hits both; the medians are compared:

(a) a bare stateful DoFn keyed by entity key that does the state traffic
    RunAgent does for this agent and nothing else: it declares the same cells and
    timers, reads SEQ and the six blob cells (7 reads), writes SEQ and the
    replay-cache cell (2 writes: the only blob a cached call changes) and emits one
    output and one tagged trace-batch element (RunAgent also reads its ``hold`` cell:
    that read is counted as RunAgent's own cost);
(b) ``RunAgent`` with a trivial agent making one model call per activation,
    served from the replay cache (the first activation of each key warms it:
    ``keys`` misses, ``activations - keys`` hits), emitting one output and its
    trace (one element per activation; nobody reads the per-event ``.traces``).

It prints activations/s of both (medians) and the time ratio b/a of the medians, wall
time and this process's CPU time (the runner runs in this process; on a shared machine
the CPU time is the steadier of the two), with each round's ratios and the load average
before and after. Target: <= 2.0 (issues #16, #29).
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
import os
import statistics
import time
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.transforms.userstate import TimerSpec, on_timer

# The same agent, provider and core timer as bench/core_activation.py (this directory is on
# sys.path when a bench script runs), so the two benchmarks measure one scenario.
from core_activation import T0, CachedCallAgent, make_provider, time_core, time_step

from beam_agents import AgentConfig, RunAgent, ToolRegistry
from beam_agents._protos import AgentEnvelope
from beam_agents.pipeline.agent_dofn import AgentDoFn
from beam_agents.testing import event_envelope

# The very cell and timer specs AgentDoFn declares (Beam builds a state and timer object
# per declared parameter for each element, so the bare DoFn asks for the same ones).
P_SEQ = beam.DoFn.StateParam(AgentDoFn.SEQ)
P_MEMORY = beam.DoFn.StateParam(AgentDoFn.MEMORY)
P_LLM_CACHE = beam.DoFn.StateParam(AgentDoFn.LLM_CACHE)
P_CONTINUATION = beam.DoFn.StateParam(AgentDoFn.CONTINUATION)
P_PENDING = beam.DoFn.StateParam(AgentDoFn.PENDING)
P_RESUME_HISTORY = beam.DoFn.StateParam(AgentDoFn.RESUME_HISTORY)
P_TOOL_CACHE = beam.DoFn.StateParam(AgentDoFn.TOOL_CACHE)
P_INBOX = beam.DoFn.StateParam(AgentDoFn.INBOX)
P_HOLD = beam.DoFn.StateParam(AgentDoFn.HOLD)
P_IN_FLIGHT_AT = beam.DoFn.StateParam(AgentDoFn.IN_FLIGHT_AT)
# A TimerSpec is bound to one callback: the same names and time domains, specs of its own.
HITL_TIMER = TimerSpec(AgentDoFn.HITL_TIMER.name, AgentDoFn.HITL_TIMER.time_domain)
RETRY_TIMER = TimerSpec(AgentDoFn.RETRY_TIMER.name, AgentDoFn.RETRY_TIMER.time_domain)
IN_FLIGHT_TIMER = TimerSpec(AgentDoFn.IN_FLIGHT_TIMER.name, AgentDoFn.IN_FLIGHT_TIMER.time_domain)
P_HITL_TIMER = beam.DoFn.TimerParam(HITL_TIMER)
P_RETRY_TIMER = beam.DoFn.TimerParam(RETRY_TIMER)
P_IN_FLIGHT_TIMER = beam.DoFn.TimerParam(IN_FLIGHT_TIMER)
CACHE_BLOB = b"\x0a\x09llm_cache\x10\x02\x1a" + b"\x00" * 400  # about a one-entry cache blob
TRACE_BATCH = (b"\x00" * 180, b"\x00" * 120, b"\x00" * 220)  # about one activation's trace


class BareStatefulDoFn(beam.DoFn):  # type: ignore[misc]
    """The same cells and timers as AgentDoFn; the same reads, writes and outputs; no agent
    logic. No timer is set: RunAgent sets none for an activation that ends done."""

    def process(
        self,
        element: tuple[bytes, bytes],
        seq: Any = P_SEQ,
        memory: Any = P_MEMORY,
        llm_cache: Any = P_LLM_CACHE,
        continuation: Any = P_CONTINUATION,
        pending: Any = P_PENDING,
        resume_history: Any = P_RESUME_HISTORY,
        tool_cache: Any = P_TOOL_CACHE,
        inbox: Any = P_INBOX,
        hold: Any = P_HOLD,
        in_flight_at: Any = P_IN_FLIGHT_AT,
        hitl_timer: Any = P_HITL_TIMER,
        retry_timer: Any = P_RETRY_TIMER,
        in_flight_timer: Any = P_IN_FLIGHT_TIMER,
    ) -> Any:
        key, _ = element
        n = (seq.read() or 0) + 1
        _ = (
            memory.read(),
            continuation.read(),
            pending.read(),
            resume_history.read(),
            tool_cache.read(),
        )
        cache = llm_cache.read() or CACHE_BLOB
        seq.write(n)
        llm_cache.write(cache)
        yield key, cache[:8]
        yield beam.pvalue.TaggedOutput(AgentDoFn.TAG_TRACE_BATCHES, (key, TRACE_BATCH, b""))

    # Beam requires a callback for each declared timer; none of them is ever set here.
    @on_timer(HITL_TIMER)  # type: ignore[untyped-decorator]
    def on_hitl_deadline(self) -> None:
        pass

    @on_timer(RETRY_TIMER)  # type: ignore[untyped-decorator]
    def on_retry_due(self) -> None:
        pass

    @on_timer(IN_FLIGHT_TIMER)  # type: ignore[untyped-decorator]
    def on_in_flight(self) -> None:
        pass


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


def run_bare(data: list[bytes]) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options()) as p:
        _ = (
            p
            | beam.Create(data, reshuffle=False)
            | beam.Map(key_of).with_output_types(tuple[bytes, bytes])
            | beam.ParDo(BareStatefulDoFn()).with_outputs(
                AgentDoFn.TAG_TRACE_BATCHES, main=AgentDoFn.TAG_OUTPUTS
            )
        )
    return time.perf_counter() - started, time.process_time() - cpu


def run_agent(data: list[bytes]) -> tuple[float, float]:
    config = AgentConfig(provider_factory=make_provider)
    started, cpu = time.perf_counter(), time.process_time()
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options()) as p:
        _ = (
            p
            | beam.Create(data, reshuffle=False)
            | RunAgent(CachedCallAgent(), ToolRegistry([]), config)
        )
    return time.perf_counter() - started, time.process_time() - cpu


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} (2 cores, shared)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activations", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = envelopes(args.activations, args.keys)
    print(load_average())
    # One small warm-up of each path (imports, pickling, runner start-up are not the point).
    run_bare(data[:200])
    run_agent(data[:200])
    bares: list[tuple[float, float]] = []
    agents: list[tuple[float, float]] = []
    for _ in range(args.rounds):  # interleaved: a noisy spell hits both sides
        bares.append(run_bare(data))
        agents.append(run_agent(data))
    bare, agent = statistics.median(w for w, _ in bares), statistics.median(w for w, _ in agents)
    bare_cpu = statistics.median(c for _, c in bares)
    agent_cpu = statistics.median(c for _, c in agents)
    parsed = [AgentEnvelope.FromString(raw) for raw in data]
    cpu = time.process_time()
    load, run, serialize = time_core(parsed)
    core_cpu = time.process_time() - cpu
    cpu = time.process_time()
    step = time_step(parsed)
    step_cpu = time.process_time() - cpu
    n = args.activations
    us = 1e6 / n
    print(
        f"{n} activations over {args.keys} keys, BundleBasedDirectRunner,"
        f" medians of {args.rounds} interleaved rounds"
    )
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
    print(
        f"  ratio of CPU times (this process: the runner is in-process): {agent_cpu / bare_cpu:.2f}"
        f"  (target <= 2.0; bare {bare_cpu:.2f} s, RunAgent {agent_cpu:.2f} s)"
    )
    print(
        "  each round's ratio, wall (CPU): "
        + ", ".join(
            f"{a[0] / b[0]:.2f} ({a[1] / b[1]:.2f})" for a, b in zip(agents, bares, strict=True)
        )
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
    print("per activation, microseconds of CPU time:")
    print(f"  bare stateful DoFn:                        {bare_cpu * us:6.1f}")
    print(f"  RunAgent:                                  {agent_cpu * us:6.1f}")
    print(f"  the core (load, run, trace bytes):         {core_cpu * us:6.1f}")
    print(f"  the per-key step (KeyStep), without Beam:  {step_cpu * us:6.1f}")
    print(f"  RunAgent minus the step (Beam's share):    {(agent_cpu - step_cpu) * us:6.1f}")
    print(load_average())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
