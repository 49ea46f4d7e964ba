"""Benchmark: ``bisect`` over 64 revisions x 10 bundles on this machine (not a test).

Prints the whole-process wall time of ``beam-agents-replay bisect`` (target: <= 20 s on
2 cores), how many probes it made, and the wall time of one probe's ``check`` alone
(the same bundles, the same ``--jobs``) beside it, measured in the same run.

    .venv/bin/python bench/bisect_revisions.py [--revisions N] [--bundles N] [--jobs N] [--out DIR]

The bundles are the demo's (``scripts/demo.py``), copied round-robin to N files; the
repository is the support desk with N commits, one of which (at two thirds) respells
the order id as agent v2 does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def make_bundles(out: Path, count: int) -> Path:
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
    sources = sorted((demo / "bundles").glob("*.bundle"))
    folder = out / "bundles"
    folder.mkdir(exist_ok=True)
    for i in range(count):
        shutil.copy(sources[i % len(sources)], folder / f"{i:03d}-{sources[i % len(sources)].name}")
    return folder


def make_repo(repo: Path, revisions: int) -> int:
    """The support desk with ``revisions`` commits; returns the index of the respelling one."""

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    shutil.copytree(
        ROOT / "examples", repo / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    git("init", "-q")
    git("config", "user.email", "bench@example.com")
    git("config", "user.name", "bench")
    git("add", "-A")
    git("commit", "-qm", "the support desk")
    change = (revisions * 2) // 3
    agent = repo / "examples" / "support_desk" / "agent.py"
    notes = repo / "NOTES.txt"
    for i in range(1, revisions):
        if i == change:
            agent.write_text(
                agent.read_text().replace(
                    "        return candidate\n", '        return candidate.replace("-", "")\n', 1
                )
            )
            subject = "respell order ids"
        else:
            notes.write_text((notes.read_text() if notes.exists() else "") + f"note {i}\n")
            subject = f"note {i}"
        git("add", "-A")
        git("commit", "-qm", subject)
    return change


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", type=int, default=64)
    parser.add_argument("--bundles", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-bisect-"))
    folder = make_bundles(out, args.bundles)
    repo = out / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    make_repo(repo, args.revisions)
    jobs = ["--jobs", str(args.jobs)]

    started = time.perf_counter()
    check = subprocess.run(
        [SCRIPT, "check", str(folder), "--json", *jobs],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    one_check = time.perf_counter() - started

    started = time.perf_counter()
    done = subprocess.run(
        [
            SCRIPT,
            "bisect",
            str(folder),
            "--repo",
            str(repo),
            "--good",
            f"HEAD~{args.revisions - 1}",
            "--bad",
            "HEAD",
            *jobs,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0 or "respell order ids" not in done.stdout:
        raise SystemExit(f"bisect did not find the change:\n{done.stdout}\n{done.stderr}")
    probes = done.stdout.split(" probes", 1)[0].rsplit(" ", 1)[-1]
    print(
        f"bisect benchmark: {args.revisions} revisions x {args.bundles} bundles, --jobs "
        f"{args.jobs} (cpus: {os.cpu_count()})"
    )
    print(f"  one check of the bundles (exit {check.returncode}): {one_check:6.2f} s")
    print(
        f"  bisect: {seconds:6.2f} s, {probes} probes, {seconds / int(probes):5.2f} s per probe "
        f"(target <= 20 s, ratio {seconds / 20:4.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
