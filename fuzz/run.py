"""Run the atheris fuzz targets of ``fuzz/targets.py``; print the counts of each run.

    .venv/bin/python fuzz/run.py [--runs 100000] [--seed 1] [TARGET ...]   (default: all)

Each target runs in its own process under libFuzzer with ``-timeout=10`` (a run
over 10 s is a finding) and ``-rss_limit_mb=500`` (so is a process over 500 MB),
starting from a copy of ``fuzz/corpus/<target>/`` (the repository's corpus is
never written). A finding stops that target; its input is saved under
``fuzz/findings/`` and the command exits 1. ``make fuzz`` runs 100,000 mutations
per target; ``tests/test_fuzz_corpus.py`` a short seeded run of each.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import targets  # noqa: E402

TIMEOUT_S = 10
RSS_LIMIT_MB = 500


def _child(target: str, argv: list[str]) -> None:
    """Inside the fuzzing process: instrument beam_agents, then hand control to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["beam_agents", "replay_tui"]):
        import beam_agents.bigquery_rows
        import beam_agents.cli
        import beam_agents.replay.engine
        import beam_agents.replay.inputs.sources
        import beam_agents.replay.inputs.traces  # noqa: F401
    test_one = targets.TARGETS[target]
    atheris.Setup([sys.argv[0], *argv], test_one)
    atheris.Fuzz()


def fuzz(target: str, runs: int, seed: int, findings: Path) -> tuple[int, int, float, str]:
    """(runs done, exit code, seconds, the last lines) of one target's libFuzzer run."""
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target}-") as tmp:
        corpus = Path(tmp) / "corpus"
        shutil.copytree(targets.CORPUS / target, corpus) if (targets.CORPUS / target).is_dir() else corpus.mkdir()
        findings.mkdir(parents=True, exist_ok=True)
        argv = [
            f"-runs={runs}", f"-seed={seed}", f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}",
            f"-artifact_prefix={findings}/{target}-", "-print_final_stats=1", "-max_len=65536",
            str(corpus),
        ]  # fmt: skip
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, __file__, "--child", target, "--", *argv],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
    log = out.stdout + out.stderr
    done = re.search(r"Done (\d+) runs", log)
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    count = int(done.group(1)) if done else int(executed.group(1)) if executed else 0
    tail = "\n".join(log.strip().splitlines()[-25:]) if out.returncode else ""
    return count, out.returncode, seconds, tail


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        target = sys.argv[2]
        argv = sys.argv[sys.argv.index("--") + 1 :]
        _child(target, argv)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=list(targets.TARGETS), metavar="TARGET")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--findings", type=Path, default=HERE / "findings")
    args = parser.parse_args()
    failed = False
    print(f"{'target':10} {'runs':>8} {'seconds':>8}  result (timeout {TIMEOUT_S} s, rss limit {RSS_LIMIT_MB} MB)")
    for target in args.targets:
        count, code, seconds, tail = fuzz(target, args.runs, args.seed, args.findings)
        verdict = "0 findings (no traceback, internal error, timeout or RSS over the limit)"
        if code != 0:
            failed = True
            verdict = f"FINDING (exit {code}); input saved under {args.findings}/\n{tail}"
        print(f"{target:10} {count:8d} {seconds:8.1f}  {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
