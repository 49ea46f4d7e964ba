"""The dead-letter record of ``RunAgent.errors``: an input the pipeline refused or gave up on.

A refused input never stops the pipeline and never changes a key's state; it
comes out on ``.errors`` as an ``ErrorRecord`` carrying the raw bytes, so an
operator can fix and re-publish it. ``code`` is for machines (alerts, routing),
``reason`` for people. So does a trigger whose activation failed for good
(``activation_failed``, ``retries_exhausted``): its record also names the seq of the
last failed activation (the one to replay), the error, and every attempt with the
retry policy's decision after it.

Beam-free: the record is a plain frozen dataclass (pickled by Beam's default
coder) and can be read by tools that never import Apache Beam.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import logging
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
    ACTIVATION_FAILED = "activation_failed"
    """The trigger's activation failed for a reason a retry cannot cure: agent code raised
    (``BaseException`` included) or returned what is not ``Done``/``Suspend``, the provider
    refused the request or gave no answer. Dead-lettered at once; nothing was committed."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    """The trigger's activation failed transiently (rate limit, timeout, provider
    unavailable) on every one of ``RetryPolicy.max_attempts`` attempts."""


# The members under their historical module-level names.
MALFORMED_ENVELOPE = ErrorCode.MALFORMED_ENVELOPE
KEY_MISMATCH = ErrorCode.KEY_MISMATCH
NO_BODY = ErrorCode.NO_BODY
REJECTED_TRIGGER = ErrorCode.REJECTED_TRIGGER
INBOX_OVERFLOW = ErrorCode.INBOX_OVERFLOW
STATE_UNREADABLE = ErrorCode.STATE_UNREADABLE
ACTIVATION_FAILED = ErrorCode.ACTIVATION_FAILED
RETRIES_EXHAUSTED = ErrorCode.RETRIES_EXHAUSTED

ERROR_CODES: tuple[ErrorCode, ...] = tuple(ErrorCode)
"""Every ``ErrorRecord.code``, in declaration order."""

RESENDABLE_CODES: frozenset[ErrorCode] = frozenset(
    {ACTIVATION_FAILED, RETRIES_EXHAUSTED, INBOX_OVERFLOW, STATE_UNREADABLE}
)
"""The codes whose envelope may succeed when re-published as it is, once the cause is
fixed (agent code, the provider, a full inbox, an old binary). The others would be
refused the same way again: the envelope itself must change."""

LOG = logging.getLogger("beam_agents")
"""The package's logger: a dead letter at WARNING, a retry at INFO (``beam_agents.key_step``)."""

REQUIRED_FIELDS = ("code", "reason", "entity_key_b64", "envelope_id", "raw_b64")
"""The fields ``ErrorRecord.from_dict`` cannot do without (the others default)."""

MAX_ERROR_TEXT = 2000
"""The most characters of an error's message a record keeps (per attempt: 500)."""
MAX_ATTEMPT_TEXT = 500


