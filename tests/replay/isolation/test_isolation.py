"""Replay isolation: side-effect tools refuse however called; processes, native code and file
writes are refused and reported like network attempts; the guard outlives the re-run in the CLI.
"""

from __future__ import annotations

import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import isolation_agents as ia
import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents.errors import SideEffectRefusedError
from beam_agents.replay.engine import replay
from beam_agents.replay.isolation.guard import block_network
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


@pytest.fixture(autouse=True)
def _no_refunds() -> Iterator[None]:
    ia.REFUNDS.clear()
    yield
    ia.REFUNDS.clear()


# -- side_effect=True tools --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["object", "registry", "fn", "registry_fn"])
def test_a_side_effect_tool_called_around_ctx_act_refuses_inside_an_activation(how: str) -> None:
    agent = ia.DirectRefundAgent(how)
    history = KeyHistory(agent, ia.REFUND_TOOLS, ra.make_provider())
    history.send(event_envelope(KEY, "ask", b"refund it yourself", time_ms=T0))
    assert ia.REFUNDS == []  # before: the refund was performed by the pipeline (and by replay)
    assert history.results[-1].outputs == (b"refused",)  # type: ignore[union-attr]


def test_an_executor_outside_any_activation_performs_the_effect() -> None:
    assert ia.refund_for_real(order_id="A1", amount_cents=1) == {"refunded": 1}
    assert ia.REFUND_TOOLS.get("issue_refund").fn(order_id="A2", amount_cents=2) == {"refunded": 2}
    assert [r["order_id"] for r in ia.REFUNDS] == ["A1", "A2"]


def test_during_a_replay_side_effects_are_refused_in_every_thread() -> None:
    errors: list[BaseException] = []

    def executor_thread() -> None:
        try:
            ia.refund_for_real(order_id="A1", amount_cents=5)
        except SideEffectRefusedError as exc:
            errors.append(exc)

    with block_network():
        worker = threading.Thread(target=executor_thread)
        worker.start()
        worker.join()
    assert ia.REFUNDS == [] and len(errors) == 1
    assert "refuses to run inside an activation or a replay" in str(errors[0])


def test_replaying_an_agent_that_performs_a_refund_directly_never_performs_it() -> None:
    history = KeyHistory(ra.AGENT, ia.REFUND_TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="isolation_agents:DIRECT_REFUND_OBJECT",
            registry="isolation_agents:REFUND_TOOLS",
        )
    )
    assert ia.REFUNDS == []
    assert result.verdict is not Verdict.REPRODUCED


# -- processes, native code, file writes during the re-run --------------------------------------


@pytest.fixture
def recorded() -> tuple[KeyHistory, object]:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    return history, event


@pytest.mark.parametrize(
    ("registry", "operation", "what"),
    [
        ("TOOLS_SUBPROCESS", "subprocess.Popen", "start the process true"),
        ("TOOLS_SYSTEM", "os.system", "start the process true"),
        ("TOOLS_EXEC", "os.posix_spawn", "start the process true"),
        ("TOOLS_FORK_EXEC", "_posixsubprocess.fork_exec", "start the process /bin/true"),
        ("TOOLS_PIDFD", "signal.pidfd_send_signal", "send signal 0 through process descriptor"),
        ("TOOLS_RAISE_SIGNAL", "signal.raise_signal", "send signal 23 to this process"),
        ("TOOLS_PRLIMIT", "resource.prlimit", "set the resource limits of process"),
        ("TOOLS_CTYPES", "ctypes.dlsym", "load native code"),
        ("TOOLS_CTYPES_LIB", "ctypes.dlopen", "load native code"),
    ],
)
def test_a_tool_starting_a_process_or_loading_native_code_is_irreproducible(
    recorded: tuple[KeyHistory, object], registry: str, operation: str, what: str
) -> None:
    history, event = recorded
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,  # type: ignore[arg-type]
            registry=f"isolation_agents:{registry}",
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert f"read-only tool 'lookup_order' tried to {what}" in result.reason
    assert f"({operation})" in result.reason


