"""``beam-agents-replay check``: replay many incident bundles, grouped by verdict and cause.

``check_bundles(paths)`` replays every activation of every bundle through the
same ``engine.replay`` as a single replay (one row per activation; a file that
is not a readable, consistent bundle is one ``error`` row, never a stop), and
groups the rows by verdict and *cause*:

- diverged: the first diverging event's kind, name and differing fields
  (``INTENT_STAGED 'issue_refund': attributes['beam_agents.args_sha256']``);
- irreproducible: for a cache miss, its status and the request components the
  nearest cached entry differs in (``cache miss (absent): messages[1]``);
  otherwise the reason;
- error: the refusal's reason, with the file's own name taken out so equal
  problems group together.

The exit code is the worst verdict's, worst first: error (2), diverged (1),
irreproducible (3), reproduced/what-if (0). A broken input outranks a
divergence (the check itself could not do its job), and a divergence — a
definite behaviour change — outranks "could not be judged".

Parallelism is processes (``jobs > 1``, or ``isolate=True`` as the CLI does
even for one job; ``fork`` from a single-threaded caller such as the CLI, else
``forkserver``), not threads: the replay network guard is a process-wide audit
hook and agent modules keep module state, so two replays must never share an
interpreter. Each worker isolates its whole life (``isolate_process()``) before
it imports agent code, then imports the agent once and replays many bundles,
one bundle at a time, saying which activation it starts. A worker that dies
(agent code crashed or ended it) costs that activation an ``error`` row, and a
fresh worker goes on with the bundle's later activations; a worker whose re-run
ran past the time limit (an abandoned thread it cannot stop) reports that row
(irreproducible) and is replaced; one stuck so hard that even its own limit
cannot answer is killed past twice the limit and 30 s. No row is lost, and
``check`` never hangs on agent code with a limit set. Nothing here opens the TUI.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from beam_agents.replay.naming import CHECK_BUNDLES, Input, Naming
from beam_agents.replay.options import (
    DEFAULT_TIME_LIMIT,
    RAN_PAST,
    as_sources,
    checked_time_limit,
)
from beam_agents.replay.result import ReplayResult, Verdict

__all__ = [
    "CheckGroup",
    "CheckReport",
    "CheckRow",
    "bundle_paths",
    "check_bundles",
    "render_check",
    "render_junit",
]

BUNDLE_SUFFIX = ".bundle"
"""A directory given to ``check`` stands for the files directly inside it with this suffix."""

_SEVERITY = {
    Verdict.USAGE_ERROR: 0,
    Verdict.DIVERGED: 1,
    Verdict.IRREPRODUCIBLE: 2,
    Verdict.WHAT_IF: 3,
    Verdict.REPRODUCED: 4,
}


@dataclass(frozen=True, kw_only=True)
class CheckRow:
    """The verdict on one activation of one bundle (or on a file that is not a bundle)."""

    path: str
    """The bundle file, as given (or found in a given directory)."""
    seq: int | None
    """The activation; None when the file could not be read as a bundle."""
    entity_key: bytes
    """The bundle's key (empty when unread)."""
    verdict: Verdict
    cause: str
    """What rows are grouped by (see the module docstring)."""
    detail: str
    """The replay's one-line reason, or the refusal's full message."""
    seconds: float
    """Wall time of this replay (reported, never judged)."""

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def label(self) -> str:
        """``path seq N`` (or the path alone)."""
        return self.path if self.seq is None else f"{self.path} seq {self.seq}"

    def document(self) -> dict[str, object]:
        """The row as JSON data: a row of ``check --json``, and what a worker sends its parent.

        The one encoding of a row (``from_document`` is its decoder): ``seconds`` is
        rounded to the microsecond, and ``exit_code`` is the verdict's.
        """
        return {
            "path": self.path,
            "seq": self.seq,
            "entity_key": self.entity_key.hex(),
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "detail": self.detail,
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_document(cls, data: object) -> CheckRow | None:
        """The row ``document`` encoded, or None for anything else.

        The data is untrusted (a worker runs agent code, which can write to its pipe):
        exactly ``document``'s fields, each of its type, the key as lowercase hex, an
        ``exit_code`` that is the verdict's, and finite non-negative ``seconds``.
        Nothing else is accepted, and nothing in it is run or converted beyond that.
        """
        if not isinstance(data, dict) or data.keys() != _ROW_KEYS:
            return None
        path, seq, key, verdict = data["path"], data["seq"], data["entity_key"], data["verdict"]
        cause, detail, seconds = data["cause"], data["detail"], data["seconds"]
        if not (
            all(isinstance(text, str) for text in (path, key, verdict, cause, detail))
            and (seq is None or _is_int(seq))
            and verdict in _VERDICTS
            and _is_int(data["exit_code"])
            and isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and _HEX.fullmatch(key) is not None
        ):
            return None
        if data["exit_code"] != _VERDICTS[verdict].exit_code:
            return None
        try:
            seconds = float(seconds)  # an integer of 400 digits: OverflowError
        except OverflowError:
            return None
        if not (0 <= seconds < float("inf")):  # NaN, infinities and negatives
            return None
        return cls(
            path=path,
            seq=seq,
            entity_key=bytes.fromhex(key),
            verdict=_VERDICTS[verdict],
            cause=cause,
            detail=detail,
            seconds=seconds,
        )


_ROW_KEYS = frozenset(
    ("path", "seq", "entity_key", "verdict", "exit_code", "cause", "detail", "seconds")
)
"""The fields of ``CheckRow.document``."""

_VERDICTS = {v.value: v for v in Verdict}

_HEX = re.compile("(?:[0-9a-f]{2})*")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class CheckGroup:
    """Rows with one verdict and one cause."""

    verdict: Verdict
    cause: str
    rows: tuple[CheckRow, ...]


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """Everything ``check`` found: one row per activation, in path then seq order."""

    rows: tuple[CheckRow, ...]
    bundles: int
    """Files checked."""
    jobs: int
    seconds: float

    @property
    def worst(self) -> Verdict:
        """The worst verdict of all rows (``reproduced`` when there are none)."""
        if not self.rows:
            return Verdict.REPRODUCED
        return min((row.verdict for row in self.rows), key=_SEVERITY.__getitem__)

    @property
    def exit_code(self) -> int:
        """The worst verdict's exit code: what ``check`` exits with."""
        return self.worst.exit_code

    @property
    def groups(self) -> tuple[CheckGroup, ...]:
        """Rows grouped by (verdict, cause): worst verdict first, then the biggest group."""
        grouped: dict[tuple[Verdict, str], list[CheckRow]] = {}
        for row in self.rows:
            grouped.setdefault((row.verdict, row.cause), []).append(row)
        order = sorted(grouped, key=lambda vc: (_SEVERITY[vc[0]], -len(grouped[vc]), vc[1]))
        return tuple(CheckGroup(verdict=v, cause=c, rows=tuple(grouped[(v, c)])) for v, c in order)

    def counts(self) -> dict[str, int]:
        """Rows per verdict word."""
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.verdict.value] = out.get(row.verdict.value, 0) + 1
        return out

    def render(self) -> str:
        """The table ``check`` prints."""
        return render_check(self)


