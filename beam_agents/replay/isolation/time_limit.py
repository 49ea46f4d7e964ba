"""The time limit on agent code: each call waited for in a thread of its own, at most so long.

Python cannot stop a thread. Past the limit the thread running agent code is
abandoned (a daemon, so it never holds the interpreter's exit) and the caller's
``stopped`` refusal is raised; until that thread ends, everything the guard
refuses stays refused process-wide (``guard.keep_blocked``) and, under the console
script, the watchdog ends the process if that code then holds the interpreter
(``watchdog.Armed.abandon``). A thread that ended in time is kept for the next
call (starting a thread per replay cost more than the replay of a small activation).
"""

from __future__ import annotations

import contextvars
import os
import queue
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from beam_agents import _running
from beam_agents._protos import TraceEvent
from beam_agents.replay.isolation.guard import keep_blocked
from beam_agents.replay.isolation.watchdog import arm
from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.refusal import CannotReproduce, ReplayRefused
from beam_agents.replay.result import StopCause
from beam_agents.trace_events import kind_name

__all__ = [
    "RAN_PAST",
    "ExitRanPast",
    "ImportRanPast",
    "RerunRanPast",
    "idle_agent_threads",
    "within_limit",
]

RAN_PAST = "the re-run ran past the time limit of"
"""How the reason of a re-run stopped at its time limit begins (``check``'s cause too)."""

_T = TypeVar("_T")


class _AgentThread:
    """A daemon thread that runs agent code handed to it, one call at a time.

    Kept for the next replay once a call ends (starting a thread per replay cost more than
    the replay of a small activation); abandoned when a call runs past its limit.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._loop, name="beam-agents-replay agent code", daemon=True
        )
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.tasks.get()()


_IDLE: list[_AgentThread] = []
_IDLE_LOCK = threading.Lock()


def _forget_idle_threads() -> None:
    _IDLE.clear()  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_forget_idle_threads)


def idle_agent_threads() -> frozenset[threading.Thread]:
    """The threads kept for the next replay, waiting (they hold no lock: safe to fork)."""
    with _IDLE_LOCK:
        return frozenset(r.thread for r in _IDLE)


def _agent_thread() -> _AgentThread:
    with _IDLE_LOCK:
        while _IDLE:
            runner = _IDLE.pop()
            if runner.pid == os.getpid() and runner.thread.is_alive():
                return runner
    return _AgentThread()


def _interruptible(run: Callable[[], _T]) -> _T:
    """``run()`` here, on this thread; a real Ctrl+C still ends it as an interruption.

    ``run_activation`` fails the activation on whatever agent code raises, as the pipeline
    does, ``KeyboardInterrupt`` included: a Ctrl+C landing in agent code run on the main
    thread (no time limit) would become a traced failure and a made-up verdict. The
    signal is noted here, so the interruption is raised after ``run`` whatever it did.
    (With a limit, agent code runs on another thread, which signals never reach.)
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return run()
    interrupted: list[int] = []

    def note(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, note)
    try:
        value = run()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted:
        raise KeyboardInterrupt
    return value


def within_limit(
    run: Callable[[], _T],
    limit: float | None,
    stopped: Callable[[Any], ReplayRefused],
) -> _T:
    """``run()`` in a thread of its own, waited for at most ``limit`` seconds (None, 0: forever).

    Python cannot stop a thread: past the limit the thread is abandoned (a daemon, so it
    never holds the interpreter's exit) and ``stopped(ctx)`` is raised, ``ctx`` being the
    ``AgentContext`` it was running (None if it had not started one). Until that thread
    ends, everything the guard refuses stays refused process-wide (``keep_blocked``): the
    agent code in it stays as isolated as during the re-run. What ``run`` raises (a
    ``SystemExit`` too) is raised here. It runs in a copy of this context.
    """
    if not limit:
        return _interruptible(run)
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    lock = threading.Lock()
    finished = threading.Lock()
    finished.acquire()
    held: list[Callable[[], None]] = []

    def task() -> None:
        try:
            outcome["value"] = context.run(run)
        except BaseException as exc:  # handed to the caller, SystemExit included
            outcome["error"] = exc
        finally:
            with lock:
                outcome["done"] = True
            for release in held:  # abandoned, and ended after all
                release()
            if held:  # the thread may serve again
                with _IDLE_LOCK:
                    _IDLE.append(runner)
            finished.release()

    runner = _agent_thread()
    runner.tasks.put(task)
    # As the console script: past twice the limit (at least half a second past it), the
    # watchdog it started before importing agent code ends the process. Agent code holding
    # the interpreter lock without returning (native code: a catastrophic regular
    # expression) keeps this thread from ever noticing the limit, and it could cancel
    # anything set up in this interpreter; the watchdog is another process. None where no
    # watchdog runs (the Python API: it must never end its caller's process).
    armed = arm(limit)
    try:
        finished.acquire(timeout=limit)
    finally:  # also on Ctrl+C while waiting: the agent code runs on, as isolated as before
        with lock:
            if "done" not in outcome:
                held.append(keep_blocked())
                if armed is not None:  # if it then keeps the interpreter: the watchdog
                    held.append(armed.abandon())
        if armed is not None and not held:
            armed.disarm()
    if held:
        raise stopped(context.get(_running.ACTIVATION))
    with _IDLE_LOCK:
        _IDLE.append(runner)
    if "error" in outcome:
        raise outcome["error"]
    value: _T = outcome["value"]
    return value


