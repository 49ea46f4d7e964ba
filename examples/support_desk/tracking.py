"""The carriers' tracking service: a real HTTP service the support desk reads, run locally.

``track_shipment`` (a ``recorded=True`` tool, see ``tools``) asks it where a parcel
was last scanned: ``GET /track/<carrier>/<tracking number>`` answers JSON
``{"carrier", "tracking", "last_scan", "location"}``. What it answers changes
with the world, which is exactly why the tool is recorded: the pipeline records
each answer in the key's tool cache, and replay serves it from the snapshot with
this service stopped.

The demo (and the example's tests) start it on 127.0.0.1 at a free port with
``running_tracking_service()``, which also points ``TRACKING_URL_ENV`` at it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

TRACKING_URL_ENV = "SUPPORT_DESK_TRACKING_URL"
"""Where ``track_shipment`` finds the service (``http://127.0.0.1:PORT``)."""

SCANS: dict[tuple[str, str], dict[str, str]] = {
    ("UPS", "1Z999AA10123456784"): {
        "last_scan": "2024-12-12 07:55 departed facility",
        "location": "Louisville, KY",
    },
    ("USPS", "9400111899223197428490"): {
        "last_scan": "2024-12-11 18:02 held: weather delay",
        "location": "Denver, CO",
    },
}


class TrackingService:
    """The tracking service on 127.0.0.1 (a free port); ``requests`` counts what it answered."""

    def __init__(self, scans: dict[tuple[str, str], dict[str, str]] | None = None) -> None:
        self.scans = dict(SCANS if scans is None else scans)
        self.requests = 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.requests += 1
                parts = [unquote(p) for p in self.path.strip("/").split("/")]
                if len(parts) != 3 or parts[0] != "track":
                    self.send_error(404, "GET /track/<carrier>/<tracking>")
                    return
                carrier, tracking = parts[1], parts[2]
                scan = service.scans.get(
                    (carrier, tracking), {"last_scan": "no scan yet", "location": ""}
                )
                body = json.dumps({"carrier": carrier, "tracking": tracking, **scan}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the demo prints its own summary

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tracking-service", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and free the port (a replay after this cannot reach it)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def running_tracking_service() -> Iterator[TrackingService]:
    """Run the service, pointing ``TRACKING_URL_ENV`` at it; stop it and restore the env after."""
    service = TrackingService()
    previous = os.environ.get(TRACKING_URL_ENV)
    os.environ[TRACKING_URL_ENV] = service.url
    try:
        yield service
    finally:
        service.stop()
        if previous is None:
            os.environ.pop(TRACKING_URL_ENV, None)
        else:
            os.environ[TRACKING_URL_ENV] = previous
