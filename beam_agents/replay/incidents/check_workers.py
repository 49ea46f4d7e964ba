"""Replaying bundles for ``check``: in this process, or in isolated worker processes.

``check_one`` replays every activation of one bundle through the same
``engine.replay`` as a single replay, one row each (a file that is not a
readable, consistent bundle is one row, never a stop).

Parallelism is processes (``check_in_workers``; ``fork`` from a single-threaded
caller such as the CLI, else ``forkserver``), not threads: the replay guard is a
process-wide audit hook and agent modules keep module state, so two replays must
never share an interpreter. Each worker isolates its whole life
(``isolate_process()``) before it imports agent code, then imports the agent once
and replays many bundles, one bundle at a time, saying which activation it starts.
A worker that dies (agent code crashed or ended it) costs that activation an
``error`` row, and a fresh worker goes on with the bundle's later activations; a
worker whose re-run ran past the time limit (an abandoned thread it cannot stop)
reports that row (irreproducible) and is replaced; one stuck so hard that even its
own limit cannot answer is killed past twice the limit and ``BACKSTOP_GRACE``. No
row is lost, and ``check`` never hangs on agent code with a limit set.

What a worker and its parent say to each other is JSON, never a pickle: the
worker runs agent code, which can write to the worker's end of the pipe, and a
pickle from it would run any code in the parent when loaded (outside the worker's
isolation); junk would end the whole check. The parent reads each message as JSON
of a fixed shape (a row is ``CheckRow.document``, decoded by
``CheckRow.from_document``: the same data as a row of ``check --json``) and takes
anything else as the worker garbled (``WorkerGarbled``). A worker reads its tasks
as JSON too.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

from beam_agents.replay.engine import replay
from beam_agents.replay.incidents.bundle import bundle_options, load_bundle
from beam_agents.replay.incidents.check_rows import (
    CheckRow,
    WorkerGarbled,
    WorkerLost,
    WorkerStuck,
    refused_row,
    result_row,
)
from beam_agents.replay.inputs.agent_code import no_bytecode
from beam_agents.replay.isolation.guard import end_process, isolate_process, still_running
from beam_agents.replay.isolation.time_limit import idle_agent_threads
from beam_agents.replay.naming import CHECK_BUNDLES, Input, Naming
from beam_agents.replay.options import DEFAULT_TIME_LIMIT
from beam_agents.replay.refusal import InternalError, ReplayRefused

__all__ = [
    "BACKSTOP_GRACE",
    "MAX_MESSAGE_BYTES",
    "Task",
    "check_in_process",
    "check_in_workers",
    "check_one",
    "read_message",
    "read_task",
    "task_message",
]

Task = tuple[str, int | None]
"""What a worker is sent: a bundle's path, and the seq after which to start (None: all)."""

MAX_MESSAGE_BYTES = 1 << 24
"""The longest message the parent reads from a worker (a row is a few KB)."""

BACKSTOP_GRACE = 30.0
"""Seconds past twice the time limit after which ``check`` kills a worker that neither
finished an activation nor reported it ran past the limit."""


def check_one(
    path: str,
    agent: str | None = None,
    registry: str | None = None,
    *,
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    after_seq: int | None = None,
    on_start: Callable[[int], None] | None = None,
    naming: Naming = CHECK_BUNDLES,
) -> Iterator[CheckRow]:
    """Replay every activation of one bundle (those after ``after_seq``), one row each.

    A file that cannot be read is one row. ``on_start(seq)`` is called before each
    re-run. Never raises for bad input (a bug of ours becomes an ``error`` row too).
    """
    started = time.perf_counter()
    try:
        bundle = load_bundle(path, naming=naming)
    except ReplayRefused as refused:
        yield refused_row(path, refused, time.perf_counter() - started)
        return
    except Exception as exc:  # a bug of ours: a row that says so, never a stopped run
        yield refused_row(path, InternalError(exc), time.perf_counter() - started)
        return
    for seq in bundle.seqs:
        if after_seq is not None and seq <= after_seq:
            continue
        if on_start is not None:
            on_start(seq)
        started = time.perf_counter()
        options = bundle_options(bundle, seq=seq, agent=agent, registry=registry, naming=naming)
        result = replay(replace(options, time_limit=time_limit))
        seconds = time.perf_counter() - started
        yield result_row(path, seq, bundle.entity_key, result, seconds, time_limit=time_limit)


