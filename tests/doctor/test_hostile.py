"""The doctor on agents that attack it (tests/doctor/agents/hostile.py), through the console
script as a CI job runs it: each ends in a clear verdict or one-paragraph usage error with
its documented exit code, no traceback, no terminal escape written, no process left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.doctor.agents.hostile import FORKED_PIDS, IN_PIPELINE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "doctor" / "samples.json"
PROGRAM = str(Path(sys.executable).with_name("beam-agents-replay"))


def doctor(agent: str, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROGRAM, "doctor", "--agent", f"tests.doctor.agents.hostile:{agent}",
         "--registry", "tests.doctor.agents.hostile:TOOLS",
         "--provider", "tests.doctor.agents.common:make_provider",
         "--script", str(SCRIPT), "--jobs", "2", *flags],
        cwd=ROOT,
        env={**os.environ, IN_PIPELINE: "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def assert_plain(done: subprocess.CompletedProcess[str]) -> None:
    for stream in (done.stdout, done.stderr):
        assert "Traceback" not in stream, stream
        assert "\x1b" not in stream and "\x07" not in stream, repr(stream)


def test_agent_code_ending_the_pipeline_worker_is_a_usage_error_naming_the_input() -> None:
    done = doctor("ENDS_PIPELINE")
    assert done.returncode == 2, done.stderr
    assert_plain(done)
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()  # one paragraph
    assert "ended the process in the pipeline's step" in line
    assert "samples.json step 1 (customer-a)" in line, line


def test_processes_agent_code_forks_in_the_pipeline_run_are_found_and_ended(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.touch()
    done = doctor("FORKS", env={FORKED_PIDS: str(pids)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert_plain(done)
    assert "process outside a tool: agent code starts fork() (os.fork)" in done.stdout
    source = (ROOT / "tests" / "doctor" / "agents" / "hostile.py").read_text().splitlines()
    line = next(n for n, text in enumerate(source, start=1) if "os.fork()" in text)
    assert f"tests/doctor/agents/hostile.py:{line}" in done.stdout, done.stdout
    forked = [int(p) for p in pids.read_text().split()]
    assert len(forked) == 4  # one per sample activation, each sleeping for an hour
    assert [pid for pid in forked if running(pid)] == []  # ended with the pipeline's worker


def running(pid: int) -> bool:
    """Alive, not a zombie waiting for init to reap it (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_agent_code_ending_only_its_replays_is_a_finding_with_replays_usage_error() -> None:
    done = doctor("ENDS_REPLAYS")
    assert done.returncode == 1, done.stdout + done.stderr
    assert_plain(done)
    assert "environment variables: os.environ['DOCTOR_HOSTILE_PIPELINE'] read at" in done.stdout
    assert "gets error (exit 2): it stopped with a usage error: the agent code called " \
        "os._exit(3) during the re-run" in done.stdout  # fmt: skip


def test_agent_code_stalling_its_replays_is_judged_at_the_time_limit() -> None:
    # The forked replay child abandons the stalled re-run at its time limit and still ends
    # (the guard refuses os._exit while the abandoned thread runs: the child must not
    # carry on as a copy of its worker).
    done = doctor("STALLS_REPLAYS", "--time-limit", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert_plain(done)
    assert "environment variables: os.environ['DOCTOR_HOSTILE_PIPELINE'] read at" in done.stdout
    assert "gets irreproducible (exit 3): the re-run ran past the time limit of 2 s" in done.stdout


def test_terminal_escapes_from_agent_code_never_reach_the_terminal() -> None:
    done = doctor("ESCAPES")
    assert done.returncode == 1, done.stdout + done.stderr
    assert_plain(done)
    # The variable's name is shown escaped, and agent code's print() went nowhere near stdout.
    assert "os.environ['\\x1b[2J\\x1b[31mEVIL\\x1b]0;t\\x07'] read at" in done.stdout, done.stdout
    assert "owned" not in done.stdout