# --------------------------------------------------------------------------- causes


def result_cause(result: ReplayResult) -> str:
    """What a result is grouped by: first divergence, cache miss component, or reason."""
    verdict = result.verdict
    if verdict is Verdict.REPRODUCED:
        return "reproduced"
    if verdict is Verdict.WHAT_IF:
        return "what-if"
    divergence = result.first_divergence
    if verdict is Verdict.DIVERGED and divergence is not None:
        where = f"{divergence.kind} {divergence.name!r}"
        if divergence.missing:
            return f"{where}: missing from the re-run"
        if divergence.extra:
            return f"{where}: extra in the re-run"
        kind = next((f for f in divergence.fields if f.path == "kind"), None)
        if kind is not None:  # another event altogether: every attribute differs, none is the cause
            return f"{where}: the re-run has {kind.replayed} here"
        return f"{where}: {', '.join(f.path for f in divergence.fields) or 'differs'}"
    miss = result.cache_miss
    if verdict is Verdict.IRREPRODUCIBLE and result.reason.startswith(RAN_PAST):
        return result.reason.partition(" and was not judged")[0]  # not the event it reached
    if verdict is Verdict.IRREPRODUCIBLE and miss is not None:
        if miss.nearest is not None and miss.nearest.differences:
            return f"cache miss ({miss.status}): {', '.join(miss.nearest.differences)}"
        return f"cache miss ({miss.status})"
    return result.reason


