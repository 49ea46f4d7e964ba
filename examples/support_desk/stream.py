"""The bundled stream: a morning at the support desk, as the envelopes on the events topic.

Four customers write in; Bob's refund makes a full approval round trip (his
message stages a refund and suspends, a teammate approves it, the payments
executor reports the refund, the agent confirms); Carol mistypes an order id
and v1's agent code fails on it after a billed triage call; export requests for
Bob and Carol follow their activations, so the pipeline writes the snapshots an
operator replays from, and Alice's export follows hers (her status question read the
carriers' tracking service through a recorded tool).

The stream is built in code, deterministically: same envelopes, same bytes,
every run. The demo plays the approver and the executor, so it needs the refund
intent's id before the pipeline runs: intent ids are derived from
``(entity_key, seq, ordinal)`` (``derive_intent_id``), so it can compute it.

``INCIDENTS`` lists what the demo replays, with the verdict each must give.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from beam_agents._protos import AgentEnvelope, ToolResult
from beam_agents.context import derive_intent_id
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from examples.support_desk.agent import AGENT
from examples.support_desk.orders import T0_MS, find_order
from examples.support_desk.tools import issue_refund

MINUTE_MS = 60_000

ALICE = b"customer-alice"
BOB = b"customer-bob"
CAROL = b"customer-carol"
DAN = b"customer-dan"

AGENT_V1 = "examples.support_desk.agent:AGENT"
AGENT_V2 = "examples.support_desk.agent_v2:AGENT"
REGISTRY = "examples.support_desk.tools:TOOLS"


def _message(key: bytes, minute: int, envelope_id: str, text: str) -> AgentEnvelope:
    return event_envelope(
        key,
        "customer_message",
        text.encode("utf-8"),
        time_ms=T0_MS + minute * MINUTE_MS,
        envelope_id=envelope_id,
        attributes={"channel": "chat"},
    )


BOB_REFUND_MESSAGE = _message(
    BOB,
    2,
    "msg-bob-1",
    "My blender from order B-2001 arrived with a cracked jar. Can I get a refund please?",
)
CAROL_TYPO_MESSAGE = _message(
    CAROL,
    12,
    "msg-carol-2",
    "Still nothing for order #C-30O1?! This is the second time I'm asking.",
)

FIRST_SEQ = 1
"""The SEQ of a key's first activation (the pipeline's SEQ cell counts activations from 1)."""

BOB_REFUND_INTENT = derive_intent_id(BOB, FIRST_SEQ, 0)
"""The id of the refund intent Bob's first activation stages first (ordinal 0)."""


def _bob_refund_result() -> dict[str, object]:
    # The executor performs exactly the intent the agent staged: same order, same amount.
    order = find_order("B-2001")
    assert order is not None
    result: dict[str, object] = issue_refund.fn(
        order_id=order["order_id"],
        amount_cents=AGENT.refund_amount_cents(order),
        reason=f"damaged on arrival, reported by {BOB.decode()}",
    )
    return result


BOB_APPROVAL = approval_envelope(
    BOB,
    BOB_REFUND_INTENT,
    approved=True,
    approver="maria@acme.example",
    reason="photo of the cracked jar attached",
    time_ms=T0_MS + 20 * MINUTE_MS,
    envelope_id="apr-bob-1",
)
BOB_REFUND_RESULT = tool_result_envelope(
    BOB,
    BOB_REFUND_INTENT,
    status=ToolResult.OK,
    payload=json.dumps(_bob_refund_result(), sort_keys=True).encode("utf-8"),
    time_ms=T0_MS + 23 * MINUTE_MS,
    envelope_id="res-bob-1",
)

EXPORT_BOB = export_request_envelope(
    BOB, "incident-refund-bob", time_ms=T0_MS + 30 * MINUTE_MS, envelope_id="exp-bob-1"
)
EXPORT_CAROL = export_request_envelope(
    CAROL, "incident-carol-typo", time_ms=T0_MS + 30 * MINUTE_MS, envelope_id="exp-carol-1"
)

