"""Activations per second of RunAgent when the model is slow, by ``AgentConfig.max_in_flight``
and by how the input arrives (bundles of 1, 10 or 100 elements).

Usage (from the repository root):

    .venv/bin/python bench/pipeline_throughput.py [--keys 200,1000] [--latency-ms 200]
        [--limits 16,64,256] [--bundles 1,10,100] [--runners streaming,fnapi,fnapi-nocache]
        [--repeat 1]

Each run feeds ``keys`` keys x 1 event to RunAgent; every activation makes one model call
to a ScriptedProvider that sleeps ``--latency-ms`` before answering (a remote model's wait,
no CPU). Streaming (the BundleBasedDirectRunner fed by a TestStream) the input arrives in
bundles of ``--bundles`` elements (one ``add_elements`` each); on the FnApiRunner it is
one ``Create`` (one bundle: the in-process FnApiRunner cannot be made to cut a source into
small bundles), with Beam's default state cache (``fnapi``) and with it off
(``fnapi-nocache``): the in-process worker sizes every value it caches with ``objsize``,
which walks the globals of every loaded module each time (milliseconds per state write,
most of such a run's time). Activations are in flight across bundles: a bundle only starts
them, later bundles commit them.

Why the TestStream rows stay far below the bound with small bundles: the DirectRunner's
monitor adds the stream's next event only in a pass where no timer fired and nothing else
runs (``_MonitorTask._add_work_if_necessary`` in ``runners/direct/executor.py``), and the
key's ``in_flight`` timer, due at once, fires in every pass while an activation is in
flight. So each ``add_elements`` waits until every activation before it is committed:
with bundles of ``b`` elements at most ``b`` are in flight. That is the test harness's
scheduling, not a runner's: see docs/pipeline.md, *What a production runner needs*.

For each run it prints activations/s (keys / the time from the first model call's start to
the last one's end, *span act/s*; and keys / wall time of the whole pipeline run, start-up
included, *wall act/s*) against the **target**: 0.8 x ``max_in_flight / latency`` where
the keys outnumber the slots, else 0.8 x the capacity bound
``keys / ceil(keys / max_in_flight) / latency``; the *rounds* column is that same
formula for every row (the most whole rounds of ``max_in_flight`` allow). With ``--repeat N`` each configuration
runs N times, interleaved, and the median is printed. The load average is printed first
and last: the machine is shared. Not a test: timings depend on the machine (STYLE.md).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner, worker_handlers
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue
from core_activation import T0, CachedCallAgent

from beam_agents import AgentConfig, RunAgent, ToolRegistry
from beam_agents._protos import LlmRequest
from beam_agents.testing import ScriptedProvider, event_envelope

STATE_CACHE_MB = worker_handlers.STATE_CACHE_SIZE_MB
"""The in-process FnApiRunner's state cache size, Beam's default (100 MB)."""
TARGET = 0.8
"""The fraction of the latency's bound to reach (issue 29)."""
LATENCY_S = 0.2
"""Set from ``--latency-ms`` before any pipeline is built (the provider reads it)."""
CALLS: list[tuple[float, float]] = []
"""(start, end) of every slow model call of the current run (list.append is thread-safe)."""


def slow_answer(request: LlmRequest) -> str:
    started = time.perf_counter()
    time.sleep(LATENCY_S)
    CALLS.append((started, time.perf_counter()))
    return "All good."


def make_slow_provider() -> ScriptedProvider:
    return ScriptedProvider(slow_answer)


def make_instant_provider() -> ScriptedProvider:
    return ScriptedProvider(lambda request: "All good.")


def envelopes(keys: int) -> list[bytes]:
    return [
        event_envelope(
            f"key-{i:05d}".encode(), "tick", time_ms=T0 + i, envelope_id=f"e{i}"
        ).SerializeToString()
        for i in range(keys)
    ]


