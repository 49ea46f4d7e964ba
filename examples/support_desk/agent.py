"""The support-desk agent, v1: the version that ran in the demo's "production" pipeline.

For each customer message it makes two model calls — a triage call (what does
the customer want, which order) and a reply draft — with an order lookup in
between (and, for a parcel on its way, a live read of the carrier's tracking
service: a recorded tool, replayed from the snapshot). A refund request for an eligible order stages ``issue_refund`` with
``ctx.act`` (a human must approve it) and suspends until the payments executor
reports the result; then it drafts a confirmation.

Everything it does is replayable: time comes from ``ctx.now_ms`` (the refund
window), memory is read as of the activation's own seq (see ``conversation``),
and the only model it talks to is ``ctx.complete``.

Replay import paths: ``examples.support_desk.agent:AGENT`` and
``examples.support_desk.agent:TOOLS``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from beam_agents import Agent, Done, Suspend
from beam_agents._protos import Approval, Event, ToolResult
from beam_agents.agent import Inbound, Outcome
from beam_agents.context import AgentContext
from examples.support_desk.conversation import Turn, last_value, record_turn, turns_before
from examples.support_desk.orders import DAY_MS
from examples.support_desk.prompts import reply_request, triage_request
from examples.support_desk.tools import TOOLS

__all__ = ["AGENT", "TOOLS", "MalformedOrderIdError", "SupportAgent"]

REFUND_WINDOW_MS = 30 * DAY_MS
"""Refunds are possible up to 30 days after delivery (judged on the activation clock)."""

_ORDER_ID = re.compile(r"[A-Z]-[0-9]{4}")


class MalformedOrderIdError(ValueError):
    """The order id the customer wrote is not one (e.g. ``A-30O1``, with a letter O)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        super().__init__(f"malformed order id {raw!r}: expected a letter, a dash and 4 digits")


def _money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _items(order: dict[str, Any]) -> str:
    return ", ".join(f"{item['name']} x{item['qty']}" for item in order["items"])


def _customer(ctx: AgentContext) -> str:
    return ctx.entity_key.decode("utf-8", "replace")


def _reply(ctx: AgentContext, text: str) -> Done:
    body = {"customer": _customer(ctx), "text": text}
    return Done(output=json.dumps(body, sort_keys=True).encode("utf-8"))


