"""What the retry bookkeeping costs per activation when nothing fails: this tree against another.

Usage (from the repository root):

    .venv/bin/python bench/retry_bookkeeping.py --baseline /path/to/a/checkout/of/main \
        [--rounds 7] [--activations 20000] [--keys 1000]

Since issue 24 every element reads one more state cell (the key's ``hold``), every step
carries the retry timer's target, and ``run_activation`` runs with
``contain_base_exceptions``: nothing of it does anything when no activation fails,
and this measures what it costs then. The same workload runs on two source trees,
this one and ``--baseline`` (a worktree of the code before, e.g. ``git worktree add
/tmp/main main``), each in a fresh interpreter importing that tree's ``beam_agents``,
alternating between them for ``--rounds`` rounds (the order flips every round), so
both see the same machine, load and noise:

- ``step``: ``KeyStep.envelope`` over ``--activations`` events spread over ``--keys``
  keys, each on a ``MemoryKeyStore``, an agent making one cached model call: the
  per-key step ``AgentDoFn`` runs per element, without Beam (µs per activation, CPU);
- ``pipeline``: the same events through ``RunAgent`` on the BundleBasedDirectRunner
  (µs per activation, wall time of the whole run, one warm-up run first).

Each round runs the baseline twice and this tree once between them, so it also
measures the baseline against itself: the spread of that A/A ratio is the noise the
this/baseline ratio is to be judged against. It prints each tree's median and both
ratios' medians and ranges (and each tree's fastest run, the least disturbed).
Target: this/baseline within the A/A range. Not a test:
timings depend on the machine (see STYLE.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
T0 = 1_734_000_000_000


def _worker(what: str, activations: int, keys: int) -> float:
    """µs per activation of ``what`` in this interpreter (whichever tree it imports)."""
    import beam_agents
    from beam_agents import Agent, AgentConfig, Done, ToolRegistry
    from beam_agents.key_step import KeyStep, MemoryKeyStore, activation_runner
    from beam_agents.testing import ScriptedProvider, chat_request, event_envelope

    request = chat_request("bench-model", ("system", "Be brief."), ("user", "Status?"))

    class CachedCallAgent(Agent):
        def start(self, ctx, event):  # type: ignore[no-untyped-def]
            return Done(output=ctx.complete(request).text.encode())

    sys.stderr.write(f"{what}: {beam_agents.__file__}\n")
    envelopes = [
        event_envelope(f"key-{i % keys:05d}".encode(), "tick", time_ms=T0 + i, envelope_id=f"e{i}")
        for i in range(activations)
    ]
    if what == "step":
        activate = activation_runner(
            CachedCallAgent(), ToolRegistry([]), ScriptedProvider(lambda r: "ok")
        )
        step = KeyStep(activate, inbox_limit=100)
        keyed = [(e.entity_key, e.SerializeToString()) for e in envelopes]
        stores = {key: MemoryKeyStore() for key, _ in keyed}
        started = time.process_time()
        for key, raw in keyed:
            step.envelope(key, raw, stores[key])
        elapsed = time.process_time() - started
        assert all(store.seq for store in stores.values())
        return elapsed / activations * 1e6

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    from beam_agents import RunAgent

    def run(data: list[bytes]) -> float:
        config = AgentConfig(provider_factory=_provider)
        started = time.perf_counter()
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])) as p:
            _ = (
                p
                | beam.Create(data, reshuffle=False)
                | RunAgent(CachedCallAgent(), ToolRegistry([]), config)
            )
        return time.perf_counter() - started

    data = [e.SerializeToString() for e in envelopes]
    run(data[:200])  # imports, pickling, runner start-up are not the point
    return run(data) / activations * 1e6


def _provider():  # type: ignore[no-untyped-def]
    from beam_agents.testing import ScriptedProvider

    return ScriptedProvider(lambda request: "ok")


def _measure(tree: Path, what: str, activations: int, keys: int) -> float:
    code = (
        f"import sys; sys.path.insert(0, {str(tree)!r}); sys.path.insert(0, {str(HERE / 'bench')!r});"
        f"import retry_bookkeeping as b; print(b._worker({what!r}, {activations}, {keys}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree
    )
    if str(tree / "beam_agents") not in out.stderr:
        raise SystemExit(f"the worker for {tree} imported another beam_agents:\n{out.stderr}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the code before")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--activations", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--only", choices=("step", "pipeline"), help="measure only this one")
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this": HERE}
    for what in [args.only] if args.only else ("step", "pipeline"):
        base_us: list[float] = []
        this_us: list[float] = []
        ratios: list[float] = []
        noise: list[float] = []
        for _ in range(args.rounds):
            first = _measure(trees["baseline"], what, args.activations, args.keys)
            this = _measure(trees["this"], what, args.activations, args.keys)
            second = _measure(trees["baseline"], what, args.activations, args.keys)
            base_us += [first, second]
            this_us.append(this)
            ratios.append(this / ((first + second) / 2))
            noise.append(second / first)
        print(
            f"{what:8s} {args.activations} activations over {args.keys} keys, {args.rounds} rounds: "
            f"baseline {statistics.median(base_us):6.1f} µs/activation (fastest {min(base_us):.1f}), "
            f"this {statistics.median(this_us):6.1f} (fastest {min(this_us):.1f}); "
            f"this/baseline {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
            f"baseline/baseline {statistics.median(noise):.3f} ({min(noise):.3f}-{max(noise):.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
