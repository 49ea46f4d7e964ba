"""The model requests the support agent sends: a triage call, then a reply draft.

Everything that shapes a request lives here, because every byte of a request is
part of its cache key (``compute_cache_key``): change a prompt and the next
replay of an old activation is a loud cache miss naming the message that
differs — which is exactly what should happen.

The reply prompt carries the conversation so far and a block of facts the
agent established (order status, the action it took); the model is told to
use only those facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beam_agents._protos import LlmRequest
from beam_agents.testing import chat_request

MODEL = "acme-support-llm-1"
"""The model every request names."""

TRIAGE_SYSTEM = (
    "You triage messages sent to Acme's support desk. Answer with one line of JSON and "
    'nothing else: {"intent": "order_status" | "refund" | "other", "order_id": the order id '
    "exactly as the customer wrote it, or null}."
)

REPLY_SYSTEM = (
    "You are Acme's support agent. Write a short, warm reply to the customer. Use only the "
    "facts below; never promise anything they do not say."
)

FACTS_HEADER = "Facts:"

HISTORY_TURNS = 3
"""How many earlier exchanges the reply prompt includes."""


def triage_request(text: str) -> LlmRequest:
    """The triage call: classify the message and extract the order id it mentions."""
    return chat_request(
        MODEL, ("system", TRIAGE_SYSTEM), ("user", text), temperature=0.0, max_tokens=64
    )


def render_facts(facts: Mapping[str, str]) -> str:
    """The facts block of a reply prompt, one ``- name: value`` line each, in the given order."""
    return "\n".join([FACTS_HEADER, *(f"- {name}: {value}" for name, value in facts.items())])


def reply_request(
    history: Sequence[Mapping[str, Any]], text: str | None, facts: Mapping[str, str]
) -> LlmRequest:
    """The reply call: the conversation so far, the new message (if any) and the facts.

    Args:
        history: Earlier turns (``customer``/``agent`` texts), oldest first; the last
            ``HISTORY_TURNS`` go into the prompt.
        text: The customer's new message; None when the agent writes on its own
            (after a refund was approved, declined or timed out).
        facts: What the agent established, rendered into the system message.
    """
    messages: list[tuple[str, str]] = [("system", f"{REPLY_SYSTEM}\n\n{render_facts(facts)}")]
    for turn in list(history)[-HISTORY_TURNS:]:
        if turn.get("customer"):
            messages.append(("user", str(turn["customer"])))
        if turn.get("agent"):
            messages.append(("assistant", str(turn["agent"])))
    if text is not None:
        messages.append(("user", text))
    return chat_request(MODEL, *messages, temperature=0.3, max_tokens=400)
