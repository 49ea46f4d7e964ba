"""The guard replay runs under: network, processes, native code and file writes refused.

A replay runs the operator's read-only tools for real. A tool that reaches the
network would make the replay depend on the world as it is now, not as it was
when the activation ran, and could hang an operator's terminal on a dead host;
one that starts a process, loads native code through ``ctypes`` or writes a
file does something replay cannot see or undo. So while ``block_network()`` is
active, a ``sys.addaudithook`` hook refuses, by raising from inside the audited
operation before it happens:

- every operation that resolves a name or opens a connection (``socket.connect``,
  ``socket.getaddrinfo``, ``socket.sendto``, ``http.client.connect``, ...):
  ``NetworkBlockedError``;
- starting a process (``subprocess.Popen``, ``os.system``, ``os.exec*``,
  ``os.posix_spawn``, ``os.spawn*``, ``os.fork``, ``_posixsubprocess.fork_exec``
  called directly), sending a signal
  (``os.kill``, ``os.killpg``, ``signal.pthread_kill``,
  ``signal.pidfd_send_signal``, ``signal.raise_signal``), setting another process's resource limits
  (``resource.prlimit``), loading native code
  or resolving a native symbol through ``ctypes`` (``ctypes.dlopen``,
  ``ctypes.dlsym``) and calling native code through ``ctypes`` at all (``ctypes.call``,
  raised by ``_audit_ctypes_calls``'s call: a pointer made from an address needs
  neither): ``PermissionError``;
- in the activation's own context (agent code, tools it calls) and while a module of
  agent code is imported, opening a file for writing, changing the file system
  (``os.remove``, ``os.rename``, ``os.mkdir``, ``shutil.rmtree``, ``os.mkfifo``, ``os.mknod``,
  ``_posixshmem.shm_open``: the last three wrapped to raise an event) or opening a
  database through ``sqlite3`` (which creates and writes files in native code):
  ``PermissionError``. Under ``isolate_process()`` these are refused in every
  thread and at every moment of the process's life (an ``atexit`` hook, a
  finalizer, a logging handler opening its file late), except where replay's own
  code writes what the operator asked for (``own_file_writes()``).

While active it also refuses writing to, duplicating or replacing (``os.dup2`` onto) a
descriptor given to ``protect_descriptor()``, the console script's report stream, and
opening it as a file (``os.dup2``, ``os.dup``, ``os.write`` are wrapped to raise events).

Each attempt is recorded with the ``ctx.call`` tool running at that moment
(read from the ``ContextVar`` ``ctx.call`` sets, not from stack frames),
because agent code may catch the error and carry on: a replay that tried any of
these is irreproducible (exit 3) whatever the code did next.

Audit hooks cannot be removed, so the hook is installed once per process and is
inert (one attribute test) outside ``block_network()``. Network, process and
native-code blocks are process-wide while active: a tool's worker threads are
blocked too. ``isolate_process()`` (the CLI calls it before it imports agent
code) keeps those blocks for the life of the process, so a thread a tool
started, or an ``atexit`` hook registered at import, cannot reach out after the
re-run either. ``keep_blocked()`` keeps the blocks of a re-run abandoned at
its time limit in force until its thread ends.

``record_operations()`` (at the end of this module, apart from the refusals) is a
recording mode for the determinism doctor: a second audit hook of its own, reading the
same tables, that reports each of these operations, and file reads, to a recorder and
refuses nothing. The refusing hook never calls it and is not changed by it.

What it cannot see: native code that makes system calls directly (a C
extension opening its own sockets or files, already-loaded native libraries);
writes to a file that was already open before the guard was (no audit event
covers ``write``); and, without ``isolate_process()`` (the Python API), file
writes from threads agent code started (they run outside the activation's
context; their network and process attempts are still refused).
"""

from __future__ import annotations

import enum
import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from beam_agents import _running
from beam_agents.errors import NetworkBlockedError
from beam_agents.replay.result import text_digest

__all__ = [
    "NETWORK_OPERATIONS",
    "PROCESS_OPERATIONS",
    "ExitRefused",
    "NetworkAttempt",
    "Operation",
    "OperationKind",
    "block_network",
    "end_process",
    "is_refusal",
    "isolate_process",
    "keep_blocked",
    "late_attempts",
    "own_file_writes",
    "protect_descriptor",
    "provider_network",
    "record_operations",
    "still_running",
    "template_fork",
    "template_kill",
]


@dataclass(frozen=True)
class NetworkAttempt:
    """One refused network operation."""

    operation: str
    """The audit event, e.g. ``socket.connect``."""
    address: str
    """``host:port``, a socket path, or the host name being resolved."""
    tool: str | None
    """The read-only tool ``ctx.call`` was running, or None (agent code itself)."""
    event_index: int | None
    """The index the next trace event of the activation would take (where it happened)."""
    at_exit: bool = False
    """Tried by what agent code runs at interpreter exit (``process_exit.run_exit``)."""

    def redacted(self) -> NetworkAttempt:
        """This attempt with its address (built from agent code's values) as its digest."""
        return replace(self, address=text_digest(self.address))

    def describe(self) -> str:
        """One line naming the address (or process, library, path) and, if known, the tool."""
        where = f"tool {self.tool!r}" if self.tool else "agent code (outside any tool)"
        if self.at_exit:
            where = "agent code at interpreter exit (a thread, an atexit hook or a finalizer)"
        what = _WHAT.get(self.operation, "")
        return f"{what}{self.address} ({self.operation}, by {where})"


