"""The first step of ``RunAgent``: turn what a source read yields into ``(entity_key, bytes)``.

Accepted elements, told apart per element (a Kafka read yields ``(key, value)``,
a Pub/Sub read yields ``bytes``):

- ``bytes``: a serialized ``AgentEnvelope``; it is keyed by its ``entity_key``.
- ``(key, bytes)``: the same, with the message key the source carried. The key
  must equal the envelope's ``entity_key`` (a mismatch means the producer routed
  it by another key, so per-key order is not guaranteed); ``None`` means the
  source carried no key.

Anything else goes to ``.errors`` with the raw bytes; nothing raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._protos import AgentEnvelope
from beam_agents.dead_letter import KEY_MISMATCH, MALFORMED_ENVELOPE, ErrorRecord, log_dead_letter
from beam_agents.pipeline._beam import beam

TAG_ERRORS = "errors"
"""The tagged output of refused elements (``ErrorRecord``)."""

_BYTES_TYPES = (bytes, bytearray, memoryview)


def route_envelope(element: Any) -> tuple[bytes, bytes] | ErrorRecord:
    """Check one input element; ``(entity_key, envelope bytes)`` or the ``ErrorRecord`` refusing it.

    The envelope is parsed only to validate it and read its key; the stateful step
    parses the bytes again (cheaper than shipping a parsed message between workers).
    """
    given_key: bytes | None = None
    if isinstance(element, _BYTES_TYPES):
        raw = bytes(element)
    elif isinstance(element, tuple) and len(element) == 2:
        key, value = element
        if not isinstance(value, _BYTES_TYPES):
            return ErrorRecord(
                MALFORMED_ENVELOPE,
                f"a (key, value) element whose value is a {type(value).__name__}, "
                "not the bytes of an AgentEnvelope",
            )
        raw = bytes(value)
        if key is not None and not isinstance(key, _BYTES_TYPES):
            return ErrorRecord(
                MALFORMED_ENVELOPE,
                f"a (key, value) element whose key is a {type(key).__name__}, not bytes or None",
                raw=raw,
            )
        given_key = None if key is None else bytes(key)
    else:
        return ErrorRecord(
            MALFORMED_ENVELOPE,
            f"an input element of type {type(element).__name__}; RunAgent reads the bytes of "
            "an AgentEnvelope or (key, bytes)",
        )
    try:
        envelope = AgentEnvelope.FromString(raw)
    except DecodeError as exc:
        return ErrorRecord(
            MALFORMED_ENVELOPE,
            f"{len(raw)} bytes that do not parse as an AgentEnvelope ({exc})",
            entity_key=given_key or b"",
            raw=raw,
        )
    entity_key = envelope.entity_key
    if not entity_key:
        return ErrorRecord(
            MALFORMED_ENVELOPE,
            "an envelope with an empty entity_key (it cannot be routed to a key)",
            entity_key=given_key or b"",
            envelope_id=envelope.envelope_id,
            raw=raw,
        )
    if given_key is not None and given_key != entity_key:
        return ErrorRecord(
            KEY_MISMATCH,
            f"the message key {given_key.hex()} differs from the envelope's entity_key "
            f"{entity_key.hex()}",
            entity_key=entity_key,
            envelope_id=envelope.envelope_id,
            raw=raw,
        )
    return entity_key, raw


class RouteEnvelopes(beam.DoFn):  # type: ignore[misc]
    """Main output ``(entity_key, envelope bytes)``; refused elements on ``TAG_ERRORS``."""

    def process(self, element: Any) -> Iterator[Any]:
        routed = route_envelope(element)
        if isinstance(routed, ErrorRecord):
            log_dead_letter(routed)
            yield beam.pvalue.TaggedOutput(TAG_ERRORS, routed)
        else:
            yield routed
