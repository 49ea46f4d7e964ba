"""The support desk's tools: a read-only lookup, and two side effects (one needs a human's approval).

``lookup_order`` runs inline through ``ctx.call``, in the pipeline and again
during replay, so it must be deterministic and offline (it reads the bundled
table). ``issue_refund`` moves money: the agent stages it with ``ctx.act``, a
human approves it, and the payments executor performs it and reports back with
a ``tool_result`` envelope. ``send_message`` sends a chat message while the
agent waits (a suspension has no outputs of its own); it needs no approval, so
its intent is released to the chat gateway at once. The pipeline never runs a
side-effect tool, and neither does replay.
"""

from __future__ import annotations

import hashlib
from typing import Any

from beam_agents import ToolRegistry, tool
from examples.support_desk.orders import find_order


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id (``A-1001`` or ``A1001``); ``found`` says whether it exists."""
    order = find_order(order_id)
    if order is None:
        return {"found": False, "order_id": order_id}
    return {"found": True, **order}


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


TOOLS = ToolRegistry([issue_refund, lookup_order, send_message])
"""The registry both agent versions run with (``--registry examples.support_desk.tools:TOOLS``)."""