def _host_port(host: object, port: object) -> str:
    host_text = host.decode("utf-8", "replace") if isinstance(host, bytes) else str(host)
    if port is None:
        return host_text
    return f"[{host_text}]:{port}" if ":" in host_text else f"{host_text}:{port}"


def _address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return _host_port(address[0], address[1])
    if isinstance(address, bytes):
        return address.decode("utf-8", "replace") or repr(address)
    return str(address)


# Audited operations that resolve a name or open a connection, and how to read
# the address out of each one's arguments.
_BLOCKED: dict[str, Callable[[tuple[Any, ...]], str]] = {
    "socket.connect": lambda args: _address(args[1]),
    "socket.sendto": lambda args: _address(args[1]),
    "socket.sendmsg": lambda args: _address(args[1]),
    "socket.bind": lambda args: _address(args[1]),
    "socket.getaddrinfo": lambda args: _host_port(args[0], args[1]),
    "socket.gethostbyname": lambda args: str(args[0]),
    "socket.gethostbyaddr": lambda args: str(args[0]),
    "socket.getnameinfo": lambda args: _address(args[0]),
    "http.client.connect": lambda args: _host_port(args[1], args[2]),
    "ftplib.connect": lambda args: _host_port(args[1], args[2]),
    "smtplib.connect": lambda args: _host_port(args[1], args[2]),
    "poplib.connect": lambda args: _host_port(args[1], args[2]),
    "imaplib.open": lambda args: _host_port(args[1], args[2]),
    "nntplib.connect": lambda args: _host_port(args[1], args[2]),
}

# Processes and native code: refused process-wide while the guard is active.
_PROCESS: dict[str, Callable[[tuple[Any, ...]], str]] = {
    "subprocess.Popen": lambda args: _command(args[1] if args[1] is not None else args[0]),
    "os.system": lambda args: _command(args[0]),
    "os.exec": lambda args: _command(args[1] if len(args) > 1 and args[1] else args[0]),
    "os.posix_spawn": lambda args: _command(args[1] if len(args) > 1 and args[1] else args[0]),
    # No audit event of its own (subprocess.Popen raises one before calling it): wrapped.
    "_posixsubprocess.fork_exec": lambda args: _command(args[0]),
    "os.spawn": lambda args: _command(args[2] if len(args) > 2 and args[2] else args[1]),
    "os.fork": lambda args: "fork()",
    "os.forkpty": lambda args: "forkpty()",
    "os.startfile": lambda args: _command(args[0]),
    "os.kill": lambda args: _signal_to(args),
    "os.killpg": lambda args: _signal_to(args, group=True),
    "signal.pthread_kill": lambda args: f"a signal ({args[1]}) to thread {args[0]}",
    # No audit event of its own: the guard wraps it (``_install``) to raise this one.
    "signal.pidfd_send_signal": lambda args: (
        f"signal {args[1]} through process descriptor {args[0]}"
    ),
    # No audit event of its own either: wrapped. SIGSTOP raised this way stopped the replay
    # for good where nobody can continue it (CI), as the watchdog counts no stopped time.
    "signal.raise_signal": lambda args: f"signal {args[0]} to this process",
    # Another process's limits (RLIMIT_CPU of 0 ends it): the replay's watchdog, say.
    "resource.prlimit": lambda args: f"resource limits of process {args[0]}",
    "_winapi.CreateProcess": lambda args: _command(args[1] or args[0]),
    "ctypes.dlopen": lambda args: str(args[0]),
    "ctypes.dlsym": lambda args: f"{args[1]}" if len(args) > 1 else str(args[0]),
    # Calling native code through ctypes, whatever the function pointer was made from (an
    # address read from /proc/self/maps needs no dlopen or dlsym): the guard cannot see
    # what the called code does (it made a directory and a connection). ``_ctypes.
    # call_function`` raises the first; every other call the second (``_audited_call``).
    "ctypes.call_function": lambda args: f"native function at {args[0]:#x}",
    "ctypes.call": lambda args: str(args[0]),
    # Loads native code into the database connection (any shared library).
    "sqlite3.enable_load_extension": lambda args: "a native sqlite3 extension",
}

# File-system changes: refused only in the activation's own context (agent code).
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_FILE_CHANGES = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.replace",
        "os.rmdir",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.utime",
        "os.chflags",
        # No audit event of their own (CPython raises none for them): the guard wraps
        # them (``_install``) to raise these. A FIFO, a device node and a POSIX shared
        # memory object (a file under /dev/shm) are file-system changes like a mkdir.
        "os.mkfifo",
        "os.mknod",
        "_posixshmem.shm_open",
        "_posixshmem.shm_unlink",
        "os.removexattr",
        "os.setxattr",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.make_archive",
        "shutil.move",
        "shutil.rmtree",
        "shutil.unpack_archive",
    }
)
# Operations on a descriptor the guard protects (``protect_descriptor``: the console
# script's report stream), refused whoever makes them while the guard is active: with
# them agent code replaced the report (``os.dup2`` of /dev/null onto it) or wrote a forged
# one. ``os.dup2``, ``os.dup`` and ``os.write`` raise no audit event: wrapped to raise these.
_DESCRIPTOR_EVENTS = frozenset({"os.dup2", "os.dup", "os.write", "os.writev", "fcntl.fcntl"})
_HARMLESS_PATHS = frozenset({os.devnull})
_SQLITE_IN_MEMORY = frozenset({":memory:"})

