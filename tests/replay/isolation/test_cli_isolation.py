"""Every ``beam-agents-replay`` subcommand, run as the console script, against hostile agent code.

Each test runs the real command in a subprocess (isolation is process-wide and
irreversible) and checks the documented exit code and that the effect did not
happen: a local listening socket receives no connection, a file does not exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import isolation_agents as ia
import pytest
import replay_agents as ra
from incident_history import Incident
from replay_harness import AGENTS

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
HERE = AGENTS  # the helper agents: on PYTHONPATH, and the working directory


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def _env(listener: socket.socket | None = None, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    if listener is not None:
        host, port = listener.getsockname()[:2]
        env[ra.NETWORK_TARGET_ENV] = f"{host}:{port}"
    env.update(extra)
    return env


def _run(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE
    )


def _no_connection(listener: socket.socket, wait: float = 0.3) -> bool:
    readable, _, _ = select.select([listener], [], [], wait)
    return not readable


def _bundle(incident: Incident, folder: Path, registry: str, **kw: object) -> Path:
    path = folder / f"{registry.lower()}.bundle"
    path.write_bytes(incident.make(registry=f"isolation_agents:{registry}", **kw))
    return path


# -- the time limit through the replay commands -------------------------------------------------


@pytest.mark.parametrize("registry", ["TOOLS_LOOP", "TOOLS_SLEEP"])
def test_a_bundle_replay_that_never_ends_exits_3_at_the_time_limit(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    path = _bundle(incident, tmp_path, registry, seq=1)
    started = time.monotonic()
    out = _run([str(path), "--import-recorded", "--time-limit", "0.5"], _env())
    assert time.monotonic() - started < 60
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "irreproducible" in out.stdout
    assert (
        "the re-run ran past the time limit of 0.5 s and was not judged: it had reached event 0 "
        "(ACTIVATION_START 'start')" in out.stdout
    )
    assert "--time-limit SECONDS" in out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_agent_code_closing_descriptor_1_does_not_take_the_report_away(
    incident: Incident, tmp_path: Path, as_json: bool
) -> None:
    """A tool closing standard output (os.close(1)) made the report unwritable (exit 2); the
    report now goes to a descriptor of its own (cli.report_stream), so it arrives."""
    path = _bundle(incident, tmp_path, "TOOLS_CLOSE_STDOUT", seq=1)
    out = _run([str(path), "--import-recorded", *(["--json"] if as_json else [])], _env())
    assert out.returncode == 0, (out.stdout, out.stderr)
    if as_json:
        assert json.loads(out.stdout)["verdict"] == "reproduced"
    else:
        assert out.stdout.splitlines()[4] == "reproduced", out.stdout
    assert "Traceback" not in out.stderr, out.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("as_json", [False, True])
def test_a_report_that_cannot_be_written_is_exit_2_naming_the_verdict_it_carried(
    incident: Incident, tmp_path: Path, as_json: bool
) -> None:
    """Standard output on a full disk (/dev/full): the verdict must not be claimed without
    its report, in one paragraph on standard error, no traceback."""
    path = _bundle(incident, tmp_path, "TOOLS_CLOSE_STDOUT", seq=1)
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [SCRIPT, str(path), "--import-recorded", *(["--json"] if as_json else [])],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=_env(),
            cwd=HERE,
        )
    assert out.returncode == 2, out.stderr
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert (
        "the report could not be written to standard output: No space left on device (ENOSPC)"
        in (out.stderr)
    )
    assert "The re-run's verdict was reproduced (exit 0)" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1  # one paragraph


def test_a_tiny_time_limit_exits_3_without_the_last_resorts_stack_dump(
    incident: Incident, tmp_path: Path
) -> None:
    """Hostile pass: the last resort was armed at twice the limit, so --time-limit 1e-6 had
    faulthandler print every thread's stack before the wait could disarm it."""
    path = _bundle(incident, tmp_path, "TOOLS_LOOP", seq=1)
    out = _run([str(path), "--import-recorded", "--time-limit", "0.000001"], _env())
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "ran past the time limit of 1e-06 s" in out.stdout, out.stdout
    assert "Timeout (" not in out.stderr and "Thread 0x" not in out.stderr, out.stderr


