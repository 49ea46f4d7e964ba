"""Benchmark: bulk replay of incident bundles — ``check``, in-process replay, ``ReplayBundles`` (not a test).

Prints, measured side by side in one run:

  1. the in-process cost of replaying one demo bundle (``load_bundle`` + ``engine.replay``,
     a loop in one process: the floor any bulk runner can reach per bundle), and the same
     without the time limit (the agent code on the calling thread, not a thread of its own);
     then what a fork of a process holding what a ``check`` template holds costs, doing
     nothing (the floor of a fresh process per activation);
  2. ``beam-agents-replay check DIR --jobs 2`` over N demo-sized bundles (the console script,
     start-up and worker processes included): bundles/s, and its CPU per bundle against
     (1), with start-up and without it (the marginal cost of N more bundles) (target:
     >= 200 bundles/s on 2 cores, <= 1.2x the in-process cost);
  3. ``check --jobs 1`` over the same bundles (one process, no pool);
  4. the peak RSS of the ``check --jobs 2`` run (its largest process);
  5. ``ReplayBundles`` on the FnApiRunner with two worker processes over the same bundles,
     against (2);
  6. ``check --jobs 2`` and ``ReplayBundles`` again, ``--pairs`` times each, alternating
     (the machine is shared: a noisy spell hits both), and the ratio of the medians of
     their wall times (target: ReplayBundles <= 1.5x check --jobs 2 at 600 bundles,
     issue 29). ``check`` is the one this tree has (issue 23 moves it to a fresh process
     per activation, which changes what it costs).

    .venv/bin/python bench/bulk_replay.py [--bundles N] [--out DIR] [--skip-beam] [--pairs N]
        [--pairs-only]

``--pairs-only`` runs (6) alone. The load average is printed first and last.

The bundles are the demo's: ``scripts/demo.py`` runs the support desk on Beam and writes
one bundle per incident (reproduced, diverged, irreproducible, a resume, a recorded tool);
they are copied round-robin to N files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def env(root: Path = ROOT) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), e.get("PYTHONPATH")) if p)
    e["DEMO_HEADLESS"] = "1"
    return e


def make_bundles(out: Path, count: int) -> Path:
    demo = out / "demo-out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out", str(demo)],
        env=env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the demo failed:\n{done.stdout}\n{done.stderr}")
    sources = sorted((demo / "bundles").glob("*.bundle"))
    folder = out / "bundles"
    folder.mkdir()
    for i in range(count):
        shutil.copyfile(sources[i % len(sources)], folder / f"incident-{i:05d}.bundle")
    return folder


def in_process_loop(bundle: Path, rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, CPU) seconds per bundle: load + replay of one bundle in a loop in this process,
    with the default time limit, then without one (the agent code on the calling thread
    instead of replay's thread), alternating round by round so load swings hit both alike.
    """
    import dataclasses

    sys.path.insert(0, str(ROOT))
    from beam_agents.replay.engine import replay
    from beam_agents.replay.incidents.bundle import bundle_options, load_bundle

    def once(time_limit: float | None) -> None:
        options = bundle_options(load_bundle(bundle), import_recorded=True)
        replay(dataclasses.replace(options, time_limit=time_limit))

    once(60.0)  # imports and first-use costs out of the loop
    once(None)
    totals = {60.0: [0.0, 0.0], None: [0.0, 0.0]}
    for i in range(rounds):
        for limit in (60.0, None) if i % 2 else (None, 60.0):
            started, cpu = time.perf_counter(), time.process_time()
            once(limit)
            totals[limit][0] += time.perf_counter() - started
            totals[limit][1] += time.process_time() - cpu
    (w, c), (bw, bc) = totals[60.0], totals[None]
    return (w / rounds, c / rounds), (bw / rounds, bc / rounds)


_FORK_FLOOR = """
import gc, os, resource, sys, time
sys.path.insert(0, {root!r})
from beam_agents.replay.incidents import check_workers
check_workers._warm()
import examples.support_desk.agent, examples.support_desk.tools  # what a template imports
gc.freeze()
N = {count}
cpu = time.process_time()
for _ in range(N):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
own = time.process_time() - cpu
child = resource.getrusage(resource.RUSAGE_CHILDREN)
print(own / N, (child.ru_utime + child.ru_stime) / N, child.ru_minflt / N)
"""


