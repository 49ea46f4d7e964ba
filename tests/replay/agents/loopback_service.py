"""A real HTTP service on 127.0.0.1 (a free port) that answers every GET with JSON, for
the agents whose recorded tools read a live service (``recorded_agents``, ``memory_agents``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonService:
    """Answers ``GET …/NAME`` with ``self.answer(NAME)`` as JSON; counts the requests served."""

    def __init__(self) -> None:
        self.requests = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests += 1
                data = json.dumps(service.answer(self.path.rsplit("/", 1)[-1])).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, name: str) -> Any:
        """What the service answers for ``name`` (``requests`` already counts this one)."""
        raise NotImplementedError

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
