"""The console script's last resort past ``--time-limit``: a watchdog process agent code cannot reach.

Agent code that holds the interpreter lock without returning (native code: a catastrophic
regular expression) never lets replay's waiting thread notice the time limit, and agent
code runs in the replay's own interpreter, where it can cancel anything set up there
(``signal.setitimer``, ``faulthandler``, a ``SIGALRM`` handler). So the console script
forks a watchdog **before it imports any agent code** (``start()``); the engine tells it,
through a shared memory page, when each wait for agent code must have ended
(``arm()``), and it ends the replay's process at that moment if it has not:

- it writes one paragraph to standard error saying what happened and what to do (and,
  under the TUI, first restores the terminal the TUI had taken over);
- then sends ``SIGKILL`` (exit status 137 in a shell, -9 from ``subprocess``), which no
  handler, mask or ``SIG_IGN`` can stop: never a verdict's code.

Agent code cannot end it: the guard (``network_guard``) refuses ``os.kill``,
``os.killpg``, ``signal.pidfd_send_signal`` and ``resource.prlimit`` of another process,
and starting a process; the watchdog ignores the terminal's ``SIGINT``/``SIGQUIT``. It
lives no longer than its parent: it holds the read end of a pipe only the parent writes
to, and leaves when that ends and the parent is gone (if agent code closes the pipe's
other end, it watches the parent id instead). Code that patches replay itself (rewriting
the shared page) is beyond it, as everything is ("replay runs your code").

The Python API never starts one: it must not end its caller's process.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["KILLED_STATUS", "arm", "start", "watchdog_pid"]

KILLED_STATUS = 128 + signal.SIGKILL
"""The shell's exit status of a replay the watchdog ended (``subprocess``: ``-SIGKILL``)."""

_SLOTS = 64
_SLOT = struct.Struct("dd")  # (deadline on CLOCK_MONOTONIC or 0: free, the limit)
_TICK = 0.05  # how often the watchdog reads the page while anything is armed
_GRACE_AFTER_STACKS = 0.3  # the watchdog acts this long after faulthandler's stacks


class _Watchdog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.page: mmap.mmap | None = None
        self.pid = -1
        self.owner = -1
        self.keep_pipe = -1
        self.stacks = False
        self.used = [False] * _SLOTS


_WATCHDOG = _Watchdog()


def watchdog_pid() -> int | None:
    """The watchdog of this process, if ``start()`` started one here."""
    if _WATCHDOG.page is None or _WATCHDOG.owner != os.getpid():
        return None
    return _WATCHDOG.pid


def start(*, prog: str, terminal: bool = False) -> bool:
    """Fork the watchdog (once per process). Call before any agent code is imported.

    ``terminal``: the TUI is about to take the terminal over; restore it before writing.
    Under the TUI, no stacks are printed (they would land in the TUI's screen).
    Returns False where there is no ``fork`` (the last resort is then absent).
    """
    if not hasattr(os, "fork") or watchdog_pid() is not None:
        return watchdog_pid() is not None
    page = mmap.mmap(-1, _SLOTS * _SLOT.size)  # MAP_SHARED | MAP_ANONYMOUS: no descriptor
    tty = _terminal_state() if terminal else None
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the watchdog: never returns into the caller's code
        status = 0
        try:
            os.close(write_end)
            _watch(page, read_end, parent, prog, tty)
        except BaseException:
            status = 70
        finally:
            os._exit(status)
    os.close(read_end)
    _WATCHDOG.page = page
    _WATCHDOG.pid = pid
    _WATCHDOG.owner = parent
    _WATCHDOG.keep_pipe = write_end  # never written: its end tells the watchdog we ended
    _WATCHDOG.stacks = not terminal
    return True


def arm(limit: float) -> Callable[[bool], None] | None:
    """The process ends 0.3 s past ``max(2 * limit, limit + 0.5)`` seconds from now unless
    the returned function is called first; None where no watchdog runs in this process.

    Call it with ``abandoned=True`` when the wait ended at the limit with agent code still
    running: headless, the watchdog then stays armed, so agent code that takes the lock
    and keeps it cannot keep the process from reporting and ending either; under the TUI,
    which goes on showing the result, it is disarmed.

    In the main thread of a headless replay, ``faulthandler`` also prints every thread's
    stack at ``max(2 * limit, limit + 0.5)`` (a thread of its own, needing no lock; agent
    code can cancel that one, which costs only the stacks).
    """
    if watchdog_pid() is None or _WATCHDOG.page is None:
        return None
    page = _WATCHDOG.page
    # At least half a second past the limit: with a tiny limit (--time-limit 1e-6), twice
    # it came before the waiting thread could disarm.
    after = max(2 * limit, limit + 0.5)
    with _WATCHDOG.lock:
        if all(_WATCHDOG.used):
            return None
        slot = _WATCHDOG.used.index(False)
        _WATCHDOG.used[slot] = True
        _SLOT.pack_into(
            page, slot * _SLOT.size, time.monotonic() + after + _GRACE_AFTER_STACKS, limit
        )
    stacks = _WATCHDOG.stacks and threading.current_thread() is threading.main_thread()
    if stacks:
        import faulthandler

        faulthandler.dump_traceback_later(after)

    def disarm(abandoned: bool) -> None:
        if abandoned and _WATCHDOG.stacks:
            return
        with _WATCHDOG.lock:
            if not _WATCHDOG.used[slot]:
                return
            _SLOT.pack_into(page, slot * _SLOT.size, 0.0, 0.0)
            _WATCHDOG.used[slot] = False
        if stacks:
            import faulthandler

            faulthandler.cancel_dump_traceback_later()

    return disarm


