"""The support desk's tools: two reads, and two side effects (one needs a human's approval).

``lookup_order`` runs inline through ``ctx.call``, in the pipeline and again
during replay, so it must be deterministic and offline (it reads the bundled
table). ``track_shipment`` reads a real HTTP service (the carriers' tracking
service, ``tracking``), whose answers change with the world: it is declared
``recorded=True``, so the pipeline records each answer in the key's tool cache
and replay serves it from the snapshot, never calling the service. ``issue_refund`` moves money: the agent stages it with ``ctx.act``, a
human approves it, and the payments executor performs it and reports back with
a ``tool_result`` envelope. ``send_message`` sends a chat message while the
agent waits (a suspension has no outputs of its own); it needs no approval, so
its intent is released to the chat gateway at once. The pipeline never runs a
side-effect tool, and neither does replay.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from typing import Any
from urllib.parse import quote

from beam_agents import ToolRegistry, tool
from examples.support_desk.orders import find_order
from examples.support_desk.tracking import TRACKING_URL_ENV


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id (``A-1001`` or ``A1001``); ``found`` says whether it exists."""
    order = find_order(order_id)
    if order is None:
        return {"found": False, "order_id": order_id}
    return {"found": True, **order}


@tool(recorded=True)
def track_shipment(carrier: str, tracking: str) -> dict[str, Any]:
    """Where the carrier last scanned the parcel: asks the tracking service over HTTP."""
    base = os.environ.get(TRACKING_URL_ENV)
    if not base:
        raise RuntimeError(
            f"{TRACKING_URL_ENV} is not set: start the tracking service first "
            "(examples.support_desk.tracking.running_tracking_service())"
        )
    url = f"{base}/track/{quote(carrier, safe='')}/{quote(tracking, safe='')}"
    with urllib.request.urlopen(url, timeout=10) as response:
        scan: dict[str, Any] = json.loads(response.read())
    return {"last_scan": scan["last_scan"], "location": scan["location"]}


@tool(side_effect=True, requires_approval=True)
def issue_refund(order_id: str, amount_cents: int, reason: str) -> dict[str, Any]:
    """Refund ``amount_cents`` on an order. The payments executor's code, run only after approval.

    The demo plays that executor and calls this function itself to produce the
    ``tool_result`` payload; the refund id is derived from the arguments so the
    bundled stream is the same on every run.
    """
    digest = hashlib.sha256(f"{order_id}:{amount_cents}:{reason}".encode()).hexdigest()
    return {
        "refund_id": f"R-{int(digest[:8], 16) % 100_000:05d}",
        "order_id": order_id,
        "amount_cents": amount_cents,
        "status": "refunded",
    }


@tool(side_effect=True)
def send_message(customer: str, text: str) -> dict[str, Any]:
    """Send a chat message to the customer now (no approval). The chat gateway's code."""
    return {"sent": True, "customer": customer, "chars": len(text)}


TOOLS = ToolRegistry([issue_refund, lookup_order, send_message, track_shipment])
"""The registry both agent versions run with (``--registry examples.support_desk.tools:TOOLS``)."""