_WRITE_EVENTS = _FILE_CHANGES | {"open", "sqlite3.connect"}

NETWORK_OPERATIONS = frozenset(_BLOCKED)
"""Audit events the guard refuses as network access."""
PROCESS_OPERATIONS = frozenset(_PROCESS)
"""Audit events the guard refuses as starting a process or loading native code."""

_WHAT = {
    **{
        event: "process "
        for event in _PROCESS
        if not event.startswith(("ctypes.", "os.kill", "signal.", "resource."))
    },
    "os.kill": "",
    "os.killpg": "",
    "signal.pthread_kill": "",
    "signal.pidfd_send_signal": "",
    "signal.raise_signal": "",
    "resource.prlimit": "",
    "ctypes.dlopen": "native library ",
    "ctypes.dlsym": "native symbol ",
    "ctypes.call_function": "",
    "ctypes.call": "",
    "open": "file write ",
    "sqlite3.connect": "sqlite3 database ",
    "os._exit": "ending the process with ",
    **dict.fromkeys(_DESCRIPTOR_EVENTS, ""),
    **{event: "file change " for event in _FILE_CHANGES},
}


def _signal_to(args: tuple[Any, ...], *, group: bool = False) -> str:
    pid, sig = (*args, None, None)[:2]
    whom = "this process" if pid == os.getpid() else f"process {'group ' if group else ''}{pid}"
    return f"signal {sig} to {whom}"


def _command(value: object) -> str:
    if isinstance(value, (list, tuple)):
        parts = [
            os.fsdecode(p) if isinstance(p, (str, bytes, os.PathLike)) else str(p) for p in value
        ]
        text = " ".join(parts)
    elif isinstance(value, (str, bytes, os.PathLike)):
        text = os.fsdecode(value)
    else:
        text = str(value)
    return text if len(text) <= 200 else text[:199] + "…"


def _sqlite_database(args: tuple[Any, ...]) -> str | None:
    """The database file ``sqlite3.connect`` opens (creating it, and writing its journal), or
    None for an in-memory one. ``""`` is a temporary database on disk; a ``file:`` URI is a
    file unless it asks for memory (``mode=memory``)."""
    database = args[0] if args else None
    text = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else str(database)
    if text in _SQLITE_IN_MEMORY or (text.startswith("file:") and "mode=memory" in text):
        return None
    return text or "(a temporary database on disk)"


def _file_write(event: str, args: tuple[Any, ...]) -> str | None:
    """The path a file-system change or a write-mode open touches, else None."""
    if event == "sqlite3.connect":
        return _sqlite_database(args)
    if event == "open":
        path, mode, flags = (*args, None, None, None)[:3]
        if isinstance(path, int) and path in _GUARD.protected:
            return _protected_name(path)  # opening the report's descriptor as a file
        if isinstance(path, int) or path is None:
            return None  # an already open descriptor
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if not writes:
            return None
    elif event not in _FILE_CHANGES:
        return None
    else:
        path = args[0] if args else None
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return None if text in _HARMLESS_PATHS else text


class _Guard:
    """Process-wide guard state: the network is blocked while ``collectors`` is not empty."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.installed = False
        # One list per active block_network(); a tuple so the hook reads it without the lock.
        self.collectors: tuple[list[NetworkAttempt], ...] = ()
        # isolate_process(): network, processes and native code stay refused after the re-run.
        self.forever = False
        self.late: list[NetworkAttempt] = []
        # The isolated process (forked check workers inherit ``forever``, not this pid).
        self.isolated_pid = -1
        # What re-runs left running past their time limit tried (keep_blocked()); one list
        # each, in ``collectors`` until that run's thread ends.
        self.held: list[list[NetworkAttempt]] = []
        # The one process call a check template makes itself (``template_fork``): the
        # audit event allowed once, on the thread making it.
        self.sanctioned: tuple[str, int] | None = None
        # Descriptors no code may write to, replace or duplicate while the guard is active
        # (``protect_descriptor``).
        self.protected: frozenset[int] = frozenset()


_OWN_WRITES: ContextVar[bool] = ContextVar("beam_agents_replay_own_writes", default=False)
"""Set by ``own_file_writes()``: replay's own code is writing what the operator asked for."""


_GUARD = _Guard()

_PROVIDER_NETWORK: ContextVar[bool] = ContextVar("beam_agents_replay_provider_network", default=False)
"""Set by ``provider_network()``: a fork's ``--fork-provider`` is answering a model call."""


def _where() -> tuple[str | None, int | None]:
    """The tool ``ctx.call`` is running and the next event index, from the ContextVars."""
    ctx = _running.ACTIVATION.get()
    index = len(ctx.events) if ctx is not None else None
    return _running.TOOL.get(), index