# --------------------------------------------------------------------------- running


def bundle_paths(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The files ``check PATH...`` covers: files as given, directories' ``*.bundle`` files."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            out.extend(
                str(f) for f in sorted(p.iterdir()) if f.suffix == BUNDLE_SUFFIX and f.is_file()
            )
        else:
            out.append(os.fspath(path))
    return out


def _empty_directory_rows(paths: Iterable[str | os.PathLike[str]]) -> list[CheckRow]:
    """An ``error`` row for each directory given that holds no ``*.bundle`` file.

    A CI job pointed at the wrong (or an empty) folder must not pass as "nothing
    failed": zero activations checked is not a verdict.
    """
    rows: list[CheckRow] = []
    for path in paths:
        p = Path(path)
        if p.is_dir() and not bundle_paths([p]):
            rows.append(
                CheckRow(
                    path=os.fspath(path),
                    seq=None,
                    entity_key=b"",
                    verdict=Verdict.USAGE_ERROR,
                    cause=f"directory holds no *{BUNDLE_SUFFIX} file",
                    detail=f"directory {os.fspath(path)} holds no *{BUNDLE_SUFFIX} file, so "
                    "nothing in it was checked. Pass the folder the bundles are in (check looks "
                    f"at the *{BUNDLE_SUFFIX} files directly in it, not in subfolders), or the "
                    "bundle files themselves",
                    seconds=0.0,
                )
            )
    return rows


def _refused_row(path: str, refused: Exception, seconds: float) -> CheckRow:
    from beam_agents.replay.refusal import ReplayRefused

    assert isinstance(refused, ReplayRefused)
    return CheckRow(
        path=path,
        seq=None,
        entity_key=b"",
        verdict=refused.verdict,
        cause=refused.reason.replace(path, "FILE"),
        detail=refused.message,
        seconds=seconds,
    )


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
    from beam_agents.replay.engine import replay
    from beam_agents.replay.incidents.bundle import bundle_options, load_bundle
    from beam_agents.replay.refusal import ReplayRefused

    started = time.perf_counter()
    try:
        bundle = load_bundle(path, naming=naming)
    except ReplayRefused as refused:
        yield _refused_row(path, refused, time.perf_counter() - started)
        return
    except Exception as exc:  # a bug of ours: a row that says so, never a stopped run
        yield _internal_row(path, exc, time.perf_counter() - started)
        return
    for seq in bundle.seqs:
        if after_seq is not None and seq <= after_seq:
            continue
        if on_start is not None:
            on_start(seq)
        started = time.perf_counter()
        options = bundle_options(bundle, seq=seq, agent=agent, registry=registry, naming=naming)
        result = replay(replace(options, time_limit=time_limit))
        yield CheckRow(
            path=path,
            seq=seq,
            entity_key=bundle.entity_key,
            verdict=result.verdict,
            cause=result_cause(result).replace(path, "FILE"),
            detail=result.error or result.reason,
            seconds=time.perf_counter() - started,
        )


def _internal_row(path: str, exc: Exception, seconds: float) -> CheckRow:
    return CheckRow(
        path=path,
        seq=None,
        entity_key=b"",
        verdict=Verdict.USAGE_ERROR,
        cause=f"internal error: {type(exc).__name__}",
        detail=f"internal error: {type(exc).__name__}: {exc} (a bug in beam-agents; please "
        "report it with the bundle)",
        seconds=seconds,
    )