def test_a_file_written_by_a_tool_is_irreproducible_and_not_written(
    recorded: tuple[KeyHistory, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history, event = recorded
    target = tmp_path / "side-file.txt"
    monkeypatch.setenv(ia.WRITE_TARGET_ENV, str(target))
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,  # type: ignore[arg-type]
            registry="isolation_agents:TOOLS_WRITE",
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert f"read-only tool 'lookup_order' tried to write the file {target} (open)" in result.reason
    assert not target.exists()


def test_the_replay_itself_writes_nothing_the_guard_reports(
    recorded: tuple[KeyHistory, object],
) -> None:
    history, event = recorded
    result = replay(options(history.export(), history.trace_bytes(), event=event))  # type: ignore[arg-type]
    assert result.verdict is Verdict.REPRODUCED, result.reason


# -- the CLI process: threads and atexit hooks after the re-run ----------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("registry", ["TOOLS_THREAD", "TOOLS_ATEXIT"])
def test_the_cli_keeps_the_guard_for_its_whole_life(
    recorded: tuple[KeyHistory, object], tmp_path: Path, listener: socket.socket, registry: str
) -> None:
    history, event = recorded
    snapshot, traces, event_file = tmp_path / "s.pb", tmp_path / "t.pb", tmp_path / "e.pb"
    snapshot.write_bytes(history.export())
    traces.write_bytes(history.trace_bytes())
    event_file.write_bytes(event.SerializeToString())  # type: ignore[attr-defined]
    host, port = listener.getsockname()[:2]
    out = subprocess.run(
        [
            SCRIPT,
            "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event_file),
            "--agent", "replay_agents:AGENT", "--registry", f"isolation_agents:{registry}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, ra.NETWORK_TARGET_ENV: f"{host}:{port}"},
    )  # fmt: skip
    readable, _, _ = select.select([listener], [], [], 0.5)
    assert not readable, "a thread or atexit hook reached the network after the re-run"
    # What agent code runs at interpreter exit (the thread, not a daemon, is waited for; the
    # hook is called) ran before the judgement: the re-run matched the trace, yet the attempt
    # is counted (exit 3), and reported, with no traceback (it printed one after the report).
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "blocked: agent code at interpreter exit" in out.stdout
    assert f"{host}:{port}" in out.stdout
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("registry", ["TOOLS_EXIT", "TOOLS_POSIX_EXIT"])
def test_agent_code_ending_the_process_never_makes_the_cli_exit_0(
    recorded: tuple[KeyHistory, object], tmp_path: Path, registry: str
) -> None:
    """os._exit(0) has no audit event: it ended the CLI (and check --jobs 1) with 0, no verdict.
    (Hostile pass: posix._exit(0), the same function under the name os took it from, still
    did when only os's name was replaced.)"""
    history, event = recorded
    snapshot, traces, event_file = tmp_path / "s.pb", tmp_path / "t.pb", tmp_path / "e.pb"
    snapshot.write_bytes(history.export())
    traces.write_bytes(history.trace_bytes())
    event_file.write_bytes(event.SerializeToString())  # type: ignore[attr-defined]
    out = subprocess.run(
        [
            SCRIPT,
            "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event_file),
            "--agent", "replay_agents:AGENT", "--registry", f"isolation_agents:{registry}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "the agent code called os._exit(0) during the re-run" in out.stderr
    # Outside a replay os._exit is the real one; inside it refuses.
    with block_network(), pytest.raises(SystemExit, match=r"os\._exit\(0\)"):
        os._exit(0)
    # (Not called here: unguarded, it would end pytest with 0.) Both names are the guard's.
    assert importlib.import_module(os.name)._exit is os._exit


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_agent_code_without_a_time_limit_interrupts_and_judges_nothing(
    recorded: tuple[KeyHistory, object], tmp_path: Path
) -> None:
    """With no time limit agent code runs on the main thread, where Ctrl+C lands. The
    activation contains the KeyboardInterrupt (as the pipeline does, for code that raises
    one), so the re-run "failed" and the verdict was made up from it; a real Ctrl+C is
    the operator's: 'interrupted', 130, no verdict."""
    history, event = recorded
    snapshot, traces, event_file = tmp_path / "s.pb", tmp_path / "t.pb", tmp_path / "e.pb"
    snapshot.write_bytes(history.export())
    traces.write_bytes(history.trace_bytes())
    event_file.write_bytes(event.SerializeToString())  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [
            SCRIPT, "--time-limit", "0",
            "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event_file),
            "--agent", "replay_agents:AGENT", "--registry", "isolation_agents:TOOLS_SAY_THEN_NAP",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A child inherits an ignored SIGINT (something in the suite's process may have
        # ignored it, as a shell does for a background job) and would never see Ctrl+C.
        preexec_fn=_sigint_default,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "in the tool\n"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, stdout, stderr)
    assert "beam-agents-replay: interrupted" in stderr
    assert "reproduced" not in stdout and "diverged" not in stdout, stdout


@pytest.mark.parametrize("registry", ["TOOLS_ATEXIT_EXIT", "TOOLS_POSIX_ATEXIT_EXIT"])
def test_an_atexit_hook_ending_the_process_never_replaces_the_verdicts_exit_code(
    recorded: tuple[KeyHistory, object], tmp_path: Path, registry: str
) -> None:
    """A hook os._exit(0) after the verdict turned a divergence into exit 0."""
    history, event = recorded
    snapshot, traces, event_file = tmp_path / "s.pb", tmp_path / "t.pb", tmp_path / "e.pb"
    snapshot.write_bytes(history.export())
    traces.write_bytes(history.trace_bytes())
    event_file.write_bytes(event.SerializeToString())  # type: ignore[attr-defined]
    out = subprocess.run(
        [
            SCRIPT,
            "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event_file),
            "--agent", "replay_agents:AGENT_OTHER_OUTPUT",  # diverges: exit 1
            "--registry", f"isolation_agents:{registry}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert out.stdout.splitlines()[4] == "diverged"
    # The hook ran before the judgement (what agent code runs at interpreter exit): refused,
    # and reported with the verdict, which it does not change (the divergence came first).
    assert (
        "network blocked: ending the process with os._exit(0) (os._exit, by agent code at "
        "interpreter exit" in out.stdout
    )
    assert "Traceback" not in out.stderr
