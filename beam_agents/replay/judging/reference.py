"""The reference run's values, proved production's by this trace's digests (or left out).

A reference run replays the same activation first, in a fresh process of its own,
with the build that ran in production, and prints its ``--json`` document. That
document is *read*, never trusted: the process ran agent code, which can write to
its standard output. A value of it fills the traced side of the candidate's
comparison only when this process proves it against its own copy of the trace:

- a tool's arguments or result, an intent's arguments, a Suspend state, an output
  or the committed memory: its sha256 is **recomputed here** from the value itself
  (its UTF-8 bytes, or its canonical JSON) and must equal the digest the traced
  event holds (a recorded tool's result must also be of the traced kind, bytes or
  JSON);
- an error type or an intent's tool: the value must equal the traced attribute;
- a model response (one digest over the whole response), a request's cache key and
  the triggering envelope: the reference's digest must equal the traced one (its
  engine computed it from the value; the components of a request are shown only
  when the whole request's cache key is the traced one).

Anything else (an unverifiable value, a differing one, a value of an event the
trace does not have, a document of another key or seq, a malformed document)
is left out: never an unproved value shown as production's.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from beam_agents import canonical_json
from beam_agents._protos import TraceEvent
from beam_agents.replay.judging.values import value_text
from beam_agents.replay.result import Mark, ReferenceRun, Value
from beam_agents.trace_events import (
    ATTR_ARGS_SHA256,
    ATTR_CACHE_KEY,
    ATTR_ENVELOPE_SHA256,
    ATTR_ERROR_TYPE,
    ATTR_MEMORY_SHA256,
    ATTR_OUTPUTS_SHA256,
    ATTR_RESPONSE_SHA256,
    ATTR_RESULT_SHA256,
    ATTR_STATE_SHA256,
    ATTR_TOOL_NAME,
    ATTR_TOOL_RECORDED,
)
from beam_agents.trace_view import ToolCall, attribute_text, has_attribute

__all__ = ["ReferenceUnreadable", "prove_reference"]

_REHASHED = frozenset(
    {
        ATTR_ARGS_SHA256,
        ATTR_RESULT_SHA256,
        ATTR_STATE_SHA256,
        ATTR_MEMORY_SHA256,
        ATTR_OUTPUTS_SHA256,
    }
)
"""Attributes whose digest is the sha256 of the value's own bytes: recomputed here."""
_EQUAL = frozenset({ATTR_ERROR_TYPE, ATTR_TOOL_NAME})
"""Attributes that hold the value itself."""
_BY_DIGEST = frozenset({ATTR_RESPONSE_SHA256, ATTR_CACHE_KEY, ATTR_ENVELOPE_SHA256})
"""Attributes whose digest only the reference's engine could compute (from a proto)."""
_OUTPUT_PATH = re.compile(r"outputs\[(\d+)\]\Z")


class ReferenceUnreadable(ValueError):
    """The reference's document is not the ``--json`` document of this activation."""


def _content_digests(value: Any, is_bytes: bool) -> set[str]:
    """The sha256 digests ``value`` can stand for: its UTF-8 bytes, or its canonical JSON."""
    found: set[str] = set()
    if isinstance(value, str):
        # A lone surrogate has no UTF-8 bytes: no digest it could stand for.
        with contextlib.suppress(UnicodeEncodeError):
            found.add(hashlib.sha256(value.encode("utf-8")).hexdigest())
    if not is_bytes and canonical_json.check_json_value(value) is None:
        with contextlib.suppress(TypeError, ValueError):
            found.add(hashlib.sha256(canonical_json.dumps(value)).hexdigest())
    return found


def _traced_digest(event: TraceEvent, attribute: str, path: str) -> str | None:
    traced = attribute_text(event, attribute)
    if traced is None or attribute != ATTR_OUTPUTS_SHA256:
        return traced
    match = _OUTPUT_PATH.match(path)
    digests = traced.split(",") if traced else []
    if match is None or int(match.group(1)) >= len(digests):
        return None
    return digests[int(match.group(1))]


def _kind_differs(event: TraceEvent, is_bytes: bool) -> bool:
    """A recorded tool's traced result kind is not the value's (the digest cannot tell)."""
    if not has_attribute(event, ATTR_TOOL_RECORDED):
        return False
    call = ToolCall.of(event)
    return bool(call.recorded) and bool(call.result_is_bytes) != is_bytes