def _check_in_process(
    files: Sequence[str],
    agent: str | None,
    registry: str | None,
    time_limit: float | None,
    naming: Naming,
) -> list[CheckRow]:
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # replay writes nothing, not even bytecode caches
    try:
        rows: list[CheckRow] = []
        for path in files:
            rows.extend(check_one(path, agent, registry, time_limit=time_limit, naming=naming))
        return rows
    finally:
        sys.dont_write_bytecode = saved


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
    from beam_agents.replay.isolation.guard import end_process, isolate_process, still_running

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
                task = _task(conn.recv_bytes(MAX_MESSAGE_BYTES))
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


# --- what a worker tells the parent: JSON, never a pickle ---------------------------------------
# The worker runs agent code, which can write to the worker's end of the pipe: a pickle
# from it would run any code in the parent when loaded (outside the worker's isolation), and
# junk would end the whole check. The parent reads each message as JSON of a fixed shape (a
# row is ``CheckRow.document``, decoded by ``CheckRow.from_document``: the same data as a row
# of ``check --json``) and takes anything else as the worker lost (``_garbled_row``).

MAX_MESSAGE_BYTES = 1 << 24
"""The longest message the parent reads from a worker (a row is a few KB)."""


def _send(conn: Connection, message: list[Any]) -> None:
    conn.send_bytes(json.dumps(message, ensure_ascii=True).encode("ascii"))


def _task_message(task: tuple[str, int | None] | None) -> bytes:
    return json.dumps(task, ensure_ascii=True).encode("ascii")


