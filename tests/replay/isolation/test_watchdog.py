"""Replay's last resort past ``--time-limit``, through the console script, against agent code
that holds the interpreter lock after trying to switch that last resort off.

The watchdog is a process forked before agent code is imported
(``beam_agents.replay.isolation.watchdog``): at twice the limit it writes one paragraph to
standard error and ends the replay with SIGKILL (status 137, never a verdict's code).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import last_resort_agents as lra
import pytest
from incident_history import Incident
from machine_pace import limit_for_the_rerun
from replay_harness import AGENTS

from beam_agents.replay.isolation.watchdog import KILLED_STATUS

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
HERE = AGENTS  # the helper agents: on PYTHONPATH, and the working directory
PARAGRAPH = "beam-agents-replay: stopped: agent code was still running 1 s after it started"
ABANDONED = "beam-agents-replay: stopped: agent code that ran past its time limit of 0.5 s"


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def _replay(
    incident: Incident, folder: Path, registry: str, *extra: str, **env: str
) -> subprocess.CompletedProcess[str]:
    path = folder / f"{registry.lower()}.bundle"
    path.write_bytes(incident.make(registry=f"last_resort_agents:{registry}", seq=1))
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        **env,
    }
    # A replay whose last resort was switched off would run for ever: 30 s is "for ever".
    return subprocess.run(
        [SCRIPT, str(path), "--import-recorded", "--time-limit", "0.5", *extra],
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        cwd=HERE,
    )


def _assert_stopped_by_the_watchdog(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == -9, (out.returncode, out.stdout, out.stderr)  # SIGKILL: 137
    assert KILLED_STATUS == 137
    assert PARAGRAPH in out.stderr, out.stderr
    paragraph = out.stderr[out.stderr.index(PARAGRAPH) :]
    for words in (
        "past twice its time limit of 0.5 s",
        "native code",
        "held the Python interpreter",
        "SIGKILL (exit status 137)",
        "the activation was not judged, and this is no verdict",
        "raise the limit with --time-limit SECONDS",
        "debugger",
    ):
        assert words in paragraph, (words, paragraph)
    assert paragraph.count("\n") == 1  # one paragraph, the last thing written
    assert out.stdout == ""  # no report: nothing was judged


@pytest.mark.parametrize(
    "registry", ["TOOLS_CANCEL_ITIMER", "TOOLS_CANCEL_FAULTHANDLER", "TOOLS_CLOSE_PIPES"]
)
def test_agent_code_cannot_switch_the_last_resort_off_from_its_thread(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    started = time.monotonic()
    out = _replay(incident, tmp_path, registry)
    assert time.monotonic() - started < 20
    _assert_stopped_by_the_watchdog(out)


def test_the_stacks_come_first_unless_agent_code_cancelled_them(
    incident: Incident, tmp_path: Path
) -> None:
    out = _replay(incident, tmp_path, "TOOLS_CANCEL_ITIMER")
    _assert_stopped_by_the_watchdog(out)
    assert out.stderr.index("Thread 0x") < out.stderr.index(PARAGRAPH)
    assert "_hold_the_lock" in out.stderr  # where the agent's thread was
    cancelled = _replay(incident, tmp_path, "TOOLS_CANCEL_FAULTHANDLER")
    _assert_stopped_by_the_watchdog(cancelled)
    assert "Thread 0x" not in cancelled.stderr
    # no stacks: the paragraph must not say they are above (it said "The stacks printed above")
    assert "Unless agent code cancelled faulthandler, the stacks" in cancelled.stderr


def test_an_agent_sigalrm_handler_does_not_keep_the_process_alive(
    incident: Incident, tmp_path: Path
) -> None:
    """The agent's module wraps ``signal.signal`` at import: every SIGALRM replay set up in
    its own interpreter became the agent's handler, which cannot run while the lock is held."""
    out = _replay(incident, tmp_path, "TOOLS_ALARM_HANDLER", **{lra.ALARM_HANDLER_ENV: "1"})
    _assert_stopped_by_the_watchdog(out)