class SupportAgent(Agent):
    """Answers order questions and handles refunds (with a human's approval)."""

    def normalize_order_id(self, raw: str) -> str:
        """``"#a-1001 "`` -> ``"A-1001"``, the form ``lookup_order`` is called with.

        Raises:
            MalformedOrderIdError: ``raw`` is not an order id. (v1 lets this fail the
                activation instead of asking the customer again: the demo's failing
                incident.)
        """
        candidate = raw.strip().lstrip("#").upper()
        if not _ORDER_ID.fullmatch(candidate):
            raise MalformedOrderIdError(raw)
        return candidate

    def lookup(self, ctx: AgentContext, order_id: str) -> dict[str, Any]:
        """The order, read with the read-only tool ``lookup_order`` (traced, replayed)."""
        order: dict[str, Any] = ctx.call("lookup_order", order_id=order_id)
        return order

    def reply_facts(self, ctx: AgentContext, facts: dict[str, str]) -> dict[str, str]:
        """The facts a reply prompt states (v1: the ones the activation established)."""
        return facts

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        """Handle one customer message: triage, look the order up, act, reply."""
        text = event.payload.decode("utf-8")
        history = turns_before(ctx)
        triage = json.loads(ctx.complete(triage_request(text)).text)
        intent = str(triage.get("intent") or "other")
        raw_id = triage.get("order_id") or last_value(history, "order_id")

        order: dict[str, Any] | None = None
        if raw_id:
            order = self.lookup(ctx, self.normalize_order_id(str(raw_id)))
        name = (order or {}).get("customer_name") or last_value(history, "customer_name")
        facts: dict[str, str] = {"customer_name": name or "there"}
        turn: Turn = {"customer": text, "intent": intent, "customer_name": name}

        if order is None:
            facts["action"] = "no_order" if intent != "other" else "other"
            return self._finish(ctx, history, text, facts, turn)
        if not order["found"]:
            facts.update(order_id=str(raw_id), action="order_not_found")
            return self._finish(ctx, history, text, facts, turn)

        turn.update(order_id=order["order_id"], tier=order["customer_tier"])
        facts.update(
            tier=order["customer_tier"],
            order_id=order["order_id"],
            order_status=order["status"],
            carrier=str(order["carrier"] or "not assigned yet"),
            tracking=str(order["tracking"] or "not assigned yet"),
            eta=order["eta"],
            items=_items(order),
        )
        if intent != "refund":
            facts["action"] = "answer_status" if intent == "order_status" else "other"
            if intent == "order_status" and order["tracking"] and order["status"] != "delivered":
                # A live read of the carrier's service: recorded, so replay serves it.
                scan = ctx.call(
                    "track_shipment", carrier=order["carrier"], tracking=order["tracking"]
                )
                facts["last_scan"] = f"{scan['last_scan']}, {scan['location']}"
            return self._finish(ctx, history, text, facts, turn)

        delivered_ms = order["delivered_ms"]
        if delivered_ms is None or ctx.now_ms - delivered_ms > REFUND_WINDOW_MS:
            days = (
                "not delivered yet"
                if delivered_ms is None
                else (f"delivered {(ctx.now_ms - delivered_ms) // DAY_MS} days ago")
            )
            facts.update(action="refund_not_eligible", refund_window=days)
            return self._finish(ctx, history, text, facts, turn)

        amount = self.refund_amount_cents(order)
        intent_id = ctx.act(
            "issue_refund",
            order_id=order["order_id"],
            amount_cents=amount,
            reason=f"damaged on arrival, reported by {_customer(ctx)}",
        )
        facts.update(action="refund_pending_approval", refund_amount=_money(amount))
        reply = ctx.complete(reply_request(history, text, facts)).text
        # A suspension emits no outputs: the holding reply goes out as its own intent.
        ctx.act("send_message", customer=_customer(ctx), text=reply)
        record_turn(ctx, **turn, agent=reply, refund_intent=intent_id)
        state = {
            "intent_id": intent_id,
            "order_id": order["order_id"],
            "amount_cents": amount,
            "customer_name": facts["customer_name"],
        }
        return Suspend(state=state, awaiting=[intent_id])

    def refund_amount_cents(self, order: dict[str, Any]) -> int:
        """What a damaged order refunds: its items, plus shipping for gold-tier customers."""
        items = sum(item["qty"] * item["price_cents"] for item in order["items"])
        shipping = order["shipping_cents"] if order["customer_tier"] == "gold" else 0
        return int(items + shipping)

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        """The refund was performed, failed, declined or timed out: tell the customer."""
        history = turns_before(ctx)
        facts = {
            "customer_name": str(state["customer_name"]),
            "order_id": str(state["order_id"]),
            "refund_amount": _money(int(state["amount_cents"])),
        }
        if isinstance(inbound, ToolResult):
            if inbound.status == ToolResult.OK:
                result = json.loads(inbound.payload)
                facts.update(action="refund_issued", refund_id=str(result["refund_id"]))
            else:
                facts["action"] = "refund_failed"
        elif isinstance(inbound, Approval):
            facts.update(action="refund_declined", decline_reason=inbound.reason or "not approved")
        else:
            facts["action"] = "refund_timed_out"
        turn: Turn = {"event": facts["action"], "order_id": facts["order_id"]}
        return self._finish(ctx, history, None, facts, turn)

    def _finish(
        self,
        ctx: AgentContext,
        history: list[Turn],
        text: str | None,
        facts: dict[str, str],
        turn: Turn,
    ) -> Done:
        reply = ctx.complete(reply_request(history, text, self.reply_facts(ctx, facts))).text
        record_turn(ctx, **turn, agent=reply)
        return _reply(ctx, reply)


AGENT = SupportAgent()
"""The agent the demo pipeline runs (``--agent examples.support_desk.agent:AGENT``)."""
