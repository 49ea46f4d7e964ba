"""The console script's last resort past ``--time-limit``: a watchdog process agent code cannot reach.

Agent code that holds the interpreter lock without returning (native code: a catastrophic
regular expression) never lets replay's waiting thread notice the time limit, and agent
code runs in the replay's own interpreter, where it can cancel anything set up there
(``signal.setitimer``, ``faulthandler``, a ``SIGALRM`` handler). So the console script
forks a watchdog **before it imports any agent code** (``start()``); the engine tells it,
through a shared memory page, when each wait for agent code must have ended
(``arm()``), and it ends the replay's process at that moment if it has not (and, for
agent code abandoned at the limit and left running, if that code then keeps the
interpreter to itself: ``Armed.abandon()``):

- it writes one paragraph to standard error saying what happened and what to do (and,
  under the TUI, first restores the terminal the TUI had taken over);
- then sends ``SIGKILL`` (exit status 137 in a shell, -9 from ``subprocess``), which no
  handler, mask or ``SIG_IGN`` can stop: never a verdict's code.

Agent code cannot end it: the guard (``network_guard``) refuses ``os.kill``,
``os.killpg``, ``signal.pidfd_send_signal`` and ``resource.prlimit`` of another process,
and starting a process; the watchdog ignores the terminal's ``SIGINT``/``SIGQUIT``. It
lives no longer than its parent: it holds the read end of a pipe only the parent writes
to, and leaves when that ends and the parent is gone (if agent code closes the pipe's
other end, it watches the parent id instead). Time the replay spends stopped (Ctrl+Z, a
debugger holding it at a breakpoint) is not counted. Code that patches replay itself
(rewriting the shared page) is beyond it, as everything is ("replay runs your code").

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

__all__ = ["KILLED_STATUS", "Armed", "arm", "start", "watchdog_pid"]

KILLED_STATUS = 128 + signal.SIGKILL
"""The shell's exit status of a replay the watchdog ended (``subprocess``: ``-SIGKILL``)."""

_SLOTS = 64
# Slot 0: (last heartbeat or 0, the limit, how stale the heartbeat may get) while agent code
# abandoned at its limit runs on. Others: (deadline on CLOCK_MONOTONIC or 0: free, the limit, 0).
_SLOT = struct.Struct("ddd")
_BEAT = 0
_TICK = 0.05  # how often the watchdog reads the page while anything is armed
_BEAT_EVERY = 0.1
_GRACE_AFTER_STACKS = 0.3  # the watchdog acts this long after faulthandler's stacks


class _Watchdog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.page: mmap.mmap | None = None
        self.pid = -1
        self.owner = -1
        self.keep_pipe = -1
        self.stacks = False
        self.used = [True] + [False] * (_SLOTS - 1)
        self.abandoned = 0  # agent code left running at its limit, not ended yet
        self.beating = False


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


class Armed:
    """One wait for agent code the watchdog knows the end of (``arm()``)."""

    def __init__(self, page: mmap.mmap, slot: int, limit: float, stacks: bool) -> None:
        self._page = page
        self._slot = slot
        self._limit = limit
        self._stacks = stacks

    def disarm(self) -> None:
        """The wait returned: the deadline is off."""
        with _WATCHDOG.lock:
            if not _WATCHDOG.used[self._slot]:
                return
            _SLOT.pack_into(self._page, self._slot * _SLOT.size, 0.0, 0.0, 0.0)
            _WATCHDOG.used[self._slot] = False
        if self._stacks:
            import faulthandler

            faulthandler.cancel_dump_traceback_later()

    def abandon(self) -> Callable[[], None]:
        """The wait ended at the limit with the agent code still running (Python cannot stop
        a thread): the deadline is off, but until the returned function is called (that code
        ended) a thread of ours beats a heartbeat, and the watchdog ends the process if the
        heartbeat stops for ``max(limit, 1 s)``: that code then holds the interpreter, and
        the command could neither report nor end (nor the TUI answer a key). A main thread
        merely blocked (writing to a pager nobody reads) does not stop the heartbeat.
        """
        self.disarm()
        stale_after = max(self._limit, 1.0)
        ended = threading.Event()
        with _WATCHDOG.lock:
            _WATCHDOG.abandoned += 1
            beat_limit = _SLOT.unpack_from(self._page, 0)[1]
            if self._limit >= beat_limit:  # several: the most lenient one
                _SLOT.pack_into(self._page, 0, time.monotonic(), self._limit, stale_after)
            if not _WATCHDOG.beating:
                _WATCHDOG.beating = True
                threading.Thread(
                    target=_beat, args=(self._page,), name="replay watchdog heartbeat", daemon=True
                ).start()

        def ended_now() -> None:
            with _WATCHDOG.lock:
                if not ended.is_set():
                    ended.set()
                    _WATCHDOG.abandoned -= 1

        return ended_now