@dataclass(frozen=True)
class Attempt:
    """One failed activation of a trigger, and what the retry policy decided after it."""

    seq: int
    """The activation's seq (replay it with ``--seq``)."""
    now_ms: int
    """Its activation clock (the envelope's event time, or the retry's due time)."""
    error_type: str
    """The error's type, as traced on ``ACTIVATION_FAILED``."""
    error: str
    """The error's message (cut to ``MAX_ATTEMPT_TEXT`` characters)."""
    transient: bool
    """Whether the failure was transient (``beam_agents.retry.is_transient``)."""
    wait_ms: int
    """The wait the policy chose before the next attempt; 0: it gave the trigger up."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "now_ms": self.now_ms,
            "error_type": self.error_type,
            "error": self.error,
            "transient": self.transient,
            "wait_ms": self.wait_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            seq=int(data["seq"]),
            now_ms=int(data["now_ms"]),
            error_type=str(data["error_type"]),
            error=str(data["error"]),
            transient=bool(data["transient"]),
            wait_ms=int(data["wait_ms"]),
        )


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
    """The refused envelope's bytes exactly as read; empty when the element was not bytes
    (or, for a failed HITL timeout resume, which has no envelope)."""
    seq: int = 0
    """For ``activation_failed`` / ``retries_exhausted``: the seq of the last failed
    activation (``beam-agents-replay --seq``); 0 for a refused input (none ran)."""
    error_type: str = ""
    """The last failure's error type, as traced on its ``ACTIVATION_FAILED``."""
    error: str = ""
    """The last failure's message (cut to ``MAX_ERROR_TEXT`` characters)."""
    attempts: tuple[Attempt, ...] = ()
    """Every failed activation of the trigger, oldest first, with the policy's decisions."""

    def __post_init__(self) -> None:
        # A plain string names a code too ("key_mismatch"); an unknown one is refused here,
        # not by the alerting that routes on it.
        if not isinstance(self.code, ErrorCode):
            object.__setattr__(self, "code", ErrorCode(self.code))
        object.__setattr__(self, "attempts", tuple(self.attempts))

    @property
    def resendable(self) -> bool:
        """True when re-publishing ``raw`` as it is may succeed once the cause is fixed
        (``RESENDABLE_CODES``, and the record carries an envelope)."""
        return self.code in RESENDABLE_CODES and bool(self.raw)

    def resend_envelope(self, *, event_time_ms: int) -> bytes:
        """The envelope to re-publish for this record: ``raw`` with its ``event_time_ms``
        replaced by ``event_time_ms`` (the re-send's time), every other field kept.

        Re-published as it is, ``raw`` would run on its original clock: a HITL deadline
        or an intent's expiry counted from it is already past, and a retry after it is due
        at once. Stamp the time of the re-send instead (and give the message that same
        timestamp, as for any envelope), so the activation runs now.

        Raises:
            ValueError: the record is not ``resendable`` (its code, or no ``raw``), its
                ``raw`` is not an ``AgentEnvelope``, or ``event_time_ms`` is not an int.
        """
        from google.protobuf.message import DecodeError

        from beam_agents._protos import AgentEnvelope

        if isinstance(event_time_ms, bool) or not isinstance(event_time_ms, int):
            raise ValueError(f"event_time_ms must be an int (ms since the epoch), got {event_time_ms!r}")
        if not self.resendable:
            why = "it carries no envelope" if not self.raw else "the envelope must change first"
            raise ValueError(f"a {self.code} record is not resendable: {why}")
        try:
            envelope = AgentEnvelope.FromString(self.raw)
        except DecodeError as exc:
            raise ValueError(f"the record's raw bytes are not an AgentEnvelope ({exc})") from None
        envelope.event_time_ms = event_time_ms
        return envelope.SerializeToString(deterministic=True)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``raw`` and ``entity_key`` base64), for a dead-letter topic."""
        return {
            "code": str(self.code),
            "reason": self.reason,
            "entity_key_b64": base64.b64encode(self.entity_key).decode("ascii"),
            "envelope_id": self.envelope_id,
            "raw_b64": base64.b64encode(self.raw).decode("ascii"),
            "seq": self.seq,
            "error_type": self.error_type,
            "error": self.error,
            "attempts": [attempt.to_dict() for attempt in self.attempts],
            # Derived (from_dict ignores it): for consumers that read the JSON without us.
            "resendable": self.resendable,
        }

    def to_json_bytes(self) -> bytes:
        """``to_dict()`` as canonical JSON bytes: the same record always gives the same bytes."""
        return canonical_json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorRecord:
        """The record ``to_dict()`` gave (what a dead-letter topic holds), read back.

        Raises:
            ValueError: ``data`` is not such a dict (a missing field, bad base64, an
                unknown code), naming what is wrong.
        """
        try:
            return cls(
                ErrorCode(data["code"]),
                str(data["reason"]),
                entity_key=base64.b64decode(data["entity_key_b64"], validate=True),
                envelope_id=str(data["envelope_id"]),
                raw=base64.b64decode(data["raw_b64"], validate=True),
                seq=int(data.get("seq", 0)),
                error_type=str(data.get("error_type", "")),
                error=str(data.get("error", "")),
                attempts=tuple(Attempt.from_dict(a) for a in data.get("attempts", ())),
            )
        except KeyError as exc:
            missing = exc.args[0] if exc.args else "?"
            raise ValueError(
                f"not a dead-letter record: the field {missing!r} is missing (a record has "
                f"{', '.join(REQUIRED_FIELDS)})"
            ) from None
        except binascii.Error as exc:
            raise ValueError(f"not a dead-letter record: a *_b64 field is not base64 ({exc})") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a dead-letter record: {exc}") from None

    @classmethod
    def from_json_bytes(cls, data: bytes | str) -> ErrorRecord:
        """The record ``to_json_bytes()`` gave, read back (see ``from_dict``)."""
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"not a dead-letter record: not JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise ValueError(
                f"not a dead-letter record: a JSON {type(parsed).__name__}, not an object"
            )
        return cls.from_dict(parsed)


def log_dead_letter(record: ErrorRecord) -> None:
    """Log ``record`` at WARNING on the ``beam_agents`` logger, in one line: its code, key,
    envelope id, seq and reason (never its bytes: they may carry what a customer sent)."""
    LOG.warning(
        "beam_agents: dead letter %s for key %s, envelope %r (seq %d): %s",
        record.code.value,
        record.entity_key.hex(),
        record.envelope_id,
        record.seq,
        record.reason,
    )