def _field(item: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = item.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ReferenceUnreadable(f"a value's {name!r} is not a {getattr(kind, '__name__', kind)}")
    return value


def _proved(
    item: Mapping[str, Any], traced: Sequence[TraceEvent], requests: set[int]
) -> tuple[Value, bool] | None:
    """``(value, rehashed)`` when ``item`` is proved against ``traced``, else None."""
    index = _field(item, "event_index", int)
    path = _field(item, "path", str)
    if item.get("mark") != Mark.VERIFIED.value or not 0 <= index < len(traced):
        return None
    attribute = item.get("attribute")
    if not isinstance(attribute, str):
        return None
    event = traced[index]
    value, is_bytes = item.get("value"), item.get("is_bytes") is True
    claimed = item.get("digest")
    if path.startswith("request."):
        # A component: production's when the whole request's cache key is the traced one.
        if attribute != ATTR_CACHE_KEY or index not in requests:
            return None
        theirs = attribute_text(event, ATTR_CACHE_KEY)
        digest = claimed if isinstance(claimed, str) else None
        return _value(index, path, value, is_bytes, attribute, digest, theirs), False
    theirs = _traced_digest(event, attribute, path)
    if theirs is None:
        return None
    if attribute in _REHASHED:
        if theirs not in _content_digests(value, is_bytes):
            return None
        if attribute == ATTR_RESULT_SHA256 and _kind_differs(event, is_bytes):
            return None
        rehashed = True
    elif attribute in _EQUAL:
        if value != theirs:
            return None
        rehashed = True
    elif attribute in _BY_DIGEST:
        if claimed != theirs:
            return None
        rehashed = False
        if path == "request":
            requests.add(index)
    else:
        return None  # an attribute this version does not know how to prove: never shown
    return _value(index, path, value, is_bytes, attribute, theirs, theirs), rehashed


def _value(
    index: int,
    path: str,
    value: Any,
    is_bytes: bool,
    attribute: str,
    digest: str | None,
    traced: str | None,
) -> Value:
    return Value(
        event_index=index,
        path=path,
        value=value,
        text=value_text(value),  # derived here, never the document's own text
        mark=Mark.VERIFIED,
        digest=digest,
        traced_digest=traced,
        attribute=attribute,
        is_bytes=is_bytes,
    )


def prove_reference(
    document: Any,
    traced: Sequence[TraceEvent],
    *,
    agent_path: str,
    source: str,
    entity_key: bytes | None,
    seq: int | None,
) -> ReferenceRun:
    """The reference's proved values (``ReferenceRun``) out of its ``--json`` ``document``.

    Args:
        document: The reference run's ``--json`` document, decoded (any shape: it is checked).
        traced: The traced events of the activation, as this process read them.
        agent_path: The reference agent's ``module:ATTR``.
        source: Where the reference came from, for the header.
        entity_key: The key this replay is of (the document must be of it too).
        seq: The seq this replay is of (likewise).

    Raises:
        ReferenceUnreadable: The document is not a replay document of this activation.
    """
    if not isinstance(document, Mapping):
        raise ReferenceUnreadable("it is not a JSON object")
    verdict = document.get("verdict")
    reason = document.get("reason")
    header = document.get("header")
    if not isinstance(verdict, str) or not isinstance(reason, str):
        raise ReferenceUnreadable("it has no verdict or reason")
    if verdict == "error":
        return ReferenceRun(
            agent_path=agent_path, source=source, seq=seq, verdict=verdict, reason=reason
        )
    if not isinstance(header, Mapping):
        raise ReferenceUnreadable("it has no header")
    if entity_key is not None and header.get("entity_key") != entity_key.hex():
        raise ReferenceUnreadable("it is of another key")
    if header.get("seq") != seq:
        raise ReferenceUnreadable(f"it is of seq {header.get('seq')!r}, not {seq!r}")
    divergence = document.get("first_divergence")
    first: int | None = None
    if isinstance(divergence, Mapping) and isinstance(divergence.get("index"), int):
        first = divergence["index"]
    items = document.get("values")
    if not isinstance(items, list):
        raise ReferenceUnreadable("its values are not a list")
    proved: dict[tuple[int, str], Value] = {}
    rehashed: set[tuple[int, str]] = set()
    requests: set[int] = set()
    # Requests first: a component is shown only when its request's cache key is proved.
    ordered = sorted(
        (i for i in items if isinstance(i, Mapping)),
        key=lambda i: i.get("path") != "request",
    )
    if len(ordered) != len(items):
        raise ReferenceUnreadable("a value is not a JSON object")
    for item in ordered:
        found = _proved(item, traced, requests)
        if found is None:
            continue
        value, by_hash = found
        key = (value.event_index, value.path)
        proved[key] = value
        if by_hash:
            rehashed.add(key)
    return ReferenceRun(
        agent_path=agent_path,
        source=source,
        seq=seq,
        verdict=verdict,
        reason=reason,
        first_divergence=first,
        values=proved,
        rehashed=frozenset(rehashed),
    )