def _agent_writes_refused(collectors: tuple[list[NetworkAttempt], ...]) -> bool:
    """Whether a file write now is refused: under ``isolate_process()`` always (but replay's
    own, ``own_file_writes()``); during a replay, in the activation's context and while a
    module of agent code is imported."""
    if _GUARD.forever:
        return not _OWN_WRITES.get()
    return bool(collectors) and (
        _running.ACTIVATION.get() is not None or _running.AGENT_IMPORT.get()
    )


def _audit(event: str, args: tuple[Any, ...]) -> None:
    collectors = _GUARD.collectors
    if not collectors and not _GUARD.forever:
        return
    sanctioned = _GUARD.sanctioned
    if sanctioned is not None and sanctioned == (event, threading.get_ident()):
        return  # a check template forking (or ending) one of its own workers
    if event in _BLOCKED and _PROVIDER_NETWORK.get():
        return  # the one network a fork may open: its provider's, named in the header
    if event in _DESCRIPTOR_EVENTS:
        touched = _touches_protected(event, args)
        if touched is None:
            return
        _refuse(event, _protected_name(touched), collectors)
    describe = _BLOCKED.get(event) or _PROCESS.get(event)
    if event == "ctypes.dlopen" and args and args[0] is None:
        # ``import ctypes`` opens the process itself (``pythonapi``); resolving any symbol
        # in it (``ctypes.dlsym``) is what is refused.
        return
    if event == "resource.prlimit" and (
        len(args) < 3 or args[2] is None or args[0] in (0, os.getpid())
    ):
        return  # reading limits, or this process's own
    if describe is None:
        if event not in _WRITE_EVENTS or not _agent_writes_refused(collectors):
            return
        path = _file_write(event, args)
        if path is None:
            return
        address = path
    else:
        try:
            address = describe(args)
        except (IndexError, TypeError, ValueError):
            address = "<unknown>"
    _refuse(event, address, collectors)


def _refuse(event: str, address: str, collectors: tuple[list[NetworkAttempt], ...]) -> NoReturn:
    """Record the attempt at ``event`` on ``address`` and raise the refusal."""
    tool, index = _where()
    attempt = NetworkAttempt(event, address, tool, index)
    # Concurrent replays (two TUI workers) each see every attempt: both are then
    # irreproducible, never one wrongly clean.
    for attempts in collectors or (_GUARD.late,):
        attempts.append(attempt)
    if event in _BLOCKED:
        raise NetworkBlockedError(address)
    why = "replay runs agent code isolated"
    if _GUARD.held and _running.ACTIVATION.get() is None:
        # Outside any re-run: maybe the caller's own code (check_bundles(isolate=True)
        # starting its workers after a Replayer call), which runs no agent code.
        why = (
            "a re-run abandoned at its time limit is still running in this process, and "
            'replay\'s guard stays in force until it ends (docs/replay.md, "Time limit")'
        )
    raise PermissionError(
        errno.EACCES,
        f"{_WHAT.get(event, '')}blocked: {why} ({event})",
        address,
    )


def _touches_protected(event: str, args: tuple[Any, ...]) -> int | None:
    """The protected descriptor a descriptor operation would write to, replace or copy."""
    protected = _GUARD.protected
    if not protected:
        return None
    if event == "os.dup2":  # (fd, fd2): replacing fd2, or copying fd
        return next((fd for fd in args[:2] if fd in protected), None)
    if event == "fcntl.fcntl" and args and args[0] in protected:
        return int(args[0])  # F_DUPFD, F_SETFL...: nothing agent code needs of it
    if event in ("os.dup", "os.write", "os.writev") and args and args[0] in protected:
        return int(args[0])
    return None


def _protected_name(fd: int) -> str:
    return f"the report's standard output (descriptor {fd})"