def test_the_json_report_of_a_run_past_the_limit_is_complete(
    incident: Incident, tmp_path: Path
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_LOOP", seq=1)
    out = _run([str(path), "--import-recorded", "--time-limit", "0.3", "--json"], _env())
    assert out.returncode == 3, out.stderr
    document = json.loads(out.stdout)  # flushed whole before the process ended
    assert document["verdict"] == "irreproducible" and document["exit_code"] == 3
    assert "ran past the time limit of 0.3 s" in document["reason"]


def test_the_abandoned_re_run_cannot_reach_the_network_before_the_command_ends(
    incident: Incident, tmp_path: Path, listener: socket.socket
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_LOOP_THEN_CONNECT", seq=1)
    # It connects 0.2 s after the limit, while the report is printed, if the process lives.
    out = _run([str(path), "--import-recorded", "--time-limit", "0.2"], _env(listener, **{ia.HANG_SECONDS_ENV: "0.4"}))
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert _no_connection(listener)


@pytest.mark.parametrize("value", ["-1", "abc", "nan", "inf", "99999999999"])
def test_a_bad_time_limit_is_a_usage_error(incident: Incident, tmp_path: Path, value: str) -> None:
    # 99999999999 overflowed the last resort's timer: an internal error before the bound.
    path = _bundle(incident, tmp_path, "TOOLS_LOOP", seq=1)
    out = _run([str(path), "--import-recorded", f"--time-limit={value}"], _env())
    assert out.returncode == 2, out.stderr
    assert (
        f"--time-limit: must be a number of seconds from 0 to 86400 (a day; 0: no limit), got '{value}'"
        in out.stderr
    )
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
    out = _run(["check", "--import-recorded", str(path), f"--time-limit={value}"], _env())
    assert out.returncode == 2 and "--time-limit" in out.stderr


# -- check -------------------------------------------------------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_check_gives_every_hostile_bundle_its_row_and_lets_nothing_out(
    incident: Incident, tmp_path: Path, listener: socket.socket, jobs: str
) -> None:
    target = tmp_path / "written.txt"
    folder = tmp_path / "bundles"
    folder.mkdir()
    for name in ("TOOLS_THREAD", "TOOLS_ATEXIT", "TOOLS_SUBPROCESS", "TOOLS_WRITE", "TOOLS_EXIT"):
        _bundle(incident, folder, name, seq=1)
    _bundle(incident, folder, "TOOLS_DIE", all_seqs=True)
    _bundle(incident, folder, "TOOLS_LOOP", seq=1)
    (folder / "good.bundle").write_bytes(incident.make(seq=1))
    out = _run(
        ["check", "--import-recorded", str(folder), "--jobs", jobs, "--time-limit", "1.5", "--json"],
        _env(listener, **{ia.WRITE_TARGET_ENV: str(target)}),
    )
    assert out.returncode == 2, out.stderr  # a worker agent code killed: an error row
    document = json.loads(out.stdout)
    got = {
        (Path(row["path"]).stem, row["seq"]): row["verdict"]
        for group in document["groups"]
        for row in group["rows"]
    }
    assert got == {
        ("good", 1): "reproduced",
        ("tools_atexit", 1): "irreproducible",  # run at interpreter exit, before the judgement
        ("tools_thread", 1): "irreproducible",  # its thread is waited for, as at exit
        ("tools_subprocess", 1): "irreproducible",
        ("tools_write", 1): "irreproducible",
        ("tools_exit", 1): "error",
        ("tools_die", 1): "error",
        ("tools_die", 2): "error",
        ("tools_die", 3): "reproduced",
        ("tools_die", 4): "reproduced",
        ("tools_loop", 1): "irreproducible",
    }
    assert not target.exists()
    assert _no_connection(listener)
    # (The agent's own thread may print its NetworkBlockedError: that traceback is the agent's.)
    assert "internal error" not in out.stderr


# -- bundle, ls and convert-bq -----------------------------------------------------------------


def test_bundle_imports_its_hitl_module_isolated(
    incident: Incident, tmp_path: Path, listener: socket.socket
) -> None:
    snapshot, traces, events = tmp_path / "s.pb", tmp_path / "t.pb", tmp_path / "e.pb"
    snapshot.write_bytes(incident.snapshot)
    traces.write_bytes(incident.traces)
    events.write_bytes(incident.events)
    touched = tmp_path / "touched-at-import"
    out = _run(
        [
            "bundle", "-o", str(tmp_path / "x.bundle"), "--snapshot", str(snapshot),
            "--traces", str(traces), "--events", str(events), "--seq", "1",
            "--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS",
            "--hitl", "hostile_hitl:POLICY_CONNECTS",
        ],
        _env(listener, **{ia.WRITE_TARGET_ENV: str(touched)}),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr  # the module swallowed the refusals
    assert (tmp_path / "x.bundle").exists()  # the command's own output is still written
    assert not touched.exists()
    assert _no_connection(listener)
    assert "agent code also tried, and was refused: 127.0.0.1:" in out.stderr
    assert "process touch" in out.stderr


@pytest.mark.parametrize("command", ["ls", "convert-bq"])
def test_ls_and_convert_bq_run_isolated_for_their_whole_life(
    incident: Incident, tmp_path: Path, listener: socket.socket, command: str
) -> None:
    """They import no agent code; their process is isolated all the same (defence in depth),
    and ends with the command (``cli.process.finish``): nothing after ``main()`` runs."""
    snapshot, traces = tmp_path / "s.pb", tmp_path / "t.pb"
    snapshot.write_bytes(incident.snapshot)
    traces.write_bytes(incident.traces)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("")
    args = (
        ["ls", "--traces", str(traces)]
        if command == "ls"
        else ["convert-bq", str(rows), "-o", str(tmp_path / "out.pb")]
    )
    touched = tmp_path / "touched"
    host, port = listener.getsockname()[:2]
    # The console script's main(), then what code in that process could try afterwards.
    program = f"""
import socket, subprocess, sys
from replay_harness import AGENTS
from beam_agents.cli import main
sys.argv = ["beam-agents-replay", *{args!r}]
code = main()
try:
    socket.create_connection(({host!r}, {port}), timeout=5)
    print("connected")
except Exception as exc:
    print("refused", type(exc).__name__)
try:
    subprocess.run(["touch", {str(touched)!r}])
except OSError as exc:
    print("refused", type(exc).__name__)
print("exit", code)
"""
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert out.returncode == 0, out.stderr  # the command worked, and its code is the process's
    assert ("5 traced activation(s)" in out.stdout) if command == "ls" else ("0 trace events" in out.stderr)
    assert "exit" not in out.stdout and "refused" not in out.stdout and "connected" not in out.stdout
    assert not touched.exists()
    assert _no_connection(listener)


def test_agent_code_holding_the_interpreter_lock_is_ended_at_twice_the_limit(
    incident: Incident, tmp_path: Path
) -> None:
    """A catastrophic regular expression never lets the waiting thread run: at twice the
    limit faulthandler prints the stacks, then replay's watchdog says why and ends the
    process with SIGKILL, never 0 (hostile variants: test_last_resort.py)."""
    path = _bundle(incident, tmp_path, "TOOLS_REGEX", seq=1)
    started = time.monotonic()
    out = _run([str(path), "--import-recorded", "--time-limit", "0.5"], _env())
    assert time.monotonic() - started < 60
    assert out.returncode == -9, (out.returncode, out.stdout, out.stderr)  # SIGKILL: 137
    assert "Timeout (0:00:01)!" in out.stderr and "lookup_order" in out.stderr
    assert out.stderr.rstrip().endswith("before the limit."), out.stderr  # its paragraph


def test_a_check_worker_reaches_no_other_workers_pipe(incident: Incident, tmp_path: Path) -> None:
    """Hostile pass: a forked worker inherited the parent's ends of the pipes of the workers
    started before it, and those workers unpickled their tasks: agent code replaying one
    bundle ran code in the worker replaying another (and could read its rows away)."""
    folder = tmp_path / "bundles"
    folder.mkdir()
    target = tmp_path / "ran-in-another-worker.txt"
    (folder / "a_good.bundle").write_bytes(incident.make(seq=1))
    (folder / "b_hostile.bundle").write_bytes(
        incident.make(registry="isolation_agents:TOOLS_PIPE_OTHERS", seq=1)
    )
    for name in ("c_good", "d_good", "e_good"):
        (folder / f"{name}.bundle").write_bytes(incident.make(seq=1))
    out = _run(
        ["check", "--import-recorded", str(folder), "--jobs", "2", "--json"],
        _env(**{ia.OTHER_WORKER_TARGET_ENV: str(target)}),
    )
    assert not target.exists(), f"ran in process {target.read_text()}"
    document = json.loads(out.stdout)
    got = {
        Path(row["path"]).stem: row["verdict"]
        for group in document["groups"]
        for row in group["rows"]
    }
    assert got == {
        "a_good": "reproduced",
        "b_hostile": "error",  # what it wrote on its own pipe: no check message
        "c_good": "reproduced",
        "d_good": "reproduced",
        "e_good": "reproduced",
    }, out.stderr


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "gone"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_check_worker_ends_when_check_is_killed(incident: Incident, tmp_path: Path) -> None:
    """Hostile pass: a forked worker held both ends of its pipe, so with check killed it
    never saw the end of it and waited for its next task for ever (an orphan)."""
    folder = tmp_path / "bundles"
    folder.mkdir()
    (folder / "nap.bundle").write_bytes(incident.make(registry="isolation_agents:TOOLS_NAP", seq=1))
    check = subprocess.Popen(
        [SCRIPT, "check", "--import-recorded", str(folder), "--jobs", "1", "--time-limit", "0"],
        env=_env(**{ia.HANG_SECONDS_ENV: "2"}),
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not workers and time.monotonic() < deadline:
            time.sleep(0.05)
            for task in Path(f"/proc/{check.pid}/task").iterdir():
                workers += [int(p) for p in (task / "children").read_text().split()]
        assert workers, "check started no worker"
        check.kill()  # while the worker naps in agent code: it then sends its row, and waits
        check.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_state(w) not in ("Z", "gone") for w in workers):
            time.sleep(0.1)
        left = {w: _state(w) for w in workers if _state(w) not in ("Z", "gone")}
        assert not left, f"workers still running after check was killed: {left}"
    finally:
        check.kill()
        for worker in workers:
            with contextlib.suppress(OSError):
                os.kill(worker, 9)
