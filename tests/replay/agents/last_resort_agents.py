"""Agents that try to switch replay's last resort off, then hold the interpreter lock.

Each ``TOOLS_*`` registry is ``replay_agents.TOOLS`` with ``lookup_order`` replaced (as in
``isolation_agents``) by a variant that first tries one thing against the last resort,
saying on standard error what happened (``agent: ...``), then runs a catastrophic regular
expression: C code that holds the GIL without end, so replay's waiting thread never runs.

    TOOLS_CANCEL_ITIMER        signal.setitimer(ITIMER_REAL, 0)
    TOOLS_CANCEL_FAULTHANDLER  faulthandler.cancel_dump_traceback_later()
    TOOLS_ALARM_HANDLER        (with $BEAM_AGENTS_TEST_ALARM_HANDLER set, importing this
                               module wraps ``signal.signal`` so that whoever sets SIGALRM
                               installs the agent's own handler, as a patched library would)
    TOOLS_KILL_WATCHDOG        os.kill, signal.pidfd_send_signal and resource.prlimit on
                               every child process of the replay (its watchdog)
    TOOLS_CLOSE_PIPES          closes every pipe descriptor of the process above 2
    TOOLS_NAME_WATCHDOG        only says which child processes the replay has, and returns
    TOOLS_STOP_ITSELF          stops its own process (signal.raise_signal and
                               signal.pthread_kill with SIGSTOP), then returns: the
                               watchdog counts no stopped time, so where no shell can
                               continue it (CI) a stop that went through is for ever
    TOOLS_SLEEP_THEN_HOLD      sleeps $BEAM_AGENTS_TEST_HOLD_AFTER seconds (default 1; the
                               interpreter free: replay abandons it at its limit), then holds
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import resource
import signal
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import isolation_agents as ia

ALARM_HANDLER_ENV = "BEAM_AGENTS_TEST_ALARM_HANDLER"
HOLD_AFTER_ENV = "BEAM_AGENTS_TEST_HOLD_AFTER"


def _say(what: str) -> None:
    os.write(2, f"agent: {what}\n".encode())


def _hold_the_lock() -> None:
    re.match(r"(a+)+$", "a" * 64 + "b")


def _children() -> list[int]:
    """The replay process's child processes (its watchdog), from /proc."""
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def _then_hold(attempt: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        time.sleep(0.1)  # replay's own thread has set up whatever it sets up by now
        attempt()
        _hold_the_lock()

    return run


def _try_each(attempts: dict[str, Callable[[], Any]]) -> None:
    """Run each attempt, saying whether it went through or was refused."""
    for name, attempt in attempts.items():
        try:
            attempt()
            _say(f"{name} went through")
        except OSError as exc:
            _say(f"{name} refused ({type(exc).__name__})")


def _kill_watchdog() -> None:
    pids = _children()
    _say(f"children {pids}")
    for pid in pids:
        attempts: dict[str, Callable[[], Any]] = {
            "os.kill": lambda pid=pid: os.kill(pid, signal.SIGKILL),
            "pidfd_send_signal": lambda pid=pid: signal.pidfd_send_signal(
                os.pidfd_open(pid), signal.SIGKILL
            ),
            "prlimit": lambda pid=pid: resource.prlimit(pid, resource.RLIMIT_NOFILE, (0, 0)),
        }
        _try_each(attempts)


def _close_pipes() -> None:
    closed = []
    for fd in range(3, 1024):
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)
                closed.append(fd)
    _say(f"closed pipes {closed}")


def _alarm_handler(signum: int, frame: object) -> None:
    _say("SIGALRM handled by the agent")


if os.environ.get(ALARM_HANDLER_ENV):
    _real_signal = signal.signal

    def _patched_signal(signum: int, handler: Any) -> Any:
        if signum == signal.SIGALRM:
            handler = _alarm_handler
        return _real_signal(signum, handler)

    signal.signal = _patched_signal


def _stop_itself() -> None:
    attempts: dict[str, Callable[[], Any]] = {
        "raise_signal": lambda: signal.raise_signal(signal.SIGSTOP),
        "pthread_kill": lambda: signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGSTOP),
    }
    _try_each(attempts)


TOOLS_STOP_ITSELF = ia._variant(_stop_itself)
TOOLS_CANCEL_ITIMER = ia._variant(_then_hold(lambda: signal.setitimer(signal.ITIMER_REAL, 0)))
TOOLS_CANCEL_FAULTHANDLER = ia._variant(_then_hold(faulthandler.cancel_dump_traceback_later))
TOOLS_ALARM_HANDLER = ia._variant(_hold_the_lock)
TOOLS_KILL_WATCHDOG = ia._variant(_then_hold(_kill_watchdog))
TOOLS_CLOSE_PIPES = ia._variant(_then_hold(_close_pipes))
TOOLS_NAME_WATCHDOG = ia._variant(lambda: _say(f"children {_children()}"))
TOOLS_SLEEP_THEN_HOLD = ia._variant(
    _then_hold(lambda: time.sleep(float(os.environ.get(HOLD_AFTER_ENV, "1"))))
)
