"""Activations per second of RunAgent when the model is slow, by ``AgentConfig.max_in_flight``.

Usage (from the repository root):

    .venv/bin/python bench/pipeline_throughput.py [--keys 1000] [--latency-ms 200]
        [--limits 1,16,64,256] [--serial-keys 20] [--runners streaming,fnapi]

Each run feeds ``--keys`` keys x 1 event to RunAgent; every activation makes one model
call to a ScriptedProvider that sleeps ``--latency-ms`` before answering (a remote model's
wait, no CPU). The input arrives as one bundle: one ``TestStream.add_elements`` on the
BundleBasedDirectRunner in streaming mode, one ``Create`` on the FnApiRunner.

For each runner and limit it prints activations/s (keys / wall time of the whole
pipeline run, start-up included) against the limit ``max_in_flight / latency`` (no
worker can beat it: each activation waits ``latency`` in one of ``max_in_flight``
slots). Target: >= 0.8 of the limit up to 64 in flight.
It also runs the same input with an instant model (*instant s*): what the runner itself
needs for these keys. ``keys / instant`` caps the rate whatever the limit; the last
column compares the rate with ``min(limit, keys / instant)``. On the in-process
FnApiRunner that cap is low: its state cache sizes every cached value with objsize,
which walks every loaded module's globals (milliseconds per state access, a dozen
accesses per new key), in the serial mode as much as in the concurrent one;
``--fnapi-state-cache-mb 0`` turns that cache off (what the rate is without it).
*span act/s* leaves the runner's start-up and shutdown out: keys / the time from the
first model call's start to the last one's end (both runners run the provider in this
process).

``max_in_flight=1`` would take keys x latency (200 s for the defaults): it runs
``--serial-keys`` keys and says so; its rate does not depend on the key count (one at a
time), so it is reported as measured, not scaled up.
Not a test: timings depend on the machine (see STYLE.md).
"""

from __future__ import annotations

import argparse
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue
from core_activation import T0, CachedCallAgent

from beam_agents import AgentConfig, RunAgent, ToolRegistry
from beam_agents._protos import LlmRequest
from beam_agents.testing import ScriptedProvider, event_envelope

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


def run(runner: str, data: list[bytes], config: AgentConfig) -> float:
    """Seconds for the whole pipeline over ``data`` on ``runner``."""
    agent = CachedCallAgent()
    started = time.perf_counter()
    if runner == "streaming":
        stream = TestStream().add_elements(
            [TimestampedValue(raw, (T0 + i) / 1000) for i, raw in enumerate(data)]
        )
        stream = stream.advance_watermark_to_infinity()
        options = PipelineOptions(flags=[], streaming=True)
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
            _ = p | stream | RunAgent(agent, ToolRegistry([]), config)
    else:
        with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[])) as p:
            _ = p | beam.Create(data, reshuffle=False) | RunAgent(agent, ToolRegistry([]), config)
    return time.perf_counter() - started


def main() -> int:
    global LATENCY_S
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--limits", default="1,16,64,256")
    parser.add_argument("--serial-keys", type=int, default=20)
    parser.add_argument("--runners", default="streaming,fnapi")
    parser.add_argument("--fnapi-state-cache-mb", type=int, default=None)
    args = parser.parse_args()
    if args.fnapi_state_cache_mb is not None:
        from apache_beam.runners.portability.fn_api_runner import worker_handlers

        worker_handlers.STATE_CACHE_SIZE_MB = args.fnapi_state_cache_mb
    LATENCY_S = args.latency_ms / 1000
    limits = [int(x) for x in args.limits.split(",")]
    runners = args.runners.split(",")
    names = {
        "streaming": "BundleBasedDirectRunner, streaming",
        "fnapi": "FnApiRunner, in process"
        + (
            ""
            if args.fnapi_state_cache_mb is None
            else f", state cache {args.fnapi_state_cache_mb} MB"
        ),
    }
    print(
        f"{args.keys} keys x 1 event, one model call each, model latency {args.latency_ms} ms;"
        f" limit = max_in_flight / latency"
    )
    for runner in runners:
        print(f"\n{names[runner]}")
        run(runner, envelopes(20), AgentConfig(provider_factory=make_instant_provider))  # warm-up
        print(
            f"  {'max_in_flight':>13} {'keys':>5} {'wall s':>7} {'act/s':>7} {'limit':>7}"
            f" {'of limit':>8} {'instant s':>9} {'of min(limit, keys/instant)':>28}"
            f" {'span act/s':>10} {'of limit':>8}"
        )
        for limit in limits:
            keys = args.serial_keys if limit == 1 else args.keys
            data = envelopes(keys)
            instant = run(
                runner,
                data,
                AgentConfig(provider_factory=make_instant_provider, max_in_flight=limit),
            )
            CALLS.clear()
            wall = run(
                runner, data, AgentConfig(provider_factory=make_slow_provider, max_in_flight=limit)
            )
            span = max(end for _, end in CALLS) - min(start for start, _ in CALLS)
            ceiling = min(limit, keys) / LATENCY_S
            rate = keys / wall
            bound = min(ceiling, keys / instant)
            print(
                f"  {limit:>13} {keys:>5} {wall:>7.2f} {rate:>7.1f} {ceiling:>7.1f}"
                f" {rate / ceiling:>8.2f} {instant:>9.2f} {rate / bound:>28.2f}"
                f" {keys / span:>10.1f} {keys / span / ceiling:>8.2f}"
                + ("   (fewer keys: one at a time)" if limit == 1 else "")
            )
    return 0


if __name__ == "__main__":
    # Run main() from this file imported as a module: Beam then pickles the providers by
    # reference, so their CALLS is this process's list, not a copy pickled by value.
    import pipeline_throughput

    raise SystemExit(pipeline_throughput.main())
