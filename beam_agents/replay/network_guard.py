"""The network guard replay runs under: every Python-level connection attempt is refused.

A replay runs the operator's read-only tools for real. A tool that reaches the
network would make the replay depend on the world as it is now, not as it was
when the activation ran, and could hang an operator's terminal on a dead host.
So while ``block_network()`` is active, a ``sys.addaudithook`` hook refuses
every audited operation that resolves a name or opens a connection
(``socket.connect``, ``socket.getaddrinfo``, ``socket.sendto``, ...) by raising
``NetworkBlockedError`` from inside that operation, before any packet leaves.
Each attempt is also recorded (address, and the ``ctx.call`` tool running at
that moment), because agent or tool code may catch the error and carry on: a
replay that tried the network is irreproducible whatever the code did next.

Audit hooks cannot be removed, so the hook is installed once per process and is
inert (one attribute test) outside ``block_network()``. The guard is
process-wide while active: a tool's worker threads are blocked too.

What it cannot see: native libraries that open sockets without going through
Python's ``socket`` module, and child processes. Replay does not vouch for a
tool that shells out or embeds its own network stack.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from beam_agents.errors import NetworkBlockedError

__all__ = ["NetworkAttempt", "block_network"]


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

    def describe(self) -> str:
        """One line naming the address and, if known, the tool."""
        where = f"tool {self.tool!r}" if self.tool else "agent code (outside any tool)"
        return f"{self.address} ({self.operation}, by {where})"


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


class _Guard:
    """Process-wide guard state: the network is blocked while ``collectors`` is not empty."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.installed = False
        # One list per active block_network(); a tuple so the hook reads it without the lock.
        self.collectors: tuple[list[NetworkAttempt], ...] = ()


_GUARD = _Guard()


def _where(frame: FrameType | None) -> tuple[str | None, int | None]:
    """The tool ``ctx.call`` is running and the next event index, from the calling frames."""
    # Imported here: the guard module must stay importable before the core is.
    from beam_agents.context import AgentContext

    call_code = AgentContext.call.__code__
    tool: str | None = None
    index: int | None = None
    while frame is not None:
        if tool is None and frame.f_code is call_code:
            name = frame.f_locals.get("tool")
            tool = name if isinstance(name, str) else None
        if index is None:
            for local in ("self", "ctx"):
                candidate = frame.f_locals.get(local)
                if isinstance(candidate, AgentContext):
                    index = len(candidate.events)
                    break
        if tool is not None and index is not None:
            break
        frame = frame.f_back
    return tool, index


def _audit(event: str, args: tuple[Any, ...]) -> None:
    collectors = _GUARD.collectors
    if not collectors:
        return
    describe = _BLOCKED.get(event)
    if describe is None:
        return
    try:
        address = describe(args)
    except (IndexError, TypeError, ValueError):
        address = "<unknown address>"
    tool, index = _where(sys._getframe(1))
    attempt = NetworkAttempt(event, address, tool, index)
    # Concurrent replays (two TUI workers) each see every attempt: both are then
    # irreproducible, never one wrongly clean.
    for attempts in collectors:
        attempts.append(attempt)
    raise NetworkBlockedError(address)


def _install() -> None:
    with _GUARD.lock:
        if not _GUARD.installed:
            sys.addaudithook(_audit)
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
    try:
        yield attempts
    finally:
        with _GUARD.lock:
            _GUARD.collectors = tuple(c for c in _GUARD.collectors if c is not attempts)