def fork_floor(count: int = 200) -> tuple[float, float, float]:
    """(CPU s in the forking process, CPU s in the child, minor faults of the child) of one
    fork-and-exit of a process holding what a ``check`` template holds: the least a fresh
    process per activation costs before it does anything."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_FLOOR.format(root=str(ROOT), count=count)],
        env=env(), cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    own, child, faults = done.stdout.split()
    return float(own), float(child), float(faults)


def script_root(script: str) -> Path:
    """The checkout a console script belongs to (``ROOT/.venv/bin/beam-agents-replay``)."""
    return Path(script).resolve().parents[2] if script != SCRIPT else ROOT


def consent_flags(script: str) -> list[str]:
    """``--import-recorded`` where ``script``'s check has it (a checkout from before it
    imported the bundles' recorded code without asking)."""
    done = subprocess.run(
        [script, "check", "--help"], capture_output=True, text=True, env=env(script_root(script))
    )
    return ["--import-recorded"] if "--import-recorded" in done.stdout else []


def run_check(
    folder: Path, jobs: int, script: str = SCRIPT
) -> tuple[float, float, float, dict[str, int]]:
    """(wall s, CPU s of every process, peak RSS MB of the largest, verdict counts) of the CLI."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, u.ru_utime + u.ru_stime, u.ru_maxrss / 1024, p.returncode)\n"
        "sys.stdout.write(p.stdout)\n"
    )
    done = subprocess.run(
        [
            sys.executable, "-c", code, script, "check", str(folder), "--jobs", str(jobs),
            "--json", *consent_flags(script),
        ],
        env=env(script_root(script)),  # each checkout runs its own package
        capture_output=True,
        text=True,
        check=True,
    )
    first, _, rest = done.stdout.partition("\n")
    wall, cpu, rss, returncode = first.split()
    report = json.loads(rest)
    assert int(returncode) == report["exit_code"], (returncode, report["exit_code"])
    return float(wall), float(cpu), float(rss), report["counts"]


_BEAM = """
import sys, time, pickle
from pathlib import Path
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
sys.path.insert(0, {tests!r})
import conftest  # the suite's workaround for Beam's multi-process shutdown race
conftest._patch_beam_control_connection_close()
from beam_agents.pipeline import ReadBundleFiles, ReplayBundles

class Count(beam.DoFn):
    def __init__(self, out):
        self.out = out
    def process(self, kv):
        Path(self.out, str(abs(hash(kv[0])))).write_text(repr(kv))

options = PipelineOptions(flags=[], direct_running_mode="multi_processing", direct_num_workers=2)
started = time.perf_counter()
with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
    out = p | ReadBundleFiles({pattern!r}) | ReplayBundles(import_recorded=True)
    out.counts | beam.ParDo(Count({counts!r}))