def check_in_process(
    files: Sequence[str],
    agent: str | None,
    registry: str | None,
    time_limit: float | None,
    naming: Naming,
    progress: Callable[[int], None] | None = None,
) -> list[CheckRow]:
    """Replay ``files`` one after the other in this process (no bytecode written);
    ``progress`` is told the number of rows so far."""
    with no_bytecode():
        rows: list[CheckRow] = []
        for path in files:
            for row in check_one(path, agent, registry, time_limit=time_limit, naming=naming):
                rows.append(row)
                if progress is not None:
                    progress(len(rows))
        return rows


# --------------------------------------------------------------------------- a worker


def _worker_main(
    conn: Connection,
    agent: str | None,
    registry: str | None,
    time_limit: float | None,
    environ: dict[str, str],
    naming: Naming,
    others: tuple[Connection, ...] = (),
) -> None:
    """A ``check`` worker: isolated for life, then replays the bundles it is sent.

    Tasks are ``(path, after_seq)``; it answers ``("start", seq)`` before each re-run,
    ``("row", row)`` after it and ``("done",)`` after the bundle. After a re-run
    abandoned at its time limit it ends (a thread it cannot stop runs on).

    ``environ`` is the caller's environment when ``check_bundles`` ran: a ``forkserver``
    worker would otherwise have the server's, from whenever that process started.
    """
    for other in others:  # other workers' pipes (the parent's ends, copied by fork)
        with contextlib.suppress(OSError):
            other.close()
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    isolate_process()  # before any agent code is imported: network, processes, side effects
    sys.dont_write_bytecode = True
    try:
        while True:
            try:
                task = read_task(conn.recv_bytes(MAX_MESSAGE_BYTES))
            except EOFError:  # the parent went away
                break
            if task is None:
                break
            path, after_seq = task
            for row in check_one(
                path,
                agent,
                registry,
                time_limit=time_limit,
                after_seq=after_seq,
                on_start=lambda seq: _send(conn, ["start", seq]),
                naming=naming,
            ):
                _send(conn, ["row", row.document()])
                if still_running():
                    end_process(0)  # the parent replaces this worker and goes on
            _send(conn, ["done"])
    except BaseException:  # the parent turns a lost worker into a row
        end_process(1)
    end_process(0)  # the real exit: isolate_process() refuses os._exit, which multiprocessing uses


def _send(conn: Connection, message: list[Any]) -> None:
    conn.send_bytes(json.dumps(message, ensure_ascii=True).encode("ascii"))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def task_message(task: Task | None) -> bytes:
    """What the parent sends a worker: a task, or None to stop."""
    return json.dumps(task, ensure_ascii=True).encode("ascii")


def read_task(data: bytes) -> Task | None:
    """The task ``task_message`` encoded (None: stop). A worker reads its tasks as JSON,
    never a pickle: nothing but the parent should write there, but a pickle would run
    whatever code it names in the worker. Anything else raises ValueError (the worker
    ends and the parent turns it into a row)."""
    task = json.loads(data)
    if task is None:
        return None
    if (
        isinstance(task, list)
        and len(task) == 2
        and isinstance(task[0], str)
        and (task[1] is None or _is_int(task[1]))
    ):
        return task[0], task[1]
    raise ValueError("a worker task is [path, seq or null]")


