"""The scripted model standing in for a real LLM: deterministic, offline, answering from the request.

It reads what a real model would read — the system prompt, the customer's
message, the facts block — and answers with keyword rules and reply templates,
with token usage estimated the way providers bill it (about four characters a
token). The demo's pipeline builds it with ``make_provider`` (the
``provider_factory``); replay never calls it: replay serves the responses the
pipeline cached, and reaching a model at all is a cache miss.
"""

from __future__ import annotations

import json
import re

from beam_agents._protos import LlmRequest, LlmResponse, Usage
from beam_agents.testing import ScriptedProvider
from examples.support_desk.prompts import FACTS_HEADER, MODEL, REPLY_SYSTEM, TRIAGE_SYSTEM

PROVIDER_NAME = "acme-llm-gateway"
"""The provider's name; it is part of every cache key, so it must not change between deploys."""

RESPONSE_MODEL = f"{MODEL}-2024-11-20"
"""The model snapshot that answers, as a real provider reports it."""

_REFUND_WORDS = ("refund", "money back", "broken", "cracked", "damaged", "stopped working")
_STATUS_WORDS = ("where", "status", "track", "arrive", "shipped", "still nothing", "check on")
# An order id as customers write it: "A-1001", "#A-1001", "a1001" (and typos such as "A-10O1").
_ORDER_ID = re.compile(r"#?\b([A-Za-z]-[0-9A-Za-z]{4}|[A-Za-z][0-9]{4})\b")


def triage(text: str) -> str:
    """The triage answer for a customer message: one line of JSON (intent and order id)."""
    lower = text.lower()
    if any(word in lower for word in _REFUND_WORDS):
        intent = "refund"
    elif any(word in lower for word in _STATUS_WORDS):
        intent = "order_status"
    else:
        intent = "other"
    found = _ORDER_ID.search(text)
    return json.dumps(
        {"intent": intent, "order_id": found.group(1) if found else None}, sort_keys=True
    )


def parse_facts(system: str) -> dict[str, str]:
    """The ``- name: value`` lines after the facts header of a reply prompt."""
    _, _, block = system.partition(FACTS_HEADER)
    facts: dict[str, str] = {}
    for line in block.splitlines():
        name, sep, value = line.removeprefix("- ").partition(": ")
        if sep:
            facts[name.strip()] = value.strip()
    return facts


_STATUS_REPLIES = {
    "in_transit": (
        "your order {order_id} ({items}) is on its way with {carrier} (tracking {tracking}; "
        "last scan {last_scan}) and should arrive by {eta}."
    ),
    "processing": (
        "your order {order_id} ({items}) is being packed at our warehouse and should arrive "
        "by {eta}. I'll make sure you get the tracking number as soon as it ships."
    ),
    "delayed": (
        "I'm sorry: your order {order_id} ({items}) is delayed with {carrier} (last scan "
        "{last_scan}). The new estimate is {eta}, and you can follow it with tracking number "
        "{tracking}."
    ),
    "delivered": "your order {order_id} ({items}) was delivered by {carrier}.",
}

_ACTION_REPLIES = {
    "refund_pending_approval": (
        "I'm so sorry your {items} arrived damaged, {customer_name}. I've requested a refund of "
        "{refund_amount} for order {order_id}; a teammate approves refunds, usually within the "
        "hour, and I'll confirm here as soon as it goes through."
    ),
    "refund_issued": (
        "Good news, {customer_name}: your refund of {refund_amount} for order {order_id} has "
        "been issued (reference {refund_id}). It should reach your account within 3-5 "
        "business days."
    ),
    "refund_declined": (
        "I'm sorry, {customer_name}: we couldn't approve the refund for order {order_id} "
        "({decline_reason}). A specialist will follow up with you by email."
    ),
    "refund_failed": (
        "I'm sorry, {customer_name}: the refund for order {order_id} did not go through. "
        "I've flagged it to our payments team and will update you shortly."
    ),
    "refund_timed_out": (
        "Thanks for your patience, {customer_name}: the refund for order {order_id} could not "
        "be approved in time. A specialist will review it and email you today."
    ),
    "refund_not_eligible": (
        "I'm sorry, {customer_name}: order {order_id} is outside our 30-day refund window "
        "({refund_window}). I can help with a warranty repair instead; just reply here."
    ),
    "order_not_found": (
        "I couldn't find an order {order_id}, {customer_name}. Could you double-check the "
        "number on your confirmation email? It looks like A-1234."
    ),
    "no_order": (
        "Happy to help, {customer_name}! Could you tell me your order number? It looks like "
        "A-1234 and is on your confirmation email."
    ),
    "other": ("You're welcome, {customer_name}! If anything else comes up, just reply here."),
}


class _Defaults(dict[str, str]):
    def __missing__(self, name: str) -> str:
        return f"<{name}?>"


def write_reply(facts: dict[str, str]) -> str:
    """The reply a good support agent would write from these facts."""
    values = _Defaults(facts)
    action = facts.get("action", "other")
    if action == "answer_status":
        template = _STATUS_REPLIES.get(
            facts.get("order_status", ""), "your order {order_id} is {order_status}."
        )
        return f"Hi {values['customer_name']}, " + template.format_map(values)
    return _ACTION_REPLIES.get(action, _ACTION_REPLIES["other"]).format_map(values)


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def respond(request: LlmRequest) -> LlmResponse:
    """Answer one request of the support agent (see ``examples.support_desk.prompts``)."""
    system = request.messages[0].content if request.messages else ""
    last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    if system == TRIAGE_SYSTEM:
        text = triage(last_user)
    elif system.startswith(REPLY_SYSTEM):
        text = write_reply(parse_facts(system))
    else:
        text = "I'm sorry, I can't help with that."
    prompt_tokens = sum(_tokens(m.content) + 4 for m in request.messages)
    return LlmResponse(
        text=text,
        stop_reason="end_turn",
        model=RESPONSE_MODEL,
        usage=Usage(input_tokens=prompt_tokens, output_tokens=_tokens(text)),
    )


def make_provider() -> ScriptedProvider:
    """The ``provider_factory`` of the demo pipeline: a fresh scripted model client."""
    return ScriptedProvider(respond, name=PROVIDER_NAME)