def run(runner: str, data: list[bytes], config: AgentConfig, bundle: int) -> float:
    """Seconds for the whole pipeline over ``data`` on ``runner``."""
    agent = CachedCallAgent()
    started = time.perf_counter()
    if runner == "streaming":
        stream = TestStream()
        for at in range(0, len(data), bundle):
            stream = stream.add_elements(
                [
                    TimestampedValue(raw, (T0 + at + i) / 1000)
                    for i, raw in enumerate(data[at : at + bundle])
                ]
            )
        stream = stream.advance_watermark_to_infinity()
        options = PipelineOptions(flags=[], streaming=True)
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
            _ = p | stream | RunAgent(agent, ToolRegistry([]), config)
    else:
        # The in-process worker's state cache is sized at construction from this module
        # global; 0 turns it off (see the module docstring for why that is measured too).
        worker_handlers.STATE_CACHE_SIZE_MB = 0 if runner == "fnapi-nocache" else STATE_CACHE_MB
        with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[])) as p:
            _ = p | beam.Create(data, reshuffle=False) | RunAgent(agent, ToolRegistry([]), config)
    return time.perf_counter() - started


def bound(keys: int, limit: int) -> tuple[float, str]:
    """The activations/s the model's latency allows (the target is 0.8 of it), and which
    bound it is."""
    if keys > limit:
        return limit / LATENCY_S, "max_in_flight/latency"
    return keys / math.ceil(keys / limit) / LATENCY_S, "capacity bound"


def rounds_bound(keys: int, limit: int) -> float:
    """The activations/s of whole rounds: every key's activation waits the latency, at most
    ``limit`` at once (equal to ``bound`` where the keys do not outnumber the slots)."""
    return keys / math.ceil(keys / limit) / LATENCY_S


def main() -> int:
    global LATENCY_S
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="200,1000")
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--limits", default="16,64,256")
    parser.add_argument("--bundles", default="1,10,100")
    parser.add_argument("--runners", default="streaming,fnapi,fnapi-nocache")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    LATENCY_S = args.latency_ms / 1000
    limits = [int(x) for x in args.limits.split(",")]
    key_counts = [int(x) for x in args.keys.split(",")]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"1 event a key, one model call each, model latency {args.latency_ms} ms")
    configs = []
    for runner in args.runners.split(","):
        bundles = [int(x) for x in args.bundles.split(",")] if runner == "streaming" else [0]
        for bundle in bundles:
            for keys in key_counts:
                for limit in limits:
                    configs.append((runner, bundle, keys, limit))
    run("streaming", envelopes(20), AgentConfig(provider_factory=make_instant_provider), 20)
    spans: dict[tuple[str, int, int, int], list[float]] = {c: [] for c in configs}
    walls: dict[tuple[str, int, int, int], list[float]] = {c: [] for c in configs}
    for _ in range(args.repeat):  # interleaved: each round runs every configuration once
        for runner, bundle, keys, limit in configs:
            CALLS.clear()
            config = AgentConfig(provider_factory=make_slow_provider, max_in_flight=limit)
            wall = run(runner, envelopes(keys), config, bundle)
            span = max(end for _, end in CALLS) - min(start for start, _ in CALLS)
            spans[(runner, bundle, keys, limit)].append(keys / span)
            walls[(runner, bundle, keys, limit)].append(keys / wall)
    print(
        f"\n{'runner':<13} {'bundle':>6} {'keys':>5} {'in flight':>9} {'span act/s':>10}"
        f" {'wall act/s':>10} {'bound':>7} {'span/bound':>10} {'wall/bound':>10}"
        f" {'rounds':>7} {'span/rounds':>11}  target: span/bound >= {TARGET}"
    )
    for key in configs:
        runner, bundle, keys, limit = key
        rate = statistics.median(spans[key])
        wall_rate = statistics.median(walls[key])
        limit_rate, what = bound(keys, limit)
        best = rounds_bound(keys, limit)
        print(
            f"{runner:<13} {bundle or 'all':>6} {keys:>5} {limit:>9} {rate:>10.1f}"
            f" {wall_rate:>10.1f} {limit_rate:>7.1f} {rate / limit_rate:>10.2f}"
            f" {wall_rate / limit_rate:>10.2f} {best:>7.1f} {rate / best:>11.2f}  of {what}"
            + ("" if rate >= TARGET * limit_rate else "   BELOW TARGET")
        )
    print(
        "\nrounds: keys / ceil(keys / max_in_flight) / latency, the most any runner reaches"
        " when each key's one activation waits the latency (whole rounds of max_in_flight);"
        " where it is below 0.8 x max_in_flight/latency (200 keys, 64 in flight: 250 < 256)"
        " the target cannot be met on any runner."
    )
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    # Run main() from this file imported as a module: Beam then pickles the providers by
    # reference, so their CALLS is this process's list, not a copy pickled by value.
    import pipeline_throughput

    raise SystemExit(pipeline_throughput.main())