def read_message(data: bytes, path: str) -> tuple[str, Any] | None:
    """``("start", seq)``, ``("row", CheckRow)`` or ``("done", None)`` from a worker
    replaying ``path``; None for anything else (not JSON, another shape, another path)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return None
    kind, args = message[0], message[1:]
    if kind == "done" and not args:
        return kind, None
    if kind == "start" and len(args) == 1 and _is_int(args[0]):
        return kind, args[0]
    if kind != "row" or len(args) != 1:
        return None
    row = CheckRow.from_document(args[0])
    if row is None or row.path != path:
        return None
    return kind, row


# --------------------------------------------------------------------------- the pool


@dataclass
class _Worker:
    process: Any
    conn: Connection
    task: Task | None = None
    seq: int | None = None
    """The activation being replayed (None while the bundle loads)."""
    seq_started: float = 0.0
    finished: bool = False
    """The row of ``seq`` arrived."""

    @property
    def path(self) -> str:
        return self.task[0] if self.task is not None else ""

    @property
    def replaying(self) -> bool:
        """It runs agent code now: it started an activation and has not sent its row."""
        return self.seq is not None and not self.finished


def _exit_how(exitcode: int | None) -> str:
    import signal

    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"killed by signal {-exitcode}, {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class _Pool:
    """``size`` worker processes replaying a queue of bundles; every activation gets a row."""

    def __init__(
        self,
        files: Sequence[str],
        agent: str | None,
        registry: str | None,
        time_limit: float | None,
        size: int,
        naming: Naming,
    ) -> None:
        self.agent, self.registry, self.time_limit, self.naming = agent, registry, time_limit, naming
        self.size = size
        self.progress: Callable[[int], None] | None = None
        """Told the number of rows so far, as they arrive."""
        self.context = _context()
        self.forked = self.context.get_start_method() == "fork"
        self.tasks: deque[Task] = deque((path, None) for path in files)
        self.rows: list[CheckRow] = []
        self.workers: list[_Worker] = []
        # Past this, a worker that sent neither a row nor a timeout is killed: its own limit
        # (import and re-run, each ``time_limit``) could not answer (native code holding the
        # GIL).
        self.backstop = 2 * time_limit + BACKSTOP_GRACE if time_limit else None

    def run(self) -> list[CheckRow]:
        if self.forked:
            _warm()
        try:
            while self.tasks or self._busy():
                self._fill()
                busy = self._busy()
                ready = wait([w.conn for w in busy], self._timeout(busy))
                now = time.monotonic()
                for worker in busy:
                    if worker.conn in ready:
                        self._receive(worker, now)
                    elif self._stuck(worker, now):
                        self._kill_stuck(worker, now)
            for worker in self.workers:
                with contextlib.suppress(OSError):
                    worker.conn.send_bytes(task_message(None))
        finally:
            for worker in self.workers:
                worker.process.join(5)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()
                worker.conn.close()
        return self.rows

    def _busy(self) -> list[_Worker]:
        return [w for w in self.workers if w.task is not None]

    def _fill(self) -> None:
        """Start workers up to the pool's size, and give each idle one a task."""
        while self.tasks and len(self.workers) < self.size:
            self.workers.append(self._start())
        for worker in self.workers:
            if worker.task is None and self.tasks:
                worker.task = self.tasks.popleft()
                worker.seq, worker.finished, worker.seq_started = None, False, time.monotonic()
                worker.conn.send_bytes(task_message(worker.task))

    def _start(self) -> _Worker:
        parent, child = self.context.Pipe()
        process = self.context.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(
                child,
                self.agent,
                self.registry,
                self.time_limit,
                dict(os.environ),
                self.naming,
                # A forked worker has copies of the parent's ends of its own pipe and of the
                # workers' started before it: it closes them before any agent code runs,
                # which could otherwise write to those workers or read their rows away, and
                # so that it sees the end of its pipe when the parent is gone (holding both
                # ends, a worker outlived a killed check). (Other start methods inherit no
                # descriptors; these objects are never sent to them.)
                (*(w.conn for w in self.workers), parent) if self.forked else (),
            ),
            daemon=True,
        )
        process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def _timeout(self, busy: Sequence[_Worker]) -> float | None:
        """How long to wait for a message: until the first replaying worker's backstop."""
        running = [w for w in busy if w.replaying]
        if self.backstop is None or not running:
            return None
        due = min(w.seq_started for w in running) + self.backstop
        return max(0.0, due - time.monotonic())

    def _stuck(self, worker: _Worker, now: float) -> bool:
        return (
            self.backstop is not None
            and worker.replaying
            and now - worker.seq_started > self.backstop
        )

    def _receive(self, worker: _Worker, now: float) -> None:
        """One message from ``worker``: it started an activation, sent its row, or is done."""
        try:
            message = read_message(worker.conn.recv_bytes(MAX_MESSAGE_BYTES), worker.path)
        except EOFError:
            self._lost(worker, None)
            return
        except OSError:
            if not worker.process.is_alive():
                self._lost(worker, None)
                return
            # Alive: it sent more than any message ("bad message length"). It was taken
            # for lost, then waited for 5 s, and ran on unkilled.
            message = None
        if message is None:
            worker.process.kill()
            if worker.finished:  # after its row: this row replaces it
                self.rows[:] = [r for r in self.rows if (r.path, r.seq) != (worker.path, worker.seq)]
            garbled = WorkerGarbled(worker.path, worker.seq)
            self._lost(worker, refused_row(
                worker.path, garbled, now - worker.seq_started, seq=worker.seq
            ))
        elif message[0] == "start":
            worker.seq, worker.finished, worker.seq_started = message[1], False, now
        elif message[0] == "row":
            self.rows.append(message[1])
            worker.finished = True
            if self.progress is not None:
                self.progress(len(self.rows))
        else:  # done
            worker.task = None

    def _kill_stuck(self, worker: _Worker, now: float) -> None:
        worker.process.kill()
        assert self.time_limit
        seconds = now - worker.seq_started
        stuck = WorkerStuck(
            self.time_limit, seconds, self.naming.given(Input.TIME_LIMIT, "SECONDS")
        )
        self._lost(worker, refused_row(worker.path, stuck, seconds, seq=worker.seq))

    def _lost(self, worker: _Worker, row: CheckRow | None) -> None:
        """The worker is gone: the row of what it was doing, then the rest of its bundle."""
        self.workers.remove(worker)
        worker.conn.close()
        worker.process.join(5)
        if worker.task is None:
            return
        path = worker.path
        if row is None and not worker.finished:
            lost = WorkerLost(path, worker.seq, _exit_how(worker.process.exitcode))
            row = refused_row(path, lost, time.monotonic() - worker.seq_started, seq=worker.seq)
        if row is not None:
            self.rows.append(row)
        if worker.seq is not None:  # the bundle's later activations, in a fresh worker
            self.tasks.appendleft((path, worker.seq))