_DOES_NOT_END = (
    "agent code that loops, sleeps or waits on something that never answers does not end; "
    "if the activation is only slow, "
)


class RerunRanPast(CannotReproduce):
    """The re-run did not end within the time limit: it is not judged (exit 3)."""

    stop = StopCause.TIME_LIMIT

    def __init__(
        self,
        limit: float,
        ctx: Any,
        traced: Sequence[TraceEvent] | None,
        naming: Naming,
        *,
        ended: Sequence[TraceEvent] | None = None,
    ) -> None:
        self.limit = limit
        self.traced = traced
        """The traced events (None for a what-if), to pair with ``reached``."""
        # The last event only: a re-run looping until the limit may have recorded millions,
        # and parsing them all (an EventLog parses each read) would take GBs at the limit.
        events: Sequence[TraceEvent] = ctx.events if ctx is not None else (ended or ())
        of = f" of the {len(traced)} traced" if traced is not None else ""
        # What the re-run had recorded, as far as the trace goes, for the result's events:
        # read once, here, while the abandoned code may still be appending.
        reached = min(len(events), len(traced)) if traced is not None else 0
        self.reached: tuple[TraceEvent, ...] = tuple(events[i] for i in range(reached))
        if len(events):
            last = events[-1]
            event = f"event {last.index} ({kind_name(last.kind)} {last.name!r}){of}"
            where = f"it had reached {event}"
            if ctx is None:  # ended, then str() of an exception it raised did not return
                where = (
                    f"it had ended at {event}, but the text of an exception it raised (its "
                    "__str__, agent code) did not come back"
                )
        else:
            where = f"it had not recorded its first event{of}"
        super().__init__(
            f"{RAN_PAST} {limit:g} s and was not judged: {where}",
            _DOES_NOT_END + naming.raise_time_limit,
            cause=f"{RAN_PAST} {limit:g} s",  # not the event it reached
        )


class ImportRanPast(CannotReproduce):
    """Importing the agent code did not end within the time limit (exit 3)."""

    stop = StopCause.IMPORT_TIME_LIMIT

    def __init__(self, limit: float, naming: Naming) -> None:
        code = ", ".join(naming.name(what) for what in (Input.AGENT, Input.REGISTRY, Input.HITL))
        super().__init__(
            f"importing the agent code ({code}) ran past the time limit "
            f"of {limit:g} s, so nothing was re-run or judged",
            _DOES_NOT_END + naming.raise_time_limit,
        )


class ExitRanPast(CannotReproduce):
    """What agent code runs at interpreter exit did not end within the time limit (exit 3)."""

    stop = StopCause.TIME_LIMIT

    def __init__(self, limit: float, naming: Naming) -> None:
        super().__init__(
            f"at interpreter exit (run before the judgement), agent code ran past the time "
            f"limit of {limit:g} s: a thread that is not a daemon, an atexit hook or a "
            "finalizer did not end, so the process would not have exited",
            _DOES_NOT_END + naming.raise_time_limit,
            cause=f"at interpreter exit, {RAN_PAST} {limit:g} s",
        )