def _beat(page: mmap.mmap) -> None:
    while True:
        with _WATCHDOG.lock:
            if not _WATCHDOG.abandoned:
                _SLOT.pack_into(page, 0, 0.0, 0.0, 0.0)
                _WATCHDOG.beating = False
                return
            _, limit, stale = _SLOT.unpack_from(page, 0)
            _SLOT.pack_into(page, 0, time.monotonic(), limit, stale)
        time.sleep(_BEAT_EVERY)


def arm(limit: float) -> Armed | None:
    """The process ends 0.3 s past ``max(2 * limit, limit + 0.5)`` seconds from now unless
    ``disarm()`` or ``abandon()`` of the result is called first; None where no watchdog
    runs in this process.

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
            page, slot * _SLOT.size, time.monotonic() + after + _GRACE_AFTER_STACKS, limit, 0.0
        )
    stacks = _WATCHDOG.stacks and threading.current_thread() is threading.main_thread()
    if stacks:
        import faulthandler

        # To descriptor 2 itself: agent code may have replaced sys.stderr (even with None).
        faulthandler.dump_traceback_later(after, file=2)
    return Armed(page, slot, limit, stacks)


# -- the watchdog process ------------------------------------------------------------------


def _terminal_state() -> tuple[int, list[Any]] | None:
    """The terminal's descriptor and its modes before the TUI takes it over."""
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
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        # The terminal's keys reach the whole process group; the parent answers them.
        # (Ctrl+Z stops the watchdog with it: that time is not counted, below.)
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
    # Per slot: (the value last seen, seconds not counted: the replay was stopped).
    credit: dict[int, tuple[float, float]] = {}
    last = time.monotonic()
    while True:
        if os.getppid() != parent:
            return  # the replay ended (or was ended): nothing left to watch
        now = time.monotonic()
        gap, last = now - last, now
        # Stopped (Ctrl+Z stops us too: a gap; a debugger at a breakpoint: its state).
        owed = gap if gap > 2.0 or _stopped(parent) else 0.0
        fired = _due(page, credit, now, owed)
        if fired is not None:
            _fire(parent, prog, tty, *fired)
            return
        wait = _TICK if credit else 1.0
        if pipe_open:
            ready, _, _ = select.select([pipe], [], [], wait)
            if ready and not os.read(pipe, 64):
                pipe_open = False  # the parent is ending; or agent code closed its end
                _wait_parent_gone(parent)
        else:
            time.sleep(_TICK)


def _due(
    page: mmap.mmap, credit: dict[int, tuple[float, float]], now: float, owed: float
) -> tuple[bool, float, float] | None:
    """``(abandoned, limit, stale_after)`` of a slot past its time, else None."""
    for slot in range(_SLOTS):
        at, limit, stale_after = _SLOT.unpack_from(page, slot * _SLOT.size)
        if at <= 0:
            credit.pop(slot, None)
            continue
        seen, extra = credit.get(slot, (at, 0.0))
        extra = (0.0 if seen != at else extra) + owed
        credit[slot] = (at, extra)
        if slot == _BEAT:
            if now - extra - at > stale_after:
                return True, limit, stale_after
        elif now - extra >= at:
            return False, limit, 0.0
    return None


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state in ([b"T"], [b"t"])


def _wait_parent_gone(parent: int) -> None:
    """After the pipe ended: a parent that exits is re-parented within milliseconds."""
    for _ in range(100):
        if os.getppid() != parent:
            return
        time.sleep(0.002)


def _fire(
    parent: int,
    prog: str,
    tty: tuple[int, list[Any]] | None,
    abandoned: bool,
    limit: float,
    stale_after: float,
) -> None:
    if tty is not None:
        _restore_terminal(*tty)
    if abandoned:
        what = (
            f"{prog}: stopped: agent code that ran past its time limit of {limit:g} s, and "
            "was left running (Python cannot stop a thread), then held the Python "
            f"interpreter for more than {stale_after:g} s: native code (a C extension, a "
            "catastrophic regular expression) kept replay's own threads from running, so "
            "it could not finish. "
        )
        stacks = ""
    else:
        what = (
            f"{prog}: stopped: agent code was still running "
            f"{max(2 * limit, limit + 0.5):g} s after it started, past twice its time limit "
            f"of {limit:g} s, and replay could not act on the limit: native code (a C "
            "extension, a catastrophic regular expression) held the Python interpreter and "
            "never let replay's own thread run. "
        )
        stacks = (
            # best effort: agent code can cancel faulthandler, and this process cannot tell
            ""
            if tty
            else "Unless agent code cancelled faulthandler, the stacks it printed above show "
            "where each thread was. "
        )
    text = (
        what + f"Replay's watchdog ended the process with SIGKILL (exit status {KILLED_STATUS}): "
        "the activation was not judged, and this is no verdict. "
        + stacks
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
            # mouse reporting off, bracketed paste off, line wrap back on (Textual turns
            # it off: without it the paragraph below is cut at the screen's width, and so
            # is every later line of the shell), in-band resize off, then the main screen
            b"\x1b[<u\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l"
            b"\x1b[?7h\x1b[?2048l\x1b[?1049l\x1b[?25h\x1b[?1004l\r\n",
        )