ALICE_STATUS_MESSAGE = _message(
    ALICE,
    0,
    "msg-alice-1",
    "Hi! Where is my order A-1001? It was supposed to arrive yesterday.",
)
EXPORT_ALICE = export_request_envelope(
    ALICE, "incident-alice-tracking", time_ms=T0_MS + 30 * MINUTE_MS, envelope_id="exp-alice-1"
)

STREAM: tuple[AgentEnvelope, ...] = (
    ALICE_STATUS_MESSAGE,
    BOB_REFUND_MESSAGE,
    _message(CAROL, 4, "msg-carol-1", "Hi, where is my order C-3001?"),
    _message(
        DAN, 6, "msg-dan-1", "My headphones from order D-4001 stopped working. I'd like a refund."
    ),
    _message(ALICE, 9, "msg-alice-2", "Thanks! Can you also check on A-1002?"),
    CAROL_TYPO_MESSAGE,
    _message(ALICE, 15, "msg-alice-3", "Great, thanks, that's all!"),
    BOB_APPROVAL,
    BOB_REFUND_RESULT,
    EXPORT_BOB,
    EXPORT_CAROL,
    EXPORT_ALICE,
)
"""The events topic, in arrival order (event times increase along it)."""


@dataclass(frozen=True)
class Incident:
    """One activation the demo replays, with which agent, and the verdict replay must give."""

    name: str
    """Short id, used in file names and test ids."""
    title: str
    """What an operator would call it."""
    entity_key: bytes
    seq: int
    """The activation's SEQ (``--seq``)."""
    event: AgentEnvelope
    """The envelope that triggered it (``--event``)."""
    export: AgentEnvelope
    """The export request whose snapshot it is replayed from (``--snapshot``)."""
    agent: str
    """``--agent`` import path."""
    verdict: str
    """The verdict word replay prints."""
    exit_code: int

    @property
    def snapshot_request_id(self) -> str:
        return self.export.export_request.request_id


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="refund-v1",
        title="Bob's refund request, replayed with the agent that ran (v1)",
        entity_key=BOB,
        seq=FIRST_SEQ,
        event=BOB_REFUND_MESSAGE,
        export=EXPORT_BOB,
        agent=AGENT_V1,
        verdict="reproduced",
        exit_code=0,
    ),
    Incident(
        name="refund-v2",
        title="The same activation, replayed with v2 (order ids normalized differently)",
        entity_key=BOB,
        seq=FIRST_SEQ,
        event=BOB_REFUND_MESSAGE,
        export=EXPORT_BOB,
        agent=AGENT_V2,
        verdict="diverged",
        exit_code=1,
    ),
    Incident(
        name="carol-typo",
        title="Carol's failed activation (a mistyped order id), replayed with v1",
        entity_key=CAROL,
        seq=FIRST_SEQ + 1,
        event=CAROL_TYPO_MESSAGE,
        export=EXPORT_CAROL,
        agent=AGENT_V1,
        verdict="irreproducible",
        exit_code=3,
    ),
    Incident(
        name="refund-resume",
        title="Bob's refund confirmation (a completed resume), replayed with v1",
        entity_key=BOB,
        seq=FIRST_SEQ + 2,
        event=BOB_REFUND_RESULT,
        export=EXPORT_BOB,
        agent=AGENT_V1,
        verdict="reproduced",
        exit_code=0,
    ),
    Incident(
        name="alice-tracking",
        title=(
            "Alice's status question, whose recorded track_shipment read the carriers' HTTP "
            "service: replayed with that service stopped (served from the snapshot's tool cache)"
        ),
        entity_key=ALICE,
        seq=FIRST_SEQ,
        event=ALICE_STATUS_MESSAGE,
        export=EXPORT_ALICE,
        agent=AGENT_V1,
        verdict="reproduced",
        exit_code=0,
    ),
)
"""What the demo replays: reproduced (0), diverged (1), irreproducible cache miss (3), and the
resume that ended Bob's round trip, replayed from the continuation the snapshot's
``resumed_from`` kept (reproduced, 0), and Alice's status question, whose recorded tool
read a live HTTP service, replayed with that service stopped (reproduced, 0)."""
