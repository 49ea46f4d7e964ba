"""The dead-letter record of ``RunAgent.errors``: an input the pipeline refused, and why.

A refused input never stops the pipeline and never changes a key's state; it
comes out on ``.errors`` as an ``ErrorRecord`` carrying the raw bytes, so an
operator can fix and re-publish it. ``code`` is for machines (alerts, routing),
``reason`` for people.

Beam-free: the record is a plain frozen dataclass (pickled by Beam's default
coder) and can be read by tools that never import Apache Beam.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass
from typing import Any

from beam_agents import canonical_json


class ErrorCode(enum.StrEnum):
    """Every ``ErrorRecord.code``: a machine-readable cause (alerts and routing key on it)."""

    MALFORMED_ENVELOPE = "malformed_envelope"
    """The element is not an ``AgentEnvelope`` (bytes that do not parse, an element that is
    neither ``bytes`` nor ``(key, bytes)``, or an envelope without an ``entity_key``)."""
    KEY_MISMATCH = "key_mismatch"
    """A ``(key, bytes)`` element whose key differs from the envelope's ``entity_key``."""
    NO_BODY = "no_body"
    """An envelope with none of ``event``, ``tool_result``, ``approval``, ``export_request``."""
    REJECTED_TRIGGER = "rejected_trigger"
    """The key's state refuses the trigger: a ``tool_result`` or ``approval`` for an unknown or
    already-resolved intent, or a ``tool_result`` for an intent that still awaits approval."""
    INBOX_OVERFLOW = "inbox_overflow"
    """A start event for a suspended key whose inbox already holds ``AgentConfig.inbox_limit``."""
    STATE_UNREADABLE = "state_unreadable"
    """The key's committed state cannot be loaded by this binary (a blob newer than the
    package, a migration gap, corrupt bytes); the trigger is refused, the state left as is."""


# The members under their historical module-level names.
MALFORMED_ENVELOPE = ErrorCode.MALFORMED_ENVELOPE
KEY_MISMATCH = ErrorCode.KEY_MISMATCH
NO_BODY = ErrorCode.NO_BODY
REJECTED_TRIGGER = ErrorCode.REJECTED_TRIGGER
INBOX_OVERFLOW = ErrorCode.INBOX_OVERFLOW
STATE_UNREADABLE = ErrorCode.STATE_UNREADABLE

ERROR_CODES: tuple[ErrorCode, ...] = tuple(ErrorCode)
"""Every ``ErrorRecord.code``, in declaration order."""


@dataclass(frozen=True)
class ErrorRecord:
    """One element of ``RunAgentOutputs.errors``."""

    code: ErrorCode
    reason: str
    """One sentence naming what is wrong (the intent id, the two keys, the type...)."""
    entity_key: bytes = b""
    """The key the input was for; empty when it could not be told."""
    envelope_id: str = ""
    """The envelope's id; empty when it could not be parsed (or for a HITL timer)."""
    raw: bytes = b""
    """The refused envelope's bytes exactly as read; empty when the element was not bytes."""

    def __post_init__(self) -> None:
        # A plain string names a code too ("key_mismatch"); an unknown one is refused here,
        # not by the alerting that routes on it.
        if not isinstance(self.code, ErrorCode):
            object.__setattr__(self, "code", ErrorCode(self.code))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``raw`` and ``entity_key`` base64), for a dead-letter topic."""
        return {
            "code": str(self.code),
            "reason": self.reason,
            "entity_key_b64": base64.b64encode(self.entity_key).decode("ascii"),
            "envelope_id": self.envelope_id,
            "raw_b64": base64.b64encode(self.raw).decode("ascii"),
        }

    def to_json_bytes(self) -> bytes:
        """``to_dict()`` as canonical JSON bytes: the same record always gives the same bytes."""
        return canonical_json.dumps(self.to_dict())