# -- the watchdog process ------------------------------------------------------------------


def _terminal_state() -> tuple[int, list[Any]] | None:
    """A copy of the terminal (a duplicated descriptor) and its modes before the TUI."""
    import termios

    for fd in (sys.__stdout__, sys.__stdin__):
        with contextlib.suppress(AttributeError, OSError, ValueError, termios.error):
            number = fd.fileno()  # type: ignore[union-attr]
            if os.isatty(number):
                return number, termios.tcgetattr(number)
    return None


def _watch(
    page: mmap.mmap,
    pipe: int,
    parent: int,
    prog: str,
    tty: tuple[int, list[Any]] | None,
) -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTSTP):
        # The terminal's keys reach the whole process group; the parent answers them.
        signal.signal(sig, signal.SIG_IGN)
    keep = sorted({pipe, 2} | ({tty[0]} if tty else set()))
    low = 0
    for fd in [*keep, max(os.sysconf("SC_OPEN_MAX"), keep[-1] + 1)]:
        # Everything else closed: holding the caller's stdout would delay its end-of-file.
        os.closerange(low, fd)
        low = fd + 1
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write("replay watchdog")  # what `ps` and `top` show
    import select

    pipe_open = True
    while True:
        if os.getppid() != parent:
            return  # the replay ended (or was ended): nothing left to watch
        due, limit = _earliest(page)
        now = time.monotonic()
        if due and now >= due:
            _fire(parent, prog, limit, tty)
            return
        wait = _TICK if due else 1.0
        if pipe_open:
            ready, _, _ = select.select([pipe], [], [], min(wait, due - now) if due else wait)
            if ready and not os.read(pipe, 64):
                pipe_open = False  # the parent is ending; or agent code closed its end
                _wait_parent_gone(parent)
        else:
            time.sleep(_TICK)


def _wait_parent_gone(parent: int) -> None:
    """After the pipe ended: a parent that exits is re-parented within milliseconds."""
    for _ in range(100):
        if os.getppid() != parent:
            return
        time.sleep(0.002)


def _earliest(page: mmap.mmap) -> tuple[float, float]:
    best = (0.0, 0.0)
    for slot in range(_SLOTS):
        deadline, limit = _SLOT.unpack_from(page, slot * _SLOT.size)
        if deadline > 0 and (best[0] == 0 or deadline < best[0]):
            best = (deadline, limit)
    return best


def _fire(parent: int, prog: str, limit: float, tty: tuple[int, list[Any]] | None) -> None:
    if tty is not None:
        _restore_terminal(*tty)
    after = max(2 * limit, limit + 0.5)
    text = (
        f"{prog}: stopped: agent code was still running {after:g} s after it started, past "
        f"twice its time limit of {limit:g} s, and replay could not act on the limit: native "
        "code (a C extension, a catastrophic regular expression) held the Python interpreter "
        "and never let replay's own thread run. Replay's watchdog ended the process with "
        f"SIGKILL (exit status {KILLED_STATUS}): the activation was not judged, and this is "
        "no verdict. "
        + (
            "The stacks printed above (faulthandler) show where each thread was. "
            if not tty
            else ""
        )
        + "If the activation is only slow, raise the limit with --time-limit SECONDS "
        "(0: no limit); to see where the native code is stuck, run the replay under a "
        "debugger (gdb -p PID, py-spy dump --pid PID) before the limit.\n"
    )
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "replace"))
    with contextlib.suppress(OSError):
        os.kill(parent, signal.SIGKILL)


def _restore_terminal(fd: int, modes: list[Any]) -> None:
    """What Textual's driver does when it stops, which the killed TUI never will."""
    import termios

    with contextlib.suppress(OSError, termios.error):
        termios.tcsetattr(fd, termios.TCSANOW, modes)
    with contextlib.suppress(OSError):
        os.write(
            fd,
            b"\x1b[<u\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l"
            b"\x1b[?1049l\x1b[?25h\x1b[?1004l\r\n",
        )