def check_in_workers(
    files: Sequence[str],
    agent: str | None,
    registry: str | None,
    time_limit: float | None,
    workers: int,
    naming: Naming,
    progress: Callable[[int], None] | None = None,
) -> list[CheckRow]:
    """Replay ``files`` in ``workers`` isolated processes; every activation gets its row,
    in path then seq order; ``progress`` is told the number of rows so far."""
    pool = _Pool(files, agent, registry, time_limit, workers, naming)
    pool.progress = progress
    rows = pool.run()
    order = {path: i for i, path in enumerate(files)}
    rows.sort(key=lambda r: (order[r.path], -1 if r.seq is None else r.seq))
    return rows


def _context() -> BaseContext:
    """The start method of the worker processes.

    ``fork`` when this process runs one thread (the CLI; threads replay keeps idle for
    the next re-run do not count): the workers start at once
    and share the already-imported engine. With other threads running (a Beam worker,
    the TUI, a test runner's helpers) forking could copy a lock held by one of them,
    so ``forkserver`` then, or ``spawn`` where neither exists.
    """
    import multiprocessing
    import threading

    methods = multiprocessing.get_all_start_methods()
    idle = idle_agent_threads()  # replay's own, waiting for the next re-run
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if "fork" in methods and all(t in idle for t in others):
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if main_file is None or os.path.exists(main_file):  # `python -` cannot be re-imported
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(
                ["beam_agents.replay.incidents.check_workers", "beam_agents.replay.engine"]
            )
            return ctx
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _warm() -> None:
    """Import what every forked worker needs before forking them (never agent code: the
    workers import that, each isolated first): the engine and the bundle loader are
    imported already (this module imports them); the divergence detail's differ is not.

    It pulls in numpy: every worker that meets a divergence would import it on its own,
    ~0.3 s of CPU each.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module("deepdiff")
