"""A real HTTP server on 127.0.0.1 that answers like a model API, for the providers' tests.

It speaks plain HTTP/1.1 JSON: each request's method, path, headers and JSON body are
recorded, and answered by the next scripted ``Reply`` (status, JSON body, headers, an
optional delay before answering). The SDKs under test talk to it exactly as they talk
to the vendor: same client code, same retries, same error parsing.

A ``Reply`` can also misbehave the way servers do: a body of raw bytes (not JSON), sent
in ``chunk``-byte pieces ``trickle_s`` apart (also the headers, ``trickle_headers``),
or a body of ``repeat`` copies of it (a huge one, generated as it is sent). What each
answer managed to send before the client went away is in ``WireServer.sent``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    body: Any
    """A JSON value, or ``bytes`` sent as they are."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunk: int = 0
    """Send the body in pieces of this many bytes (0: at once)."""
    trickle_s: float = 0.0
    """The pause before each piece."""
    trickle_headers: bool = False
    """Trickle the status line and headers too, a byte at a time."""
    repeat: int = 1
    """The body is ``repeat`` copies of ``body`` (bytes), generated while it is sent."""


@dataclass
class Sent:
    """What one answer sent before it ended or the client went away."""

    bytes: int = 0
    complete: bool = False
    """False: the client closed the connection first."""


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    """The server's state: what it will answer, and what it was asked."""

    def __init__(self) -> None:
        self.replies: deque[Reply | Callable[[Received], Reply]] = deque()
        self.received: list[Received] = []
        self.sent: list[Sent] = []
        self.url = ""
        self.respond: Callable[[Received], Reply] | None = None
        """Answers every request once the scripted replies are used up (None: a 500)."""
        self._lock = threading.Lock()

    def script(self, *replies: Reply | Callable[[Received], Reply]) -> None:
        self.replies.extend(replies)

    def _answer(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            if not self.replies:
                if self.respond is not None:
                    return self.respond(received)
                return Reply({"error": {"message": "no reply scripted", "type": "test"}}, 500)
            reply = self.replies.popleft()
        return reply(received) if callable(reply) else reply


def _handler(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: without this, Nagle's algorithm holds
        # the body until the client's delayed ACK of the headers (about 40 ms a request).
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            received = Received(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
            reply = server._answer(received)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            sent = Sent()
            with server._lock:
                server.sent.append(sent)
            head = [f"HTTP/1.1 {reply.status} {self.responses.get(reply.status, ('',))[0]}"]
            head.append("Content-Type: application/json")
            head.append(f"Content-Length: {len(data) * reply.repeat}")
            head.extend(f"{name}: {value}" for name, value in reply.headers.items())
            header_bytes = ("\r\n".join(head) + "\r\n\r\n").encode()
            try:
                if reply.trickle_headers:
                    for n in range(len(header_bytes)):
                        time.sleep(reply.trickle_s)
                        self._send(header_bytes[n : n + 1], sent)
                else:
                    self._send(header_bytes, sent)
                for _ in range(reply.repeat):
                    step = reply.chunk or len(data) or 1
                    for at in range(0, len(data), step):
                        if reply.trickle_s:
                            time.sleep(reply.trickle_s)
                        self._send(data[at : at + step], sent)
                sent.complete = True
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing left to answer
            self.close_connection = not sent.complete

        def _send(self, data: bytes, sent: Sent) -> None:
            self.wfile.write(data)
            self.wfile.flush()
            sent.bytes += len(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests assert on `received`, not on an access log

    return Handler


def start_wire_server() -> tuple[WireServer, Callable[[], None]]:
    """Serve on a free port of 127.0.0.1 in a daemon thread; returns the state and a stop."""
    state = WireServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    state.url = f"http://{host}:{port}"
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.05,), name="wire-server", daemon=True
    )
    thread.start()

    def stop() -> None:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)

    return state, stop


@contextmanager
def wire_server() -> Iterator[WireServer]:
    """Serve for the ``with`` block, then stop and close."""
    state, stop = start_wire_server()
    try:
        yield state
    finally:
        stop()