def protect_descriptor(fd: int) -> None:
    """From now on, while the guard is active, no code writes to ``fd``, replaces it
    (``os.dup2`` onto it), duplicates it or opens it as a file; the caller writes it
    through the file object it already holds (the console script's report stream:
    ``beam_agents.cli.report_stream``)."""
    _install()
    with _GUARD.lock:
        _GUARD.protected = _GUARD.protected | {fd}


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is what the guard raised to refuse something (it recorded it)."""
    return isinstance(exc, NetworkBlockedError) or (
        isinstance(exc, PermissionError)
        and isinstance(exc.strerror, str)
        and "blocked: " in exc.strerror
        and ("replay runs agent code isolated" in exc.strerror or "still running" in exc.strerror)
    )


_REAL_EXIT = os._exit


class ExitRefused(SystemExit):
    """Raised instead of ending the process when agent code calls ``os._exit`` in a replay.

    Not a failure of the activation (``run_activation`` lets it through: ``ReplayHooks.
    uncontained``): in the pipeline the same call ends the worker, and no trace tells what
    the activation would have done next, so replay refuses to judge it."""


def _guarded_exit(status: int) -> NoReturn:
    """``os._exit`` while a replay runs: SystemExit instead (it has no audit event).

    Agent code calling ``os._exit(0)`` ended the CLI with exit 0 and no verdict
    (``check --jobs 1`` too): a CI gate read that as "reproduced". Outside any
    ``block_network()`` (a forked ``check`` worker finishing) it is the real one.
    """
    call = f"os._exit({status})"
    collectors = _GUARD.collectors
    if collectors:
        # Recorded too: in the re-run it ends with AgentExited (ExitRefused is uncontained);
        # in the exit phase (an atexit hook run before the judgement, whose exceptions
        # the interpreter swallows) the attempt is what the verdict reports.
        tool, index = _where()
        for attempts in collectors:
            attempts.append(NetworkAttempt("os._exit", call, tool, index))
        raise ExitRefused(call)
    if _GUARD.forever and os.getpid() == _GUARD.isolated_pid:
        # After the verdict (an atexit hook, a thread): the CLI's exit code must stay the
        # verdict's. SystemExit in an atexit hook is reported by Python and ignored.
        tool, index = _where()
        _GUARD.late.append(NetworkAttempt("os._exit", call, tool, index))
        raise ExitRefused(call)
    _REAL_EXIT(status)  # a forked check worker finishing, or a process never isolated


def _audited_pidfd_send_signal(pidfd: int, sig: int, siginfo: None = None, flags: int = 0) -> None:
    """``signal.pidfd_send_signal`` with the audit event CPython does not raise for it."""
    sys.audit("signal.pidfd_send_signal", pidfd, sig)
    assert _REAL_PIDFD_SEND_SIGNAL is not None  # installed only where it exists
    _REAL_PIDFD_SEND_SIGNAL(pidfd, sig, siginfo, flags)


_REAL_PIDFD_SEND_SIGNAL = getattr(signal, "pidfd_send_signal", None)


def _audited_raise_signal(signalnum: int) -> None:
    """``signal.raise_signal`` with the audit event CPython does not raise for it."""
    sys.audit("signal.raise_signal", signalnum)
    _REAL_RAISE_SIGNAL(signalnum)


_REAL_RAISE_SIGNAL = signal.raise_signal


def _audited_mkfifo(path: Any, mode: int = 0o666, *, dir_fd: int | None = None) -> None:
    """``os.mkfifo`` with the audit event CPython does not raise for it: it made a FIFO
    in a re-run judged ``reproduced``."""
    sys.audit("os.mkfifo", path, mode, -1 if dir_fd is None else dir_fd)
    assert _REAL_MKFIFO is not None  # installed only where it exists
    _REAL_MKFIFO(path, mode, dir_fd=dir_fd)


_REAL_MKFIFO: Callable[..., None] | None = getattr(os, "mkfifo", None)


def _audited_mknod(
    path: Any, mode: int = 0o600, device: int = 0, *, dir_fd: int | None = None
) -> None:
    """``os.mknod`` with the audit event CPython does not raise for it (it made a file)."""
    sys.audit("os.mknod", path, mode, -1 if dir_fd is None else dir_fd)
    assert _REAL_MKNOD is not None  # installed only where it exists
    _REAL_MKNOD(path, mode, device, dir_fd=dir_fd)


_REAL_MKNOD: Callable[..., None] | None = getattr(os, "mknod", None)


def _audited_shm_open(path: str, flags: int, mode: int = 0o777) -> int:
    """``_posixshmem.shm_open`` with an audit event where it can create or write the shared
    memory object (a file under /dev/shm); opening one read-only is a read."""
    if flags & _WRITE_FLAGS:
        sys.audit("_posixshmem.shm_open", _shm_path(path), flags)
    return int(_REAL_SHM_OPEN(path, flags, mode))


def _audited_shm_unlink(path: str) -> None:
    """``_posixshmem.shm_unlink`` with an audit event: it removes a file under /dev/shm."""
    sys.audit("_posixshmem.shm_unlink", _shm_path(path))
    _REAL_SHM_UNLINK(path)


def _shm_path(name: object) -> str:
    """Where Linux keeps the POSIX shared memory object ``name`` (the path reported)."""
    return "/dev/shm/" + str(name).lstrip("/")


try:
    import _posixshmem  # type: ignore[import-not-found]

    _REAL_SHM_OPEN: Callable[..., Any] = _posixshmem.shm_open
    _REAL_SHM_UNLINK: Callable[..., Any] = _posixshmem.shm_unlink
except ImportError:  # not POSIX
    _posixshmem = None


def _audited_dup2(fd: int, fd2: int, inheritable: bool = True) -> int:
    """``os.dup2`` with an audit event (CPython raises none): ``os.dup2(devnull, 1)`` in a
    tool silenced the report, and the command exited 0 with none."""
    sys.audit("os.dup2", fd, fd2)
    return int(_REAL_DUP2(fd, fd2, inheritable))


def _audited_dup(fd: int) -> int:
    """``os.dup`` with an audit event (a copy of the report's descriptor writes it too)."""
    sys.audit("os.dup", fd)
    return int(_REAL_DUP(fd))


def _audited_write(fd: int, data: Any) -> int:
    """``os.write`` with an audit event, raised only for a protected descriptor (hot path)."""
    if fd in _GUARD.protected:
        sys.audit("os.write", fd)
    return int(_REAL_WRITE(fd, data))


def _audited_writev(fd: int, buffers: Any) -> int:
    """``os.writev`` with an audit event, raised only for a protected descriptor."""
    if fd in _GUARD.protected:
        sys.audit("os.writev", fd)
    return int(_REAL_WRITEV(fd, buffers))


_REAL_DUP2 = os.dup2
_REAL_DUP = os.dup
_REAL_WRITE = os.write
_REAL_WRITEV: Callable[..., Any] = getattr(os, "writev", os.write)


def _audited_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A ctypes function pointer's call, with the audit event CPython raises for none of
    them (the guard refuses it: ``ctypes.call``)."""
    name = getattr(self, "__name__", None)
    if isinstance(name, str):
        what = f"native function {name}"
    else:
        import ctypes

        what = f"native function at {ctypes.c_void_p.from_buffer(self).value or 0:#x}"
    sys.audit("ctypes.call", what)
    return _REAL_CFUNCPTR_CALL(self, *args, **kwargs)


def _audit_ctypes_calls() -> None:
    """Make every call through a ctypes function pointer raise ``ctypes.call``.

    ``_ctypes.CFuncPtr``, the base of every function type ctypes makes, is a static type
    whose call cannot be replaced; so its name (in ``_ctypes``, and in ``ctypes`` when that
    is imported already) is given a subclass whose call audits, which the function types
    made from now on derive from (``CFUNCTYPE``, ``CDLL``'s, ctypes's own ``memmove``,
    ``cast``...), and the subclasses made before are given that call too.
    """
    global _REAL_CFUNCPTR_CALL
    try:
        import _ctypes
    except ImportError:  # built without ctypes: nothing to call native code through
        return
    real = _ctypes.CFuncPtr
    if getattr(real, "_beam_agents_audited", False):
        return
    _REAL_CFUNCPTR_CALL = real.__call__
    metaclass: Any = type(real)
    audited = metaclass(
        "CFuncPtr",
        (real,),
        {
            "_flags_": _ctypes.FUNCFLAG_CDECL,
            "__call__": _audited_call,
            "_beam_agents_audited": True,
        },
    )
    pending: list[Any] = list(real.__subclasses__())
    while pending:
        subclass = pending.pop()
        pending.extend(subclass.__subclasses__())
        with suppress(TypeError):  # a static type: none but ctypes's own base
            subclass.__call__ = _audited_call
    module: Any = _ctypes
    module.CFuncPtr = audited
    imported = sys.modules.get("ctypes")
    if imported is not None:
        imported._CFuncPtr = audited  # type: ignore[attr-defined]
        # Function types it made and keeps for CFUNCTYPE(...) to hand out again were given
        # the audited call above; the caches may stay.


_REAL_CFUNCPTR_CALL: Callable[..., Any] = lambda self, *args, **kwargs: None  # noqa: E731


def _audited_fork_exec(*args: Any, **kwargs: Any) -> Any:
    """``_posixsubprocess.fork_exec`` with an audit event: called directly (not through
    ``subprocess.Popen``, which raises its own first) it started any process unseen."""
    sys.audit("_posixsubprocess.fork_exec", args[0] if args else None)
    return _REAL_FORK_EXEC(*args, **kwargs)


try:
    import _posixsubprocess

    _REAL_FORK_EXEC: Callable[..., Any] = _posixsubprocess.fork_exec
except ImportError:  # not POSIX
    _posixsubprocess = None  # type: ignore[assignment]


def _install() -> None:
    with _GUARD.lock:
        if not _GUARD.installed:
            sys.addaudithook(_audit)
            # os._exit is posix._exit (nt._exit): agent code calling the module os took it
            # from ended the CLI with 0 and no verdict when only os's name was replaced.
            for module in (os, sys.modules.get(os.name)):
                if module is not None:
                    module._exit = _guarded_exit  # type: ignore[attr-defined]
            if _REAL_PIDFD_SEND_SIGNAL is not None:
                # Signals any process through a descriptor (os.pidfd_open), unaudited.
                for module in (signal, sys.modules.get("_signal")):
                    if module is not None:
                        module.pidfd_send_signal = _audited_pidfd_send_signal  # type: ignore[attr-defined]
            for module in (signal, sys.modules.get("_signal")):
                if module is not None:
                    module.raise_signal = _audited_raise_signal  # type: ignore[attr-defined]
            # Descriptor operations with no audit event (``protect_descriptor``).
            for module in (os, sys.modules.get(os.name)):
                if module is not None:
                    module.dup2 = _audited_dup2  # type: ignore[attr-defined]
                    module.dup = _audited_dup  # type: ignore[attr-defined]
                    module.write = _audited_write  # type: ignore[attr-defined]
                    if hasattr(module, "writev"):
                        module.writev = _audited_writev
            # File-system changes with no audit event, under both their modules' names.
            for module in (os, sys.modules.get(os.name)):
                if module is not None and _REAL_MKFIFO is not None:
                    module.mkfifo = _audited_mkfifo  # type: ignore[attr-defined]
                if module is not None and _REAL_MKNOD is not None:
                    module.mknod = _audited_mknod  # type: ignore[attr-defined]
            if _posixshmem is not None:
                _posixshmem.shm_open = _audited_shm_open
                _posixshmem.shm_unlink = _audited_shm_unlink
            _audit_ctypes_calls()
            if _posixsubprocess is not None:
                _posixsubprocess.fork_exec = _audited_fork_exec
                # subprocess binds it at import: its name too, should agent code call that.
                imported = sys.modules.get("subprocess")
                if getattr(imported, "_fork_exec", None) is _REAL_FORK_EXEC:
                    imported._fork_exec = _audited_fork_exec  # type: ignore[union-attr]
            _GUARD.installed = True


@contextmanager
def block_network() -> Iterator[list[NetworkAttempt]]:
    """Refuse every network operation in this process until the block exits.

    Blocks may nest or overlap (in threads); the network stays blocked until
    the last one exits, and every active block records every attempt.

    Yields:
        The list the refused attempts are appended to, in order.
    """
    _install()
    attempts: list[NetworkAttempt] = []
    with _GUARD.lock:
        _GUARD.collectors = (*_GUARD.collectors, attempts)
    _running.refuse_side_effects()
    try:
        yield attempts
    finally:
        _running.allow_side_effects()
        with _GUARD.lock:
            _GUARD.collectors = tuple(c for c in _GUARD.collectors if c is not attempts)


@contextmanager
def provider_network() -> Iterator[None]:
    """Inside: this context may resolve names and open connections (nothing else the guard
    refuses): a fork's ``--fork-provider`` answering one model call, the only network a
    replay may open. A thread started inside does not inherit it."""
    token = _PROVIDER_NETWORK.set(True)
    try:
        yield
    finally:
        _PROVIDER_NETWORK.reset(token)


@contextmanager
def own_file_writes() -> Iterator[None]:
    """Inside: this context's file writes are replay's own (``bundle -o``, the TUI's export),
    which ``isolate_process()`` lets through. A thread started inside does not inherit it."""
    token = _OWN_WRITES.set(True)
    try:
        yield
    finally:
        _OWN_WRITES.reset(token)


def _sanctioned(event: str, call: Callable[[], int]) -> int:
    with _GUARD.lock:
        _GUARD.sanctioned = (event, threading.get_ident())
    try:
        return call()
    finally:
        with _GUARD.lock:
            _GUARD.sanctioned = None


def template_fork() -> int:
    """``os.fork()`` for a ``check`` template: the one process it starts, itself a worker.

    A template imported agent code under ``isolate_process()``, which refuses ``fork``;
    it forks only while no thread but its own runs (``check_workers`` makes sure), so no
    agent code can fork through this. The child is isolated as the template is.
    """
    pid = _sanctioned("os.fork", os.fork)
    if pid == 0:
        with _GUARD.lock:
            _GUARD.isolated_pid = os.getpid()
            _GUARD.late = []
    return pid


def template_kill(pid: int) -> None:
    """``os.kill(pid, SIGKILL)`` of a worker a ``check`` template forked (its parent asked)."""

    def kill() -> int:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return 0

    _sanctioned("os.kill", kill)


def isolate_process() -> None:
    """From now until the process exits: no network, no process, no native code, no side effect.

    For the replay CLI, called before it imports agent code: threads a tool
    starts and ``atexit`` hooks agent modules register run under the same
    refusals after the re-run. What they tried after the verdict is in
    ``late_attempts()`` (the CLI prints it when it exits). Irreversible.
    """
    _install()
    with _GUARD.lock:
        _GUARD.forever = True
        _GUARD.isolated_pid = os.getpid()
        previous = sys.unraisablehook

        def quiet_refused_exit(info: Any) -> None:
            # A refused os._exit in an atexit hook: reported with the late attempts, not
            # as a traceback.
            if isinstance(info.exc_value, ExitRefused):
                return
            previous(info)

        sys.unraisablehook = quiet_refused_exit
        # No bytecode either, for the rest of the process: a module replay's own code imports
        # after the re-run would otherwise try to write its .pyc, refused as agent code's.
        sys.dont_write_bytecode = True
    _running.refuse_side_effects(forever=True)


def late_attempts() -> list[NetworkAttempt]:
    """What was refused outside any ``block_network()`` under ``isolate_process()``, and what
    a re-run left running past its time limit tried afterwards (``keep_blocked()``)."""
    return [*_GUARD.late, *(a for held in _GUARD.held for a in held)]


def keep_blocked() -> Callable[[], None]:
    """Keep everything ``block_network()`` refuses refused until the returned function is called.

    For a re-run abandoned at its time limit: Python cannot stop a thread, so the
    agent code in it keeps running after ``block_network()`` has exited, and must
    stay as isolated as it was (network, processes, native code, side effects,
    file writes in its activation's context). The engine calls the returned
    function when that thread ends, if ever. While any is held, ``still_running()``
    is true. Calling it twice is harmless.
    """
    _install()
    attempts: list[NetworkAttempt] = []
    with _GUARD.lock:
        _GUARD.collectors = (*_GUARD.collectors, attempts)
        _GUARD.held.append(attempts)
    _running.refuse_side_effects()
    released = threading.Event()

    def release() -> None:
        with _GUARD.lock:
            if released.is_set():
                return
            released.set()
            _GUARD.collectors = tuple(c for c in _GUARD.collectors if c is not attempts)
            _GUARD.held = [h for h in _GUARD.held if h is not attempts]
            # What it tried stays reported with the late attempts.
            _GUARD.late.extend(attempts)
        _running.allow_side_effects()

    return release


def still_running() -> bool:
    """True while a re-run abandoned at its time limit is still running agent code."""
    return bool(_GUARD.held)


def end_process(code: int) -> NoReturn:
    """Flush standard output and error, then end the process now with ``code``.

    For the command line only, when a re-run was abandoned at its time limit: its
    thread cannot be stopped, and a normal interpreter exit would wait on it (or
    let it run ``atexit`` hooks) and could change the verdict's exit code.
    """
    for stream in (sys.stdout, sys.stderr):
        # Agent code may have replaced either (``sys.stdout = None``): a failed flush of
        # what it left is no reason not to end with the verdict's code.
        with suppress(Exception):
            stream.flush()
    _REAL_EXIT(code)


# --------------------------------------------------------------------------- recording mode
# For the determinism doctor (beam_agents.doctor): what agent code does, reported instead of
# refused. A hook of its own (``_record``), added once after the refusing one: the refusals
# above never call it and it changes nothing of them. While a block_network() refuses an
# operation, the refusing hook raises first and this one does not see it (the refusal is
# recorded as an attempt there); the doctor records where nothing is blocked.


class OperationKind(enum.StrEnum):
    """What a reported operation does."""

    NETWORK = "network"
    """Resolves a name or opens a connection (the operations ``NETWORK_OPERATIONS`` names)."""
    PROCESS = "process"
    """Starts a process, sends a signal, loads native code (``PROCESS_OPERATIONS``)."""
    FILE_READ = "file-read"
    """Opens a file for reading or lists a directory."""
    FILE_WRITE = "file-write"
    """Opens a file for writing or changes the file system."""


@dataclass(frozen=True)
class Operation:
    """One operation the audit hook saw while recording."""

    kind: OperationKind
    event: str
    """The audit event, e.g. ``socket.connect`` or ``open``."""
    address: str
    """``host:port``, the command, the library or the path, as the refusals describe it."""


_RECORDERS: tuple[Callable[[Operation], None], ...] = ()
_RECORDING_ERRORS: list[BaseException] = []
_RECORDING_INSTALLED: list[bool] = []
_LISTINGS = frozenset({"os.listdir", "os.scandir", "glob.glob"})


def _record(event: str, args: tuple[Any, ...]) -> None:
    """The recording hook: inert (one test) while nobody records."""
    if _RECORDERS:
        _report(event, args)


def _report(event: str, args: tuple[Any, ...]) -> None:
    """Hand the recorders what ``event`` does, if it is an operation they watch."""
    kind: OperationKind | None = None
    address = ""
    describe = _BLOCKED.get(event)
    if describe is not None:
        kind = OperationKind.NETWORK
    elif event in _PROCESS:
        if event == "ctypes.dlopen" and args and args[0] is None:
            return  # ``import ctypes`` opening the process itself
        if event == "resource.prlimit" and (len(args) < 3 or args[2] is None):
            return  # reading limits
        kind, describe = OperationKind.PROCESS, _PROCESS[event]
    elif event == "open":
        written = _file_write(event, args)
        if written is not None:
            kind, address = OperationKind.FILE_WRITE, written
        elif args and isinstance(args[0], (str, bytes, os.PathLike)):
            kind, address = OperationKind.FILE_READ, os.fsdecode(args[0])
    elif event in _FILE_CHANGES:
        written = _file_write(event, args)
        if written is not None:
            kind, address = OperationKind.FILE_WRITE, written
    elif event in _LISTINGS:
        path = args[0] if args else "."
        kind = OperationKind.FILE_READ
        address = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else "."
    if kind is None:
        return
    if describe is not None:
        try:
            address = describe(args)
        except (IndexError, TypeError, ValueError):
            address = "<unknown>"
    operation = Operation(kind, event, address)
    for recorder in _RECORDERS:
        try:
            recorder(operation)
        except BaseException as exc:  # the recorder's bug must not change what agent code sees
            _RECORDING_ERRORS.append(exc)


@contextmanager
def record_operations(recorder: Callable[[Operation], None]) -> Iterator[list[BaseException]]:
    """Report every operation the guard watches to ``recorder`` until the block exits.

    Network, processes, signals and native code (what ``block_network()`` refuses), and
    file reads and writes, in every thread, whatever code does them: ``recorder`` runs
    inside the audited operation, before it happens, and decides what concerns it (it
    may walk the stack). Nothing is refused by recording; an active ``block_network()``
    still refuses what it refuses (and the recorder does not see what it refused). For
    the doctor, which watches agent code run as the pipeline runs it (network open).

    Yields:
        The exceptions ``recorder`` raised (swallowed there so agent code never sees
        them; the caller reports them).
    """
    global _RECORDERS
    _install()  # the wrappers that raise audit events CPython does not (fork_exec, signals)
    with _GUARD.lock:
        if not _RECORDING_INSTALLED:
            sys.addaudithook(_record)
            _RECORDING_INSTALLED.append(True)
        _RECORDERS = (*_RECORDERS, recorder)
    try:
        yield _RECORDING_ERRORS
    finally:
        with _GUARD.lock:
            _RECORDERS = tuple(r for r in _RECORDERS if r is not recorder)