def test_agent_code_cannot_signal_or_limit_the_watchdog(incident: Incident, tmp_path: Path) -> None:
    out = _replay(incident, tmp_path, "TOOLS_KILL_WATCHDOG")
    _assert_stopped_by_the_watchdog(out)
    children = re.search(r"agent: children \[(\d+)\]", out.stderr)
    assert children, out.stderr  # one child: the watchdog
    for name in ("os.kill", "pidfd_send_signal", "prlimit"):
        assert f"agent: {name} refused (PermissionError)" in out.stderr, out.stderr
    assert "went through" not in out.stderr


def test_agent_code_cannot_stop_the_replay_for_good(incident: Incident, tmp_path: Path) -> None:
    """SIGSTOP sent to itself stopped the replay with nobody to continue it (no shell in CI),
    and the watchdog counts no stopped time: the command hung for ever. Both routes are
    refused, and the verdict names the attempt (the 30 s timeout of ``_replay`` is "for ever")."""
    out = _replay(incident, tmp_path, "TOOLS_STOP_ITSELF")
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    for name in ("raise_signal", "pthread_kill"):
        assert f"agent: {name} refused (PermissionError)" in out.stderr, out.stderr
    assert "(signal.raise_signal)" in out.stdout, out.stdout


def _gone(pid: int) -> bool:
    """No such process, or one that has ended and waits to be reaped."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return status.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_verdict_within_the_limit_leaves_no_watchdog_behind(
    incident: Incident, tmp_path: Path
) -> None:
    out = _replay(incident, tmp_path, "TOOLS_NAME_WATCHDOG")
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "reproduced" in out.stdout
    children = re.search(r"agent: children \[(\d+)\]", out.stderr)
    assert children, out.stderr  # the watchdog ran beside the re-run
    pid = int(children.group(1))
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(pid)
    assert "stopped" not in out.stderr


def test_with_no_time_limit_there_is_no_watchdog(incident: Incident, tmp_path: Path) -> None:
    path_out = _replay(incident, tmp_path, "TOOLS_NAME_WATCHDOG", "--time-limit", "0")
    assert path_out.returncode == 0, path_out.stderr
    assert "agent: children []" in path_out.stderr


@pytest.mark.parametrize(
    ("registry", "paragraph"),
    [
        ("isolation_agents:TOOLS_REGEX", PARAGRAPH),
        # abandoned at the limit (the TUI shows it irreproducible), then it takes the lock
        ("last_resort_agents:TOOLS_SLEEP_THEN_HOLD", ABANDONED),
    ],
)
def test_a_frozen_tui_is_ended_with_the_terminal_restored(
    incident: Incident, tmp_path: Path, registry: str, paragraph: str
) -> None:
    """Under the TUI, agent code holding the lock froze the screen and every key (Ctrl+C is a
    key there) for good; the watchdog gives the terminal back as it was, then says why."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    path = tmp_path / "frozen.bundle"
    path.write_bytes(incident.make(registry=registry, seq=1))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    before = termios.tcgetattr(slave)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "TERM": "xterm-256color",
    }
    proc = subprocess.Popen(
        [SCRIPT, "tui", str(path), "--import-recorded", "--time-limit", "0.5"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=HERE,
        start_new_session=True,
    )
    output = bytearray()
    deadline = time.monotonic() + 30
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                output += os.read(master, 65536)
        while select.select([master], [], [], 0.2)[0]:  # what the watchdog wrote last
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    finally:
        if proc.poll() is None:
            proc.kill()  # the last resort did not come: the test fails below
        proc.wait()
        after = termios.tcgetattr(slave)
        os.close(master)
        os.close(slave)
    text = output.decode("utf-8", "replace")
    assert proc.returncode == -9, (proc.returncode, text[-2000:])
    assert paragraph in text, text[-2000:]
    assert text.rindex("\x1b[?1049l") < text.index(paragraph)  # the screen back, then words
    assert "Thread 0x" not in text  # no stacks drawn into the TUI's screen
    assert "\x1b[?1049h" in text  # the TUI had taken the screen over
    assert "\x1b[?7l" in text  # Textual turns line wrap off; it is back on before the words
    assert text.rindex("\x1b[?7l") < text.rindex("\x1b[?7h") < text.index(paragraph)
    if paragraph == ABANDONED:  # it had shown the verdict and answered until then
        assert "ran past the time limit of 0.5 s" in text
    assert after == before  # echo, line editing: the terminal as it was before the TUI


def _blocked_stdout() -> tuple[int, int]:
    """A pipe of one page, full but for 64 bytes: the command's report blocks on it."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    os.write(write_end, b"." * (4096 - 64))
    return read_end, write_end


def _drain(read_end: int) -> bytes:
    import select

    out = bytearray()
    while select.select([read_end], [], [], 0.1)[0]:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _start(
    incident: Incident, folder: Path, registry: str, stdout: int, limit: float = 0.5, **env: str
) -> Any:
    path = folder / f"{registry.lower()}.bundle"
    path.write_bytes(incident.make(registry=f"last_resort_agents:{registry}", seq=1))
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        **env,
    }
    return subprocess.Popen(
        [SCRIPT, str(path), "--import-recorded", "--time-limit", f"{limit:g}"],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=environ,
        cwd=HERE,
    )


def test_a_report_blocked_on_a_slow_reader_is_not_taken_for_a_stuck_interpreter(
    incident: Incident, tmp_path: Path
) -> None:
    """Past the limit the re-run is abandoned and the report written; a reader that takes
    its time (a pager) blocks that write, which is no reason to end the command."""
    read_end, write_end = _blocked_stdout()
    proc = _start(
        incident, tmp_path, "TOOLS_SLEEP_THEN_HOLD", write_end, **{lra.HOLD_AFTER_ENV: "3600"}
    )
    os.close(write_end)
    try:
        time.sleep(3)  # six times the limit: the report has long been waiting on the pipe
        assert proc.poll() is None, proc.stderr.read()
        out = _drain(read_end)
        while proc.poll() is None:
            out += _drain(read_end)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        os.close(read_end)
    assert proc.returncode == 3, (proc.returncode, stderr)
    assert b"ran past the time limit of 0.5 s" in out
    assert "stopped" not in stderr


def test_abandoned_agent_code_that_then_holds_the_interpreter_cannot_hang_the_command(
    incident: Incident, tmp_path: Path
) -> None:
    """Abandoned at the limit while it sleeps, the agent code takes the interpreter while
    the report waits on a slow reader: the command could then never end. Its heartbeat
    stops, and the watchdog ends it."""
    read_end, write_end = _blocked_stdout()
    proc = _start(
        incident, tmp_path, "TOOLS_SLEEP_THEN_HOLD", write_end, **{lra.HOLD_AFTER_ENV: "1"}
    )
    os.close(write_end)
    try:
        proc.wait(timeout=30)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        os.close(read_end)
    assert proc.returncode == -9, (proc.returncode, stderr)
    assert ABANDONED in stderr, stderr
    paragraph = stderr[stderr.index(ABANDONED) :]
    assert "held the Python interpreter for more than 1 s" in paragraph
    assert "SIGKILL (exit status 137)" in paragraph and "--time-limit SECONDS" in paragraph


def test_time_the_replay_spends_stopped_is_not_counted(incident: Incident, tmp_path: Path) -> None:
    """Ctrl+Z, or a debugger holding the process at a breakpoint (as the paragraph advises):
    the watchdog waits, and counts only the time the replay ran."""
    # The limit covers importing the agent too: at load 8 its import passed 0.5 s and the
    # replay ended irreproducible before agent code held anything (machine_pace).
    limit = limit_for_the_rerun(0.5)
    proc = _start(incident, tmp_path, "TOOLS_CANCEL_ITIMER", subprocess.PIPE, limit=limit)
    deadline = max(2 * limit, limit + 0.5)  # the watchdog's, from the re-run's start
    try:
        time.sleep(deadline / 2)  # armed, well before its deadline
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(deadline + 1.5)  # longer than the deadline: counted, it would have fired
        assert _state(proc.pid) == "T"  # stopped, not killed
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(timeout=30 + 4 * deadline)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        proc.stdout.close()
    assert proc.returncode == -9, (proc.returncode, stderr)
    assert f"beam-agents-replay: stopped: agent code was still running {deadline:g} s" in stderr


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
