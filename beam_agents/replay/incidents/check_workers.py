"""Replaying bundles for ``check``: in this process, or one fresh process per activation.

``check_one`` replays every activation of one bundle through the same
``engine.replay`` as a single replay, one row each (a file that is not a
readable, consistent bundle is one row, never a stop).

**A verdict never depends on what else ran.** Agent modules keep module state and
threads outlive their activation, so two replays must never share an interpreter:
a bundle that diverges alone read ``reproduced`` after another bundle had primed a
module global, and a thread left by one made the next irreproducible. So
``check_in_workers`` replays each activation in a process of its own, which ends
after it, and which is what the single replay of that activation would be: a fresh
interpreter that isolated itself (``isolate_process()``), imported the agent code,
re-ran the activation, ran what agent code runs at interpreter exit, and judged it.

Importing agent code costs far more than replaying a small activation (the demo's
agent: 0.25 s, against 3 ms). So for each set of code (agent and registry paths, and
where they import from) a **template** process isolates itself, imports that code
once, and then forks one worker per activation: a fork of it is the fresh process
that has just imported that code. A template is used only when the import left the
process as a fresh one would fork cleanly: no exception and nothing the guard
refused (each worker must see those itself), no thread (a fork would lose it), no
file descriptor left open (forked workers would share its offset) and no signal
handler changed. Otherwise, and when the code cannot be known before the bundle is
loaded, the worker is forked from ``check``'s own process (which never imports
agent code) and imports the code itself.

A worker replays one activation: it says which (``start``), sends its row, then
``more`` (the bundle has later activations: a fresh worker replays the next) or
``done``. A worker that dies (agent code crashed or ended it) costs that activation an
``error`` row; one that ran past the time limit reports that row (irreproducible);
one stuck so hard that even its own limit cannot answer is killed past twice the
limit and ``BACKSTOP_GRACE``. No row is lost, and ``check`` never hangs on agent code
with a limit set.

What workers, templates and their parent say to each other is JSON, never a pickle:
a worker runs agent code, which can write to the worker's end of its pipe, and a
pickle from it would run any code in the parent when loaded (outside the worker's
isolation); junk would end the whole check. The parent reads each message as JSON
of a fixed shape (a row is ``CheckRow.document``, decoded by
``CheckRow.from_document``: the same data as a row of ``check --json``) and takes
anything else as the worker garbled (``WorkerGarbled``). A worker's pipe to the
parent is its own: the parent makes it for that worker and hands it over (a
template passes it on to the worker it forks), and every worker closes every other
descriptor of the parent's, the template's and other workers' before it imports
or runs agent code.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any

from beam_agents.agent import Agent
from beam_agents.replay.engine import replay
from beam_agents.replay.incidents.bundle import (
    bundle_options,
    check_consent,
    load_bundle,
    recorded_code,
)
from beam_agents.replay.incidents.check_rows import (
    CheckRow,
    WorkerGarbled,
    WorkerLost,
    WorkerStuck,
    refused_row,
    result_row,
)
from beam_agents.replay.inputs.agent_code import (
    ancestors,
    import_object,
    import_root,
    no_bytecode,
)
from beam_agents.replay.isolation.guard import (
    block_network,
    end_process,
    isolate_process,
    template_fork,
    template_kill,
)
from beam_agents.replay.isolation.process_exit import (
    drop_exit_callbacks,
    remember_finalizable,
    watch_agent_modules,
)
from beam_agents.replay.isolation.time_limit import (
    ImportRanPast,
    idle_agent_threads,
    within_limit,
)
from beam_agents.replay.naming import CHECK_BUNDLES, Input, Naming
from beam_agents.replay.options import DEFAULT_TIME_LIMIT
from beam_agents.replay.refusal import InternalError, ReplayRefused
from beam_agents.tools import ToolRegistry

__all__ = [
    "BACKSTOP_GRACE",
    "MAX_MESSAGE_BYTES",
    "CheckSettings",
    "Task",
    "check_in_process",
    "check_in_workers",
    "check_one",
    "read_message",
    "read_task",
    "task_message",
]

Task = tuple[str, int | None]
"""What a worker is given: a bundle's path, and the seq after which to start (None: its
first activation). It replays the first activation after that seq."""

MAX_MESSAGE_BYTES = 1 << 24
"""The longest message the parent reads from a worker (a row is a few KB)."""

BACKSTOP_GRACE = 30.0
"""Seconds past twice the time limit after which ``check`` kills a worker that neither
finished an activation nor reported it ran past the limit."""

EXIT_GRACE = 5.0
"""Seconds a worker that said its task is over has to end before ``check`` kills it."""

MAX_TEMPLATES = 4
"""Templates alive at once (one per set of code); the least recently used goes first."""


@dataclass(frozen=True, kw_only=True)
class CheckSettings:
    """What every replay of one ``check`` is given (the same for every bundle)."""

    agent: str | None = None
    registry: str | None = None
    import_recorded: bool = False
    """Consent to import the code bundles record (where ``agent``/``registry`` is None)."""
    time_limit: float | None = DEFAULT_TIME_LIMIT
    naming: Naming = field(default=CHECK_BUNDLES, repr=False)
    process_ends: bool = False
    """Each replay runs in a process that ends after it (``check_in_workers``'s workers)."""


def _replay_row(bundle: Any, path: str, seq: int, settings: CheckSettings) -> CheckRow:
    started = time.perf_counter()
    options = bundle_options(
        bundle,
        seq=seq,
        agent=settings.agent,
        registry=settings.registry,
        import_recorded=settings.import_recorded,
        naming=settings.naming,
    )
    result = replay(
        replace(
            options,
            time_limit=settings.time_limit,
            process_ends=settings.process_ends,
            divergence_detail=False,  # a row never shows it: no DeepDiff in a worker
        )
    )
    seconds = time.perf_counter() - started
    return result_row(path, seq, bundle.entity_key, result, seconds, time_limit=settings.time_limit)


def _load(path: str, settings: CheckSettings) -> tuple[Any, CheckRow | None]:
    """The bundle at ``path`` loaded and consented to, or the row refusing the file."""
    started = time.perf_counter()
    try:
        bundle = load_bundle(path, naming=settings.naming)
        check_consent(
            bundle,
            agent=settings.agent,
            registry=settings.registry,
            import_recorded=settings.import_recorded,
            naming=settings.naming,
        )
    except ReplayRefused as refused:
        return None, refused_row(path, refused, time.perf_counter() - started)
    except Exception as exc:  # a bug of ours: a row that says so, never a stopped run
        return None, refused_row(path, InternalError(exc), time.perf_counter() - started)
    return bundle, None


def check_one(
    path: str,
    settings: CheckSettings,
    *,
    after_seq: int | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Iterator[CheckRow]:
    """Replay every activation of one bundle (those after ``after_seq``), one row each,
    in this process.

    A file that cannot be read, or whose recorded code ``settings`` does not consent to
    import, is one row. ``on_start(seq)`` is called before each re-run. Never raises for
    bad input (a bug of ours becomes an ``error`` row too).
    """
    bundle, refused = _load(path, settings)
    if refused is not None:
        yield refused
        return
    for seq in bundle.seqs:
        if after_seq is not None and seq <= after_seq:
            continue
        if on_start is not None:
            on_start(seq)
        yield _replay_row(bundle, path, seq, settings)


def check_in_process(
    files: Sequence[str],
    settings: CheckSettings,
    progress: Callable[[int], None] | None = None,
) -> list[CheckRow]:
    """Replay ``files`` one after the other in this process (no bytecode written);
    ``progress`` is told the number of rows so far.

    For a caller that asked for it (``check_bundles(isolate=False)``): agent code shares
    this interpreter, so a bundle's verdict can depend on those replayed before it.
    """
    with no_bytecode():
        rows: list[CheckRow] = []
        for path in files:
            for row in check_one(path, settings):
                rows.append(row)
                if progress is not None:
                    progress(len(rows))
        return rows


# --------------------------------------------------------------------------- a worker


def _send(conn: Connection, message: list[Any]) -> None:
    conn.send_bytes(json.dumps(message, ensure_ascii=True).encode("ascii"))


def _close_all(connections: Sequence[Connection]) -> None:
    for conn in connections:
        with contextlib.suppress(OSError):
            conn.close()


def _replay_next(conn: Connection, task: Task, settings: CheckSettings) -> None:
    """Replay the first activation of ``task`` and tell the parent; then end the process.

    Messages: ``["start", seq]`` before the re-run, ``["row", row]`` after it, then
    ``["more"]`` (the bundle has later activations) or ``["done"]``.
    """
    path, after_seq = task
    try:
        bundle, refused = _load(path, settings)
        if refused is not None:
            _send(conn, ["row", refused.document()])
            _send(conn, ["done"])
            end_process(0)
        later = [s for s in bundle.seqs if after_seq is None or s > after_seq]
        if not later:
            _send(conn, ["done"])
            end_process(0)
        _send(conn, ["start", later[0]])
        row = _replay_row(bundle, path, later[0], settings)
        _send(conn, ["row", row.document()])
        _send(conn, ["more"] if len(later) > 1 else ["done"])
    except BaseException:  # the parent turns a lost worker into a row
        end_process(1)
    # The real exit: isolate_process() refuses os._exit, which multiprocessing uses, and an
    # interpreter exit would run agent code again (its exit ran before the judgement).
    end_process(0)


def _isolated(environ: dict[str, str]) -> None:
    """Before any agent code: the parent's environment, isolated for life, no bytecode.

    ``environ`` is the caller's environment when ``check_bundles`` ran: a ``forkserver``
    process would otherwise have the server's, from whenever that process started.
    """
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    isolate_process()  # network, processes, side effects, file writes
    sys.dont_write_bytecode = True
    drop_exit_callbacks()  # the parent's: at this process's exit only agent code's run


def _worker_main(
    conn: Connection,
    task: Task,
    settings: CheckSettings,
    environ: dict[str, str],
    others: tuple[Connection, ...] = (),
) -> None:
    """A worker forked (or started) by the parent itself: isolated, then it imports the
    code and replays one activation."""
    _close_all(others)  # the parent's ends of other pipes, copied by fork
    _isolated(environ)
    _replay_next(conn, task, settings)


# --------------------------------------------------------------------------- a template


def _open_descriptors() -> set[str]:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return set(os.listdir(folder))
    return set()


def _signal_handlers() -> dict[int, Any]:
    handlers = {}
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            handlers[int(number)] = signal.getsignal(number)
    return handlers


def _shared_mappings() -> set[str]:
    """This process's shared memory mappings (``/proc/self/maps`` lines marked ``s``)."""
    with (
        contextlib.suppress(OSError),
        open("/proc/self/maps", encoding="ascii", errors="replace") as maps,
    ):
        return {line for line in maps if line.split()[1:2] and line.split()[1][3:4] == "s"}
    return set()


@contextlib.contextmanager
def _fork_hooks_registered() -> Iterator[list[str]]:
    """Who called ``os.register_at_fork`` while this was open (a fork runs those hooks)."""
    calls: list[str] = []
    register = os.register_at_fork

    def recording(**hooks: Callable[[], object]) -> None:
        calls.append(", ".join(sorted(hooks)))
        register(**hooks)

    os.register_at_fork = recording  # type: ignore[assignment]
    try:
        yield calls
    finally:
        os.register_at_fork = register


def _preload(code: _Code, settings: CheckSettings) -> str | None:
    """Import ``code`` in this (template) process; why a fork of it would not be the fresh
    process that imported it, or None when it would.

    A fork keeps what the import made and runs what it registered for forks: a fork
    differs from the fresh process where the import started a thread, left a descriptor
    or a shared mapping (every worker would share one page), set a signal handler,
    registered a fork hook, or seeded or drew from ``random`` (whose own fork hook reseeds
    it in every child). The standard modules that register fork hooks themselves are
    imported first, so an agent importing them is not counted against it.
    """
    import concurrent.futures.thread  # noqa: F401  (each registers its own fork hook)
    import logging  # noqa: F401
    import random

    agent, registry, search = code
    threads = set(threading.enumerate())
    descriptors = _open_descriptors()
    handlers = _signal_handlers()
    shared = _shared_mappings()
    seeded = random.getstate()

    def import_code() -> None:
        import_object(agent, Input.AGENT, Agent, settings.naming, search)
        import_object(registry, Input.REGISTRY, ToolRegistry, settings.naming, search)

    with (
        no_bytecode(),
        block_network() as attempts,
        watch_agent_modules(),
        _fork_hooks_registered() as fork_hooks,
    ):
        try:
            within_limit(
                import_code,
                settings.time_limit,
                lambda _: ImportRanPast(settings.time_limit or 0, settings.naming),
            )
        except BaseException as exc:  # each worker imports it itself, and says so
            return f"importing it failed ({type(exc).__name__})"
    if attempts:
        return "importing it tried what the guard refuses"
    if fork_hooks:
        return "importing it registered a fork hook (os.register_at_fork)"
    if random.getstate() != seeded:
        return "importing it seeded or drew from the random module, which a fork reseeds"
    if _shared_mappings() - shared:
        return "importing it mapped shared memory, which every fork would share"
    idle = idle_agent_threads()
    if any(t not in threads and t not in idle for t in threading.enumerate()):
        return "importing it started a thread"
    if _open_descriptors() - descriptors:
        return "importing it left a file descriptor open"
    if _signal_handlers() != handlers:
        return "importing it set a signal handler"
    return None


_Code = tuple[str, str, tuple[str, ...]]
"""A set of code: the agent path, the registry path, and where they import from."""


def _template_main(
    ctrl: Connection,
    handles: Connection,
    code: _Code,
    settings: CheckSettings,
    environ: dict[str, str],
    others: tuple[Connection, ...] = (),
) -> None:
    """A template: isolated, it imports ``code`` once, then forks a worker per task.

    From the parent: ``["run", id, path, after_seq]`` (the worker's pipe follows on
    ``handles``), ``["kill", id]`` and ``["stop"]``. To it: ``["ready"]`` or
    ``["unusable", why]`` once, then ``["exited", id, exit code]`` per worker.
    """
    from multiprocessing.reduction import recv_handle

    _close_all(others)
    _isolated(environ)
    why = _preload(code, settings)
    _send(ctrl, ["unusable", why] if why is not None else ["ready"])
    if why is not None:
        end_process(0)
    remember_finalizable()  # gc.freeze() hides them from the workers' exit
    gc.freeze()  # what is here now is never collected in a worker: fewer pages copied
    children: dict[int, tuple[int, int | None]] = {}  # id -> (pid, pidfd)
    while True:
        waiting: list[Any] = [ctrl, *(fd for _, fd in children.values() if fd is not None)]
        polling = any(fd is None for _, fd in children.values())
        ready = wait(waiting, timeout=0.05 if polling else None)
        if ctrl in ready:
            message = _template_message(ctrl)
            if message is None or message[0] == "stop":
                break
            if message[0] == "kill" and message[1] in children:
                template_kill(children[message[1]][0])
            elif message[0] == "run":
                _, task_id, path, after_seq = message
                fd = recv_handle(handles)
                pid = template_fork()
                if pid == 0:  # the worker: nothing of the template's but its code
                    _close_all([ctrl, handles])
                    for _, pidfd in children.values():
                        if pidfd is not None:
                            with contextlib.suppress(OSError):
                                os.close(pidfd)
                    _replay_next(Connection(fd), (path, after_seq), settings)
                os.close(fd)
                children[task_id] = (pid, _pidfd(pid))
        for task_id, (pid, pidfd) in list(children.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if pidfd is not None:
                    os.close(pidfd)
                del children[task_id]
                with contextlib.suppress(OSError):
                    _send(ctrl, ["exited", task_id, os.waitstatus_to_exitcode(status)])
    for pid, _ in children.values():  # the parent went away, or stopped us: nothing waits
        template_kill(pid)
    end_process(0)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (None: poll for it)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd


def _template_message(ctrl: Connection) -> list[Any] | None:
    """What the parent said (None: it went away, or said something else)."""
    try:
        message = json.loads(ctrl.recv_bytes(MAX_MESSAGE_BYTES))
    except (EOFError, OSError, ValueError):
        return None
    if not isinstance(message, list) or not message:
        return None
    if message[0] == "stop" and len(message) == 1:
        return message
    if message[0] == "kill" and len(message) == 2 and _is_int(message[1]):
        return message
    if (
        message[0] == "run"
        and len(message) == 4
        and _is_int(message[1])
        and isinstance(message[2], str)
        and (message[3] is None or _is_int(message[3]))
    ):
        return message
    return None


# --------------------------------------------------------------------------- messages


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def task_message(task: Task | None) -> bytes:
    """A task as JSON (None: stop)."""
    return json.dumps(task, ensure_ascii=True).encode("ascii")


def read_task(data: bytes) -> Task | None:
    """The task ``task_message`` encoded (None: stop). Tasks are JSON, never a pickle:
    nothing but the parent should write them, but a pickle would run whatever code it
    names where it is read. Anything else raises ValueError."""
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
    """``("start", seq)``, ``("row", CheckRow)``, ``("more", None)`` or ``("done", None)``
    from a worker replaying ``path``; None for anything else (not JSON, another shape,
    another path)."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return None
    kind, args = message[0], message[1:]
    if kind in ("done", "more") and not args:
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


class _TemplateWorker:
    """A worker a template forked, as the pool sees it (the template reaps it)."""

    def __init__(self, template: _Template, task_id: int) -> None:
        self.template = template
        self.task_id = task_id
        self.exitcode: int | None = None
        self.gone = False
        """The template reported its end (or the template itself is gone)."""

    def kill(self) -> None:
        if not self.gone:
            self.template.send(["kill", self.task_id])

    def is_alive(self) -> bool:
        return not self.gone

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.gone:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.template.pump(left):
                return


@dataclass
class _Template:
    """A template process, as the pool sees it."""

    code: _Code
    process: Any
    ctrl: Connection
    handles: Connection
    state: str = "starting"
    """``starting``, ``ready``, ``unusable`` (workers of its code are forked by the pool)
    or ``gone``."""
    waiting: deque[Task] = field(default_factory=deque)
    """Tasks for it, held while it imports."""
    workers: dict[int, _TemplateWorker] = field(default_factory=dict)
    last_used: float = 0.0

    def send(self, message: list[Any]) -> bool:
        try:
            _send(self.ctrl, message)
        except OSError:
            self.lost()
            return False
        return True

    def pump(self, timeout: float | None) -> bool:
        """Read one message if one comes within ``timeout``; False if none did (or it is gone)."""
        if self.state == "gone":
            return False
        try:
            if not self.ctrl.poll(timeout):
                return False
        except OSError:
            self.lost()
            return False
        self.receive()
        return True

    def receive(self) -> None:
        """One message from the template: its import's outcome, or a worker's end."""
        try:
            message = json.loads(self.ctrl.recv_bytes(MAX_MESSAGE_BYTES))
        except (EOFError, OSError, ValueError):
            self.lost()
            return
        if message == ["ready"] and self.state == "starting":
            self.state = "ready"
        elif (
            isinstance(message, list)
            and len(message) == 2
            and message[0] == "unusable"
            and self.state == "starting"
        ):
            self.state = "unusable"
        elif (
            isinstance(message, list)
            and len(message) == 3
            and message[0] == "exited"
            and _is_int(message[1])
            and _is_int(message[2])
        ):
            worker = self.workers.pop(message[1], None)
            if worker is not None:
                worker.exitcode, worker.gone = message[2], True
        else:  # nothing but our own code writes there: it is broken
            self.lost()

    def lost(self) -> None:
        """The template is gone (or broken): its workers' ends are not known any more."""
        if self.state == "gone":
            return
        self.state = "gone"
        with contextlib.suppress(Exception):
            self.process.kill()
        for worker in self.workers.values():
            worker.gone = True
        self.workers.clear()
        _close_all([self.ctrl, self.handles])


@dataclass
class _Worker:
    process: Any
    """A ``multiprocessing`` process, or a ``_TemplateWorker``."""
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
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        try:
            return f"killed by signal {-exitcode}, {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class _Pool:
    """Workers replaying a queue of tasks, at most ``size`` at once; every activation gets
    a row."""

    def __init__(self, files: Sequence[str], settings: CheckSettings, size: int) -> None:
        self.settings = replace(settings, process_ends=True)
        self.size = size
        self.progress: Callable[[int], None] | None = None
        """Told the number of rows so far, as they arrive."""
        self.context = _context()
        self.forked = self.context.get_start_method() == "fork"
        self.tasks: deque[Task] = deque((path, None) for path in files)
        self.rows: list[CheckRow] = []
        self.workers: list[_Worker] = []
        self.exiting: list[tuple[Any, float]] = []
        """Workers that said their task is over, and when they are killed if still alive:
        their exit is not waited for before the next worker starts (under load, waiting for
        each end serialized the pool: ``--jobs 2`` ran no faster than ``--jobs 1``)."""
        self.templates: dict[_Code, _Template] = {}
        self.codes: dict[str, _Code | None] = {}
        self.next_id = 0
        # Past this, a worker that sent neither a row nor a timeout is killed: its own limit
        # (import and re-run, each ``time_limit``) could not answer (native code holding the
        # GIL).
        limit = settings.time_limit
        self.backstop = 2 * limit + BACKSTOP_GRACE if limit else None

    def run(self) -> list[CheckRow]:
        if self.forked:
            _warm()
        try:
            while self.tasks or self.workers or self._importing():
                self._fill()
                busy = self.workers
                starting = [t for t in self.templates.values() if t.state != "gone"]
                ready = wait(
                    [w.conn for w in busy] + [t.ctrl for t in starting], self._timeout(busy)
                )
                now = time.monotonic()
                for template in starting:
                    if template.ctrl in ready:
                        template.receive()
                for worker in list(busy):
                    if worker.conn in ready:
                        self._receive(worker, now)
                    elif self._stuck(worker, now):
                        self._kill_stuck(worker, now)
                self._reap(now)
        finally:
            for worker in self.workers:
                worker.process.kill()
            for process, due in self.exiting:
                process.join(max(0.0, due - time.monotonic()))
                if process.is_alive():
                    process.kill()
            for template in self.templates.values():
                self._stop(template)
        return self.rows

    def _importing(self) -> bool:
        return any(t.waiting for t in self.templates.values())

    # -- starting workers ------------------------------------------------------------------

    def _code_of(self, path: str) -> _Code | None:
        """The code a worker for ``path`` imports, when it is known before the bundle loads
        (None: the worker is forked from here, and finds out)."""
        if path in self.codes:
            return self.codes[path]
        settings = self.settings
        code: _Code | None = None
        if settings.agent is not None and settings.registry is not None:
            paths: tuple[str, str] | None = (settings.agent, settings.registry)
        elif settings.import_recorded:
            recorded = recorded_code(path)
            paths = (
                None
                if recorded is None
                else (settings.agent or recorded[0], settings.registry or recorded[1])
            )
        else:  # no consent: the worker refuses it, importing nothing
            paths = None
        if paths is not None:
            search = (
                ancestors(path) if (settings.agent is None or settings.registry is None) else ()
            )
            roots = tuple(
                dict.fromkeys(
                    root for root in (import_root(p, search) for p in paths) if root is not None
                )
            )
            code = (paths[0], paths[1], roots)
        self.codes[path] = code
        return code

    def _fill(self) -> None:
        """Start workers up to the pool's size (tasks whose template imports wait for it)."""
        for started in list(self.templates.values()):
            if started.state != "starting":
                while started.waiting:
                    self.tasks.appendleft(started.waiting.pop())
        while self.tasks and len(self.workers) < self.size:
            task = self.tasks.popleft()
            template = self._template_for(task[0])
            if template is not None and template.state == "starting":
                template.waiting.append(task)
                continue
            self.workers.append(self._start(task, template))

    def _template_for(self, path: str) -> _Template | None:
        code = self._code_of(path)
        if code is None:
            return None
        template = self.templates.get(code)
        if template is None or template.state == "gone":
            template = self._start_template(code)
            if template is None:
                return None
        if template.state in ("unusable", "gone"):
            return None
        template.last_used = time.monotonic()
        return template

    def _start_template(self, code: _Code) -> _Template | None:
        alive = [t for t in self.templates.values() if t.state in ("starting", "ready")]
        if len(alive) >= MAX_TEMPLATES:
            idle = [t for t in alive if t.state == "ready" and not t.workers and not t.waiting]
            if not idle:
                return None
            self._stop(min(idle, key=lambda t: t.last_used))
        ctrl, ctrl_child = self.context.Pipe()
        handles, handles_child = self.context.Pipe()
        process = self.context.Process(  # type: ignore[attr-defined]
            target=_template_main,
            args=(
                ctrl_child,
                handles_child,
                code,
                self.settings,
                dict(os.environ),
                self._inherited(ctrl, handles),
            ),
            daemon=True,
        )
        process.start()
        ctrl_child.close()
        handles_child.close()
        template = _Template(code=code, process=process, ctrl=ctrl, handles=handles)
        self.templates[code] = template
        return template

    def _inherited(self, *own: Connection) -> tuple[Connection, ...]:
        """What a forked process must close before agent code runs: the parent's ends of
        every pipe (to the other workers and templates, and its own), copied by fork.
        (Other start methods inherit no descriptors; these objects are never sent to them.)"""
        if not self.forked:
            return ()
        return (
            *(w.conn for w in self.workers),
            *(c for t in self.templates.values() if t.state != "gone" for c in (t.ctrl, t.handles)),
            *own,
        )

    def _start(self, task: Task, template: _Template | None) -> _Worker:
        parent, child = self.context.Pipe()
        if template is not None:
            from multiprocessing.reduction import send_handle

            self.next_id += 1
            worker_id = self.next_id
            handle = _TemplateWorker(template, worker_id)
            if template.send(["run", worker_id, task[0], task[1]]):
                try:
                    send_handle(template.handles, child.fileno(), template.process.pid)
                except OSError:
                    template.lost()
            if template.state == "gone":  # never started: this worker is lost, and said so
                handle.gone = True
            else:
                template.workers[worker_id] = handle
            child.close()
            return self._started(handle, parent, task)
        process = self.context.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(
                child,
                task,
                self.settings,
                dict(os.environ),
                # A forked worker closes the parent's ends it inherited (its own pipe's, and
                # the other workers' and templates'): agent code could otherwise write to
                # them or read their rows away, and with both ends a worker outlived a
                # killed check.
                self._inherited(parent),
            ),
            daemon=True,
        )
        process.start()
        child.close()
        return self._started(process, parent, task)

    @staticmethod
    def _started(process: Any, conn: Connection, task: Task) -> _Worker:
        return _Worker(process=process, conn=conn, task=task, seq_started=time.monotonic())

    def _stop(self, template: _Template) -> None:
        if template.state != "gone":
            template.send(["stop"])
            template.process.join(5)
            template.lost()

    # -- what workers say ------------------------------------------------------------------

    def _timeout(self, busy: Sequence[_Worker]) -> float | None:
        """How long to wait for a message: until the first replaying worker's backstop, or
        the first exiting worker's kill."""
        running = [w for w in busy if w.replaying]
        dues = [due for _, due in self.exiting]
        if self.backstop is not None and running:
            dues.append(min(w.seq_started for w in running) + self.backstop)
        if not dues:
            return None
        return max(0.0, min(dues) - time.monotonic())

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
            # Alive: it sent more than any message ("bad message length").
            message = None
        if message is None:
            worker.process.kill()
            if worker.finished:  # after its row: this row replaces it
                self.rows[:] = [
                    r for r in self.rows if (r.path, r.seq) != (worker.path, worker.seq)
                ]
            garbled = WorkerGarbled(worker.path, worker.seq)
            self._lost(
                worker, refused_row(worker.path, garbled, now - worker.seq_started, seq=worker.seq)
            )
        elif message[0] == "start":
            worker.seq, worker.finished, worker.seq_started = message[1], False, now
        elif message[0] == "row":
            self._add(message[1])
            worker.finished = True
        else:  # more, done: this worker's task is over (it ends on its own)
            if message[0] == "more" and worker.seq is not None:
                self.tasks.appendleft((worker.path, worker.seq))
            self._retire(worker)

    def _retire(self, worker: _Worker) -> None:
        """The worker's task is over: the next one may start now; it ends on its own (it
        is killed if it has not within ``EXIT_GRACE``)."""
        self.workers.remove(worker)
        worker.conn.close()
        worker.task = None
        self.exiting.append((worker.process, time.monotonic() + EXIT_GRACE))

    def _reap(self, now: float) -> None:
        """Forget the exiting workers that have ended; kill those past their grace."""
        still: list[tuple[Any, float]] = []
        for process, due in self.exiting:
            if not process.is_alive():
                process.join(0)
            elif now >= due:
                process.kill()
                process.join(0)
            else:
                still.append((process, due))
        self.exiting = still

    def _kill_stuck(self, worker: _Worker, now: float) -> None:
        worker.process.kill()
        limit = self.settings.time_limit
        assert limit
        seconds = now - worker.seq_started
        stuck = WorkerStuck(limit, seconds, self.settings.naming.given(Input.TIME_LIMIT, "SECONDS"))
        self._lost(worker, refused_row(worker.path, stuck, seconds, seq=worker.seq))

    def _add(self, row: CheckRow) -> None:
        self.rows.append(row)
        if self.progress is not None:
            self.progress(len(self.rows))

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
            self._add(row)
        if worker.seq is not None:  # the bundle's later activations, in a fresh worker
            self.tasks.appendleft((path, worker.seq))


def check_in_workers(
    files: Sequence[str],
    settings: CheckSettings,
    workers: int,
    progress: Callable[[int], None] | None = None,
) -> list[CheckRow]:
    """Replay ``files`` with at most ``workers`` worker processes at once, one per
    activation; every activation gets its row, in path then seq order; ``progress`` is
    told the number of rows so far."""
    pool = _Pool(files, settings, workers)
    pool.progress = progress
    rows = pool.run()
    order = {path: i for i, path in enumerate(files)}
    rows.sort(key=lambda r: (order[r.path], -1 if r.seq is None else r.seq))
    return rows


def _context() -> BaseContext:
    """The start method of the worker and template processes.

    ``fork`` when this process runs one thread (the CLI; threads replay keeps idle for
    the next re-run do not count): the processes start at once and share the
    already-imported engine. With other threads running (a Beam worker, the TUI, a
    test runner's helpers) forking could copy a lock held by one of them, so
    ``forkserver`` then, or ``spawn`` where neither exists. (A template forks its own
    workers: it runs one thread.)
    """
    import multiprocessing

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
    """First use what every forked worker needs before forking them (never agent code: the
    workers and templates import that, each isolated first).

    The engine and the bundle loader are imported already (this module imports them).
    The divergence detail's differ (DeepDiff) is not, and is never needed: a row does not
    show that detail, so workers replay with ``divergence_detail=False``. Importing it
    here made every template and worker carry numpy and pydantic (27 MB, 200 modules):
    each fork and each page a worker touched cost more (docs/incidents.md, "What it
    costs"). Then a replay of an agent of replay's own (``_warm_engine``), reproduced and
    diverged, so that each worker does not pay the engine's first-use costs again (lazy
    imports, compiled patterns: half of a small activation's replay).
    """
    _warm_engine()


def _warm_engine() -> None:
    """One small replay, reproduced, then diverged, of an agent defined here (replay's own
    code: nothing of the operator's runs), its bundle loaded as a worker loads one, each
    replayed as a worker replays (no DeepDiff detail)."""
    from beam_agents import AgentConfig, Done, tool
    from beam_agents._version import __version__
    from beam_agents.hitl import DEFAULT_HITL_POLICY
    from beam_agents.replay.engine import HeaderSoFar, run
    from beam_agents.replay.incidents.bundle import make_bundle
    from beam_agents.replay.inputs.replay_inputs import ReplayInputs
    from beam_agents.replay.inputs.snapshot import load_snapshot_source
    from beam_agents.replay.naming import REPLAYER
    from beam_agents.replay.result import ReplayHeader
    from beam_agents.testing import (
        PipelineKey,
        ScriptedProvider,
        chat_request,
        event_envelope,
        export_request_envelope,
    )

    @tool(name="look")
    def look(item: str) -> dict[str, str]:
        return {"item": item}

    @tool(name="look")
    def look_elsewhere(item: str) -> dict[str, str]:
        return {"item": item + "?"}

    class Warm(Agent):
        def start(self, ctx: Any, event: Any) -> Any:
            found = ctx.call("look", item="a")
            ctx.complete(chat_request("warm", ("user", str(found))))
            ctx.memory["seen"] = found
            return Done(output=b"warm")

        def resume(self, ctx: Any, state: Any, step_index: int, inbound: Any) -> Any:
            raise NotImplementedError

    agent, registry = Warm(), ToolRegistry([look])
    key = PipelineKey(
        agent,
        registry,
        AgentConfig(provider_factory=lambda: ScriptedProvider(lambda request: "ok")),
        entity_key=b"beam-agents-replay warm-up",
    )
    envelope = event_envelope(key.entity_key, "warm", b"", time_ms=1)
    [ran] = key.send(envelope).activations
    [snapshot] = key.send(export_request_envelope(key.entity_key, "warm", time_ms=2)).snapshots
    stream = b"".join(_frame(e) for e in ran.trace)
    with contextlib.suppress(ReplayRefused):
        load_bundle(
            make_bundle(
                snapshot=snapshot,
                traces=[stream],
                event=envelope.SerializeToString(),
                agent="beam_agents:Agent",
                registry="beam_agents:ToolRegistry",
            )
        )
    for tools in (registry, ToolRegistry([look_elsewhere])):
        loaded, state, blob_versions = load_snapshot_source(snapshot, REPLAYER)
        inputs = ReplayInputs(
            snapshot=loaded,
            state=state,
            blob_versions=blob_versions,
            event=envelope,
            events=(),
            traces=(stream,),
            agent=agent,
            registry=tools,
            hitl=DEFAULT_HITL_POLICY,
            seq=None,
            what_if=False,
            time_limit=DEFAULT_TIME_LIMIT,
            naming=REPLAYER,
            divergence_detail=False,
        )
        header = ReplayHeader(version=__version__, agent_path="warm", registry_path="warm")
        result = run(HeaderSoFar(header), functools.partial(_given, inputs))
        result_row("warm", 1, b"", result, 0.0, time_limit=None).document()


def _given(inputs: Any) -> Any:
    """The inputs as they were built (``engine.run``'s loader for the warm-up)."""
    return inputs


def _frame(event: Any) -> bytes:
    from beam_agents._wire import frame
    from beam_agents.trace_events import serialize_trace_event

    return frame(serialize_trace_event(event))