def _task(data: bytes) -> tuple[str, int | None] | None:
    """The task ``_task_message`` encoded (None: stop). A worker reads its tasks as JSON,
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


def _message(data: bytes, path: str) -> tuple[str, Any] | None:
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


def _garbled_row(path: str, seq: int | None, seconds: float) -> CheckRow:
    return CheckRow(
        path=path,
        seq=seq,
        entity_key=b"",
        verdict=Verdict.USAGE_ERROR,
        cause="the worker process sent something that is no check message",
        detail=f"the worker process replaying {path}"
        + (f" seq {seq}" if seq is not None else "")
        + " sent its parent something that is no check message, and was ended: agent code "
        "wrote to the worker's pipe; replay cannot judge an activation whose code does that",
        seconds=seconds,
    )


BACKSTOP_GRACE = 30.0
"""Seconds past twice the time limit after which ``check`` kills a worker that neither
finished an activation nor reported it ran past the limit."""


@dataclass
class _Worker:
    process: Any
    conn: Connection
    task: tuple[str, int | None] | None = None
    seq: int | None = None
    """The activation being replayed (None while the bundle loads)."""
    seq_started: float = 0.0
    finished: bool = False
    """The row of ``seq`` arrived."""


def _lost_row(path: str, seq: int | None, how: str, seconds: float) -> CheckRow:
    return CheckRow(
        path=path,
        seq=seq,
        entity_key=b"",
        verdict=Verdict.USAGE_ERROR,
        cause=f"the worker process ended during the re-run ({how})",
        detail=f"the worker process replaying {path}"
        + (f" seq {seq}" if seq is not None else "")
        + f" ended ({how}) during the re-run: replay cannot judge an activation whose code "
        "ends (or crashes) the process; the pipeline would have lost its worker there",
        seconds=seconds,
    )


def _stuck_row(path: str, seq: int, limit: float, seconds: float, naming: Naming) -> CheckRow:
    return CheckRow(
        path=path,
        seq=seq,
        entity_key=b"",
        verdict=Verdict.IRREPRODUCIBLE,
        cause=f"{RAN_PAST} {limit:g} s",
        detail=f"{RAN_PAST} {limit:g} s and was not judged: the worker replaying it did not "
        f"answer for {seconds:.0f} s and was killed. Agent code held the interpreter past the "
        "limit (native code that does not return, such as a regular expression that backtracks "
        "without end), so the worker could not stop it; if the activation is only slow, raise "
        f"the limit with {naming.given(Input.TIME_LIMIT, 'SECONDS')} (0: no limit)",
        seconds=seconds,
    )


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


def _check_in_workers(
    files: Sequence[str],
    agent: str | None,
    registry: str | None,
    time_limit: float | None,
    workers: int,
    naming: Naming,
) -> list[CheckRow]:
    """Replay ``files`` in ``workers`` isolated processes; every activation gets its row."""
    from collections import deque
    from multiprocessing.connection import wait

    context = _context()
    forked = context.get_start_method() == "fork"
    if forked:
        _warm()
    tasks: deque[tuple[str, int | None]] = deque((path, None) for path in files)
    rows: list[CheckRow] = []
    pool: list[_Worker] = []
    # Past this, a worker that sent neither a row nor a timeout is killed: its own limit
    # (import and re-run, each ``time_limit``) could not answer (native code holding the GIL).
    backstop = 2 * time_limit + BACKSTOP_GRACE if time_limit else None

    def start() -> _Worker:
        parent, child = context.Pipe()
        process = context.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(
                child,
                agent,
                registry,
                time_limit,
                dict(os.environ),
                naming,
                # A forked worker has copies of the parent's ends of its own pipe and of the
                # workers' started before it: it closes them before any agent code runs,
                # which could otherwise write to those workers or read their rows away, and
                # so that it sees the end of its pipe when the parent is gone (holding both
                # ends, a worker outlived a killed check). (Other start methods inherit no
                # descriptors; these objects are never sent to them.)
                (*(w.conn for w in pool), parent) if forked else (),
            ),
            daemon=True,
        )
        process.start()
        child.close()
        return _Worker(process=process, conn=parent)

    def assign(worker: _Worker) -> None:
        worker.task = tasks.popleft()
        worker.seq, worker.finished, worker.seq_started = None, False, time.monotonic()
        worker.conn.send_bytes(_task_message(worker.task))

    def lost(worker: _Worker, row: CheckRow | None) -> None:
        """The worker is gone: the row of what it was doing, then the rest of its bundle."""
        pool.remove(worker)
        worker.conn.close()
        worker.process.join(5)
        if worker.task is None:
            return
        path = worker.task[0]
        if row is None and not worker.finished:
            how = _exit_how(worker.process.exitcode)
            row = _lost_row(path, worker.seq, how, time.monotonic() - worker.seq_started)
        if row is not None:
            rows.append(row)
        if worker.seq is not None:  # the bundle's later activations, in a fresh worker
            tasks.appendleft((path, worker.seq))

    try:
        while tasks or any(w.task is not None for w in pool):
            while tasks and len(pool) < workers:
                pool.append(start())
            for worker in pool:
                if worker.task is None and tasks:
                    assign(worker)
            busy = [w for w in pool if w.task is not None]
            timeout = None
            if backstop is not None:
                running = [w for w in busy if w.seq is not None and not w.finished]
                if running:
                    due = min(w.seq_started for w in running) + backstop
                    timeout = max(0.0, due - time.monotonic())
            ready = wait([w.conn for w in busy], timeout)
            now = time.monotonic()
            for worker in busy:
                if worker.conn in ready:
                    path = worker.task[0] if worker.task else ""
                    try:
                        message = _message(worker.conn.recv_bytes(MAX_MESSAGE_BYTES), path)
                    except EOFError:
                        lost(worker, None)
                        continue
                    except OSError:
                        if not worker.process.is_alive():
                            lost(worker, None)
                            continue
                        # Alive: it sent more than any message ("bad message length"). It
                        # was taken for lost, then waited for 5 s, and ran on unkilled.
                        message = None
                    if message is None:
                        worker.process.kill()
                        garbled = _garbled_row(path, worker.seq, now - worker.seq_started)
                        if worker.finished:  # after its row: this row replaces it
                            rows[:] = [r for r in rows if (r.path, r.seq) != (path, worker.seq)]
                        lost(worker, garbled)
                    elif message[0] == "start":
                        worker.seq, worker.finished, worker.seq_started = message[1], False, now
                    elif message[0] == "row":
                        rows.append(message[1])
                        worker.finished = True
                    else:  # done
                        worker.task = None
                elif (
                    backstop is not None
                    and worker.seq is not None
                    and not worker.finished
                    and now - worker.seq_started > backstop
                ):
                    worker.process.kill()
                    assert time_limit
                    path = worker.task[0] if worker.task else ""
                    lost(
                        worker,
                        _stuck_row(path, worker.seq, time_limit, now - worker.seq_started, naming),
                    )
        for worker in pool:
            with contextlib.suppress(OSError):
                worker.conn.send_bytes(_task_message(None))
    finally:
        for worker in pool:
            worker.process.join(5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
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

    from beam_agents.replay.engine import idle_agent_threads

    methods = multiprocessing.get_all_start_methods()
    idle = idle_agent_threads()  # replay's own, waiting for the next re-run
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if "fork" in methods and all(t in idle for t in others):
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if main_file is None or os.path.exists(main_file):  # `python -` cannot be re-imported
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["beam_agents.replay.incidents.check", "beam_agents.replay.engine"])
            return ctx
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _warm() -> None:
    """Import the engine once, before forking the workers (never agent code: the workers
    import that, each isolated first).

    Each forked worker then starts with them imported instead of importing them again
    (with DeepDiff, which renders divergences: bulk runs usually meet one).
    """
    from beam_agents.replay.engine import replay  # noqa: F401
    from beam_agents.replay.incidents.bundle import load_bundle  # noqa: F401

    # The divergence detail's differ (it pulls in numpy): every worker that meets a
    # divergence would import it on its own, ~0.3 s of CPU each.
    with contextlib.suppress(ImportError):
        importlib.import_module("deepdiff")


def check_bundles(
    paths: Iterable[str | os.PathLike[str]],
    *,
    agent: str | None = None,
    registry: str | None = None,
    jobs: int = 1,
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    isolate: bool = False,
    naming: Naming = CHECK_BUNDLES,
) -> CheckReport:
    """Replay every activation of every bundle and group the verdicts.

    Args:
        paths: Bundle files, or directories (their ``*.bundle`` files).
        agent: Replay with this agent (``module:ATTR``) instead of each bundle's recorded one.
        registry: Likewise for the tool registry.
        jobs: Worker processes; 1 replays in this process (unless ``isolate``).
        time_limit: Seconds each activation's agent code may run (import, re-run); past
            it the row is irreproducible. None or 0: no limit.
        isolate: Replay in worker processes even for one job, so that agent code never
            runs in this process (the CLI's choice): a worker it ends or hangs is an
            ``error`` or irreproducible row, and this process carries on.
        naming: How the rows' messages name the inputs (default: these parameters; the
            command line passes its flags).

    Returns:
        The report: ``report.exit_code`` is the worst verdict's, ``report.groups`` the
        rows by verdict and cause. Bad files are rows, never exceptions.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, got {jobs}")
    try:
        time_limit = checked_time_limit(time_limit)
    except ValueError as exc:
        raise ValueError(f"time_limit {exc}") from None
    paths = list(as_sources(paths))  # one path is one path, not its characters
    files = bundle_paths(paths)
    started = time.perf_counter()
    rows: list[CheckRow] = _empty_directory_rows(paths)
    workers = min(jobs, len(files))
    if workers <= 1 and not isolate:
        rows.extend(_check_in_process(files, agent, registry, time_limit, naming))
    elif files:
        rows.extend(_check_in_workers(files, agent, registry, time_limit, max(workers, 1), naming))
    return CheckReport(
        rows=tuple(rows),
        bundles=len(files),
        jobs=max(workers, 1),
        seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------- rendering


def _safe(text: str) -> str:
    from beam_agents.replay.reporting.escape import escape as safe_text

    return safe_text(text)


def render_check(report: CheckReport, *, limit: int = 20) -> str:
    """The ``check`` table: groups worst first, each group's files (up to ``limit``)."""
    # An error row (a file that is not a bundle, a folder without one) is no activation.
    replayed = sum(1 for row in report.rows if row.seq is not None)
    lines = [
        f"beam-agents-replay check: {replayed} activation(s) in {report.bundles} "
        f"file(s), {report.jobs} job(s), {report.seconds:.1f} s"
    ]
    for group in report.groups:
        lines.append(
            f"{len(group.rows):>6}  {group.verdict.value:<14} (exit {group.verdict.exit_code})  "
            f"{_safe(group.cause)}"
        )
        if group.verdict in (Verdict.REPRODUCED, Verdict.WHAT_IF):
            continue
        for row in group.rows[:limit]:
            lines.append(f"          {_safe(row.label)}")
        if len(group.rows) > limit:
            lines.append(f"          … and {len(group.rows) - limit} more (--json lists all)")
    counts = ", ".join(f"{n} {word}" for word, n in sorted(report.counts().items()))
    lines.append(
        f"worst: {report.worst.value} (exit {report.exit_code})" + (f"; {counts}" if counts else "")
    )
    return "\n".join(lines) + "\n"


def check_json(report: CheckReport) -> dict[str, object]:
    """The ``check --json`` document (each row is ``CheckRow.document``)."""
    return {
        "exit_code": report.exit_code,
        "worst": report.worst.value,
        "files": report.bundles,
        "activations": sum(1 for row in report.rows if row.seq is not None),
        "counts": report.counts(),
        "groups": [
            {
                "verdict": g.verdict.value,
                "exit_code": g.verdict.exit_code,
                "cause": g.cause,
                "count": len(g.rows),
                "rows": [r.document() for r in g.rows],
            }
            for g in report.groups
        ],
    }


# What XML 1.0 forbids in a document (besides what ``escape`` already escapes): the
# noncharacters U+FFFE and U+FFFF, which a file name or a tool name can hold.
_XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    """``_safe`` text that is also a well-formed XML 1.0 character sequence."""
    return _XML_FORBIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", _safe(text))


def render_junit(report: CheckReport, *, suite: str = "beam-agents-replay check") -> bytes:
    """JUnit XML: one test case per activation (diverged: failure; error, irreproducible: error).

    Every name and text goes through the escaper and then loses what XML 1.0 forbids,
    so the document parses whatever the file names, tool names or causes hold.
    """
    import xml.etree.ElementTree as ET

    failures = sum(1 for r in report.rows if r.verdict is Verdict.DIVERGED)
    errors = sum(
        1 for r in report.rows if r.verdict in (Verdict.USAGE_ERROR, Verdict.IRREPRODUCIBLE)
    )
    attrs = {
        "name": suite,
        "tests": str(len(report.rows)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": "0",
        "time": f"{report.seconds:.3f}",
    }
    root = ET.Element("testsuites", attrs)
    testsuite = ET.SubElement(root, "testsuite", attrs)
    for row in report.rows:
        case = ET.SubElement(
            testsuite,
            "testcase",
            {
                "classname": _xml_safe(Path(row.path).stem),
                "name": _xml_safe(row.label),
                "time": f"{row.seconds:.3f}",
            },
        )
        if row.verdict is Verdict.DIVERGED:
            tag = "failure"
        elif row.verdict in (Verdict.USAGE_ERROR, Verdict.IRREPRODUCIBLE):
            tag = "error"
        else:
            if row.verdict is Verdict.WHAT_IF:
                ET.SubElement(case, "system-out").text = _xml_safe(row.detail)
            continue
        node = ET.SubElement(
            case, tag, {"type": row.verdict.value, "message": _xml_safe(row.cause)}
        )
        node.text = _xml_safe(row.detail)
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def worst_of(verdicts: Sequence[Verdict]) -> Verdict:
    """The worst of ``verdicts`` by ``check``'s order (``reproduced`` for none)."""
    return min(verdicts, key=_SEVERITY.__getitem__) if verdicts else Verdict.REPRODUCED
