"""Benchmark: a replay with a reference run beside it vs the same replay alone (not a test).

Prints, measured side by side in one run (rounds interleaved, so the shared machine's
load falls on both alike):

  1. the whole process of ``beam-agents-replay`` on the demo's diverged incident (Bob's
     refund replayed with agent v2), alone;
  2. the same with ``--reference examples.support_desk.agent:AGENT`` (the reference run in
     a fresh process of its own first, its document proved here), and the ratio
     (target: <= 2.2x);
  3. the same reference by ``--reference-path DIR`` (another checkout's agent modules).

    .venv/bin/python bench/reference_run.py [--rounds N] [--out DIR]

The inputs are the demo's: ``scripts/demo.py`` runs the support desk on Beam first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def make_inputs(out: Path) -> Path:
    demo = out / "demo-out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out", str(demo)],
        env={**os.environ, "DEMO_HEADLESS": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the demo failed:\n{done.stdout}\n{done.stderr}")
    return demo


def replay_argv(demo: Path) -> list[str]:
    return [
        SCRIPT,
        "--snapshot",
        str(demo / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"),
        "--traces",
        str(demo / "traces"),
        "--event",
        str(demo / "events" / "msg-bob-1.pb"),
        "--agent",
        "examples.support_desk.agent_v2:AGENT",
        "--registry",
        "examples.support_desk.tools:TOOLS",
        "--seq",
        "1",
    ]


def timed(argv: list[str], expect: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 1 or expect not in done.stdout:
        raise SystemExit(f"unexpected result of {argv}:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-reference-"))
    demo = make_inputs(out)
    prod = out / "prod"
    if not prod.exists():
        shutil.copytree(
            ROOT / "examples", prod / "examples", ignore=shutil.ignore_patterns("__pycache__")
        )
        shutil.copy(
            prod / "examples/support_desk/agent.py", prod / "examples/support_desk/agent_v2.py"
        )
    base = replay_argv(demo)
    both = '"B-2001"} ✓ | replayed {"order_id": "B2001"} ≠'
    runs = {
        "alone": (base, "diverged"),
        "--reference": ([*base, "--reference", "examples.support_desk.agent:AGENT"], both),
        "--reference-path": ([*base, "--reference-path", str(prod)], both),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for argv, expect in runs.values():
        timed(argv, expect)  # warm the file cache once
    for _ in range(args.rounds):
        for name, (argv, expect) in runs.items():
            times[name].append(timed(argv, expect))
    alone = statistics.median(times["alone"])
    print(
        f"reference run benchmark: the demo's diverged incident, {args.rounds} interleaved "
        f"rounds (cpus: {os.cpu_count()})"
    )
    for name, samples in times.items():
        median = statistics.median(samples)
        ratio = median / alone
        target = "" if name == "alone" else "  (target <= 2.2x)"
        print(
            f"  {name:16} median {median * 1000:7.1f} ms  min {min(samples) * 1000:7.1f} ms  "
            f"ratio {ratio:4.2f}x{target}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