import resource
children = resource.getrusage(resource.RUSAGE_CHILDREN)
own = resource.getrusage(resource.RUSAGE_SELF)
cpu = children.ru_utime + children.ru_stime + own.ru_utime + own.ru_stime
print(time.perf_counter() - started, cpu)
"""


def run_beam(folder: Path, out: Path) -> tuple[float, float, float, dict[str, int]]:
    """(wall s, s in the pipeline, CPU s of every process, verdict counts) of ReplayBundles."""
    counts_dir = out / "beam-counts"
    counts_dir.mkdir(parents=True)
    code = _BEAM.format(
        tests=str(ROOT / "tests"), pattern=str(folder / "*.bundle"), counts=str(counts_dir)
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env(), cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the Beam run failed:\n{done.stderr[-3000:]}")
    pipeline_text, cpu_text = done.stdout.strip().splitlines()[-1].split()
    pipeline_s, cpu = float(pipeline_text), float(cpu_text)
    counts: dict[str, int] = {}
    for path in counts_dir.iterdir():
        (verdict, _cause), n = eval(path.read_text())  # our own repr output
        counts[verdict] = counts.get(verdict, 0) + n
    return wall, pipeline_s, cpu, counts


def pairs_beam_vs_check(folder: Path, out: Path, pairs: int) -> None:
    """(6): check --jobs 2 and ReplayBundles alternately, the ratio of the median walls."""
    import statistics

    checks: list[tuple[float, float]] = []
    beams: list[tuple[float, float]] = []
    for i in range(pairs):
        wall, cpu, _, _ = run_check(folder, 2)
        checks.append((wall, cpu))
        wall_b, _, cpu_b, _ = run_beam(folder, out / f"beam-pair-{i}")
        beams.append((wall_b, cpu_b))
    check_s, beam_s = (statistics.median(w for w, _ in runs) for runs in (checks, beams))
    check_cpu, beam_cpu = (statistics.median(c for _, c in runs) for runs in (checks, beams))
    n = len(list(folder.glob("*.bundle")))
    print(
        f"  6. alternating, {pairs} runs each, {n} bundles: check --jobs 2 median {check_s:.2f} s,"
        f" ReplayBundles median {beam_s:.2f} s: {beam_s / check_s:.2f}x   (target <= 1.5x)"
    )
    print(
        f"     CPU of every process, medians: check --jobs 2 {check_cpu:.2f} s, ReplayBundles"
        f" {beam_cpu:.2f} s: {beam_cpu / check_cpu:.2f}x (steadier than wall time when shared)"
    )
    print(
        "     each pair, wall (CPU), ReplayBundles / check: "
        + ", ".join(
            f"{b[0]:.2f} ({b[1]:.2f}) / {c[0]:.2f} ({c[1]:.2f}) s"
            for b, c in zip(beams, checks, strict=True)
        )
        + f"; load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bundles", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=300, help="in-process loop length")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--skip-beam", action="store_true")
    parser.add_argument("--pairs", type=int, default=3, help="alternating runs of (6)")
    parser.add_argument("--pairs-only", action="store_true", help="only (6)")
    parser.add_argument(
        "--compare",
        metavar="SCRIPT",
        help="another checkout's beam-agents-replay (e.g. main's .venv/bin/beam-agents-replay): "
        "its check --jobs 2 is measured over the same bundles, alternating with this one's",
    )
    parser.add_argument("--compare-rounds", type=int, default=3)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bulk-replay-"))
    out.mkdir(parents=True, exist_ok=True)
    n = args.bundles
    print(f"bulk replay benchmark: {n} demo bundles in {out} (cpus: {os.cpu_count()})")
    folder = make_bundles(out, n)
    sizes = sorted({p.stat().st_size for p in folder.glob("*.bundle")})
    print(f"  bundles: {len(sizes)} distinct, {sizes[0]}-{sizes[-1]} bytes each")
    print(f"  load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.pairs_only:
        pairs_beam_vs_check(folder, out, args.pairs)
        if args.out is None:
            shutil.rmtree(out)
        return 0

    pairs = [in_process_loop(folder / f"incident-{i:05d}.bundle", args.rounds) for i in range(5)]
    floor_wall = sum(p[0][0] for p in pairs) / len(pairs)
    floor_cpu = sum(p[0][1] for p in pairs) / len(pairs)
    bare_wall = sum(p[1][0] for p in pairs) / len(pairs)
    bare_cpu = sum(p[1][1] for p in pairs) / len(pairs)
    print(
        f"  1. in-process loop (the 5 demo bundles, {args.rounds} rounds each): "
        f"{floor_wall * 1000:.2f} ms/bundle wall ({1 / floor_wall:.0f}/s), "
        f"{floor_cpu * 1000:.2f} ms CPU"
    )
    print(
        f"     the same without the time limit (agent code on the calling thread), interleaved: "
        f"{bare_wall * 1000:.2f} ms wall, {bare_cpu * 1000:.2f} ms CPU; the limit costs "
        f"{floor_wall / bare_wall:.3f}x wall, {floor_cpu / bare_cpu:.3f}x CPU"
    )
    own, child, faults = fork_floor()
    print(
        f"     a fork of a template-like process and its exit, doing nothing: {own * 1000:.2f} ms "
        f"CPU to fork + {child * 1000:.2f} ms in the child ({faults:.0f} minor faults) = "
        f"{(own + child) * 1000:.2f} ms, the floor per activation of a fresh process; 200 "
        f"bundles/s on {os.cpu_count()} cores allows {(os.cpu_count() or 1) / 200 * 1000:.1f} "
        "ms of CPU per bundle, everything included"
    )
    double = out / "bundles-2x"
    double.mkdir()
    for i, path in enumerate(sorted(folder.glob("*.bundle")) * 2):
        os.link(path, double / f"incident-{i:05d}.bundle")
    wall2x, cpu2x, _, _ = run_check(double, 2)
    wall2, cpu2, rss2, counts2 = run_check(folder, 2)
    wall1, cpu1, rss1, counts1 = run_check(folder, 1)
    assert counts1 == counts2, (counts1, counts2)
    print(f"  2. check --jobs 2: {wall2:.2f} s wall, {n / wall2:.0f} bundles/s   (target >= 200/s)")
    print(
        f"     CPU per bundle, every process and start-up included: {cpu2 / n * 1000:.2f} ms = "
        f"{cpu2 / n / floor_cpu:.2f}x the in-process CPU   (target <= 1.2x)"
    )
    marginal = (cpu2x - cpu2) / n
    # On a noisy machine the larger run can finish no later than the smaller one:
    # then there is no marginal wall rate to print (it printed 10^12 bundles/s).
    extra_wall = wall2x - wall2
    wall_rate = f"{n / extra_wall:.0f} bundles/s" if extra_wall > 0 else "not measurable (noise)"
    print(
        f"     marginal CPU per bundle ({n} more bundles, start-up excluded): "
        f"{marginal * 1000:.2f} ms = {marginal / floor_cpu:.2f}x the in-process CPU; marginal "
        f"wall rate {wall_rate}"
    )
    print(
        f"  3. check --jobs 1: {wall1:.2f} s wall, {n / wall1:.0f} bundles/s, CPU "
        f"{cpu1 / n * 1000:.2f} ms/bundle; --jobs 2 is {wall1 / wall2:.2f}x faster in wall time"
    )
    print(f"  4. peak RSS (largest process): --jobs 2 {rss2:.0f} MB, --jobs 1 {rss1:.0f} MB")
    if args.compare:
        mine: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        for _ in range(args.compare_rounds):
            wall_c, cpu_c, _, counts_c = run_check(folder, 2, args.compare)
            wall_m, cpu_m, _, counts_m = run_check(folder, 2)
            assert counts_c == counts_m, (counts_c, counts_m)
            theirs.append((wall_c, cpu_c))
            mine.append((wall_m, cpu_m))
        best_m, best_c = min(mine), min(theirs)
        print(
            f"     side by side with {args.compare} ({args.compare_rounds} rounds each, "
            f"alternating; best of each): this checkout {n / best_m[0]:.0f} bundles/s "
            f"({best_m[1] / n * 1000:.2f} ms CPU/bundle), the other {n / best_c[0]:.0f} "
            f"bundles/s ({best_c[1] / n * 1000:.2f} ms CPU/bundle): "
            f"{best_m[0] / best_c[0]:.2f}x its wall time"
        )
    print(f"     verdicts: {counts2}")
    if not args.skip_beam:
        wall_b, pipeline_b, cpu_b, counts_b = run_beam(folder, out / "beam-1x")
        wall_b2, _, cpu_b2, _ = run_beam(double, out / "beam-2x")
        assert counts_b == counts2, (counts_b, counts2)
        print(
            f"  5. ReplayBundles, FnApiRunner, 2 worker processes: {wall_b:.2f} s wall "
            f"({pipeline_b:.2f} s in the pipeline), {n / wall_b:.0f} bundles/s = "
            f"{wall_b / wall2:.2f}x check --jobs 2's wall time   (target <= 1.5x; see 6)"
        )
        print(
            f"     CPU, every process and start-up included: {cpu_b:.2f} s = "
            f"{cpu_b / n * 1000:.2f} ms/bundle = {cpu_b / cpu2:.2f}x check --jobs 2's CPU"
        )
        print(
            f"     marginal ({n} more bundles): {(cpu_b2 - cpu_b) / n * 1000:.2f} ms CPU/bundle = "
            f"{(cpu_b2 - cpu_b) / (cpu2x - cpu2):.2f}x check's marginal CPU; wall "
            f"{n / max(wall_b2 - wall_b, 1e-9):.0f} bundles/s = "
            f"{(wall_b2 - wall_b) / max(wall2x - wall2, 1e-9):.2f}x check's marginal wall time"
        )
    if not args.skip_beam:
        pairs_beam_vs_check(folder, out, args.pairs)
    print(f"  load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.out is None:
        shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
