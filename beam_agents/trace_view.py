"""Typed, decoded views of trace events: the one module that reads trace attributes by name.

A ``TraceEvent`` carries its facts in a protobuf map of ``AttributeValue``. Reading
that map by hand is easy to get subtly wrong: ``event.attributes[name]`` on a missing
name *inserts* an empty entry (which changes the event's bytes and so its replay
verdict), and a name typed twice drifts. Every reader in the package therefore goes
through this module:

    view = decode(event)                      # ActivationStart | LlmCall | ... | None
    if isinstance(view, LlmCall) and view.cache_hit: ...
    LlmCall.of(event).cache_key               # when the kind is already known

Each view is a frozen dataclass holding the attributes its kind is written with; a
field is ``None`` when the event does not carry that attribute (older traces, or an
attribute only some events of the kind carry). ``to_attributes()`` goes back: it
returns exactly the attributes the view was decoded from (``None`` fields left
out), so ``make_event(..., attributes=view.to_attributes())`` rebuilds the same
bytes. Values of the wrong protobuf type read as that type's default, as a direct
read would; they never raise.

The trigger and activation-kind vocabulary (``Trigger``, ``ActivationKind``,
``Outcome``, ``InboundStatus``) lives here too: the activation writes these values,
replay and the TUI compare against them. They are ``StrEnum``s, so a decoded ``str``
compares equal to its member and an unknown value from a foreign trace stays a plain
string rather than failing to decode.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent

__all__ = [
    "ActivationEnd",
    "ActivationFailed",
    "ActivationKind",
    "ActivationStart",
    "InboundStatus",
    "IntentReleased",
    "IntentStaged",
    "LlmCall",
    "Outcome",
    "Suspended",
    "ToolCall",
    "TraceView",
    "Trigger",
    "attribute",
    "attribute_path",
    "attribute_text",
    "decode",
    "error_type_of",
]


class Trigger(enum.StrEnum):
    """What started an activation: the envelope's body, or the HITL timer."""

    EVENT = "event"
    TOOL_RESULT = "tool_result"
    APPROVAL = "approval"
    EXPORT_REQUEST = "export_request"
    TIMEOUT = "timeout"
    NONE = "none"
    """An envelope with no body (always rejected)."""


class ActivationKind(enum.StrEnum):
    """``start`` (``agent.start`` on an event) or ``resume`` (anything resuming a suspension)."""

    START = "start"
    RESUME = "resume"


class Outcome(enum.StrEnum):
    """How a committed activation ended (``ACTIVATION_END``'s outcome)."""

    DONE = "done"
    SUSPENDED = "suspended"
    RELEASED = "released"
    """An approval released the intent without running agent code."""
    REJECTED = "rejected"
    """A rejection of an intent nobody awaited dropped it without running agent code."""


class InboundStatus(enum.StrEnum):
    """The status an ``ACTIVATION_START`` gives its inbound result (besides ToolResult's)."""

    APPROVED = "approved"
    REJECTED = "rejected"
    TIMEOUT = "timeout"


def attribute(event: TraceEvent, name: str) -> te.AttrValue | None:
    """The value of attribute ``name``, or None if the event does not carry it (never inserts)."""
    if name not in event.attributes:
        return None
    return te.attribute_value(event.attributes[name])


def has_attribute(event: TraceEvent, name: str) -> bool:
    """Whether the event carries attribute ``name`` (a cheap test before decoding a view)."""
    return name in event.attributes


def attribute_kind(event: TraceEvent, name: str) -> str | None:
    """Which value attribute ``name`` carries (``string_value``, ``int_value``, …, or ``unset``
    when it is there without a value), None if absent.

    For checks of an attribute's type: a view reads a value of another type as its
    type's default (``""``, ``0``), so a reader that must tell corruption from a
    value asks this first.
    """
    if name not in event.attributes:
        return None
    return event.attributes[name].WhichOneof("value") or "unset"


def attribute_path(name: str) -> str:
    """The path of attribute ``name`` in a ``FieldDiff`` or an ``EventPair`` (``attributes['…']``)."""
    return f"attributes[{name!r}]"


def attribute_text(event: TraceEvent | None, name: str) -> str | None:
    """Attribute ``name`` as display text (``str()`` of its value), None if absent or unset."""
    if event is None:
        return None
    value = attribute(event, name)
    return None if value is None else str(value)


def error_type_of(event: TraceEvent) -> str | None:
    """The ``error.type`` of any kind that carries one (a failed call, a failed activation)."""
    return _str(event, te.ATTR_ERROR_TYPE)


def _str(event: TraceEvent, name: str) -> str | None:
    attrs = event.attributes
    return attrs[name].string_value if name in attrs else None


def _int(event: TraceEvent, name: str) -> int | None:
    attrs = event.attributes
    return attrs[name].int_value if name in attrs else None


def _bool(event: TraceEvent, name: str) -> bool | None:
    attrs = event.attributes
    return attrs[name].bool_value if name in attrs else None


def _str_tuple(event: TraceEvent, name: str) -> tuple[str, ...] | None:
    """A comma-joined list of ids/digests; ``""`` is the empty tuple."""
    text = _str(event, name)
    return None if text is None else (tuple(text.split(",")) if text else ())


_READERS: dict[type, Callable[[TraceEvent, str], object]] = {
    str: _str,
    int: _int,
    bool: _bool,
    tuple: _str_tuple,
}

_V = TypeVar("_V", bound="_View")


@dataclass(frozen=True, slots=True)
class _View:
    """Fields every view shares: where the event sits and what it is called."""

    KIND: ClassVar[int]
    ATTRIBUTES: ClassVar[tuple[tuple[str, str, type], ...]]
    """(field, attribute name, value type) for each kind-specific field, in the writer's order."""

    seq: int
    index: int
    name: str
    """The event's name (the activation kind, the model, the tool, the error type...)."""

    @classmethod
    def of(cls: type[_V], event: TraceEvent) -> _V:
        """Decode ``event`` as this kind (the caller has checked ``event.kind``)."""
        values = {f: _READERS[t](event, attr) for f, attr, t in cls.ATTRIBUTES}
        return cls(seq=event.seq, index=event.index, name=event.name, **values)

    @classmethod
    def path(cls, field_name: str) -> str:
        """The field path (``attributes['…']``) of this kind's field ``field_name``."""
        for name, attr, _ in cls.ATTRIBUTES:
            if name == field_name:
                return attribute_path(attr)
        raise KeyError(f"{cls.__name__} has no field {field_name!r}")

    def to_attributes(self) -> dict[str, te.AttrValue]:
        """The event's attributes (fields that are None are not written)."""
        out: dict[str, te.AttrValue] = {}
        for field_name, attr, _ in self.ATTRIBUTES:
            value = getattr(self, field_name)
            if value is not None:
                out[attr] = ",".join(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True)
class ActivationStart(_View):
    """``ACTIVATION_START``: what triggered the activation, and on which envelope."""

    KIND = TraceEvent.ACTIVATION_START
    ATTRIBUTES = (
        ("activation_kind", te.ATTR_ACTIVATION_KIND, str),
        ("trigger", te.ATTR_TRIGGER, str),
        ("envelope_id", te.ATTR_ENVELOPE_ID, str),
        ("envelope_sha256", te.ATTR_ENVELOPE_SHA256, str),
        ("event_type", te.ATTR_EVENT_TYPE, str),
        ("inbound_intent_id", te.ATTR_INBOUND_INTENT_ID, str),
        ("inbound_status", te.ATTR_INBOUND_STATUS, str),
        ("step_index", te.ATTR_STEP_INDEX, int),
        ("deadline_ms", te.ATTR_DEADLINE_MS, int),
    )

    activation_kind: str | None = None
    """``start`` or ``resume`` (compare with ``ActivationKind``)."""
    trigger: str | None = None
    """``event``, ``tool_result``, ``approval`` or ``timeout`` (compare with ``Trigger``)."""
    envelope_id: str | None = None
    """The triggering envelope's id (None for a timeout)."""
    envelope_sha256: str | None = None
    """sha256 hex of the triggering envelope's deterministic bytes (None for a timeout)."""
    event_type: str | None = None
    inbound_intent_id: str | None = None
    """For a tool_result or approval: the intent it answers."""
    inbound_status: str | None = None
    """A ToolResult status name, ``approved``/``rejected``, or ``timeout``."""
    step_index: int | None = None
    """For a resume: the step the agent resumes at."""
    deadline_ms: int | None = None
    """For a timeout: the deadline that fired."""

    @property
    def is_resume(self) -> bool:
        return self.activation_kind == ActivationKind.RESUME

    @property
    def is_timeout(self) -> bool:
        return self.trigger == Trigger.TIMEOUT

    @property
    def envelope(self) -> tuple[str, str]:
        """(id, sha256) of the triggering envelope; empty strings where not traced (a timeout)."""
        return self.envelope_id or "", self.envelope_sha256 or ""


@dataclass(frozen=True, slots=True)
class LlmCall(_View):
    """``LLM_CALL``: one model call, answered from the cache or billed (or failed)."""

    KIND = TraceEvent.LLM_CALL
    ATTRIBUTES = (
        ("cache_key", te.ATTR_CACHE_KEY, str),
        ("provider", te.ATTR_PROVIDER, str),
        ("request_model", te.ATTR_REQUEST_MODEL, str),
        ("call_ordinal", te.ATTR_CALL_ORDINAL, int),
        ("cache_hit", te.ATTR_CACHE_HIT, bool),
        ("billed", te.ATTR_BILLED, bool),
        ("response_sha256", te.ATTR_RESPONSE_SHA256, str),
        ("response_model", te.ATTR_RESPONSE_MODEL, str),
        ("input_tokens", te.ATTR_USAGE_INPUT, int),
        ("output_tokens", te.ATTR_USAGE_OUTPUT, int),
        ("stop_reason", te.ATTR_STOP_REASON, str),
        ("error_type", te.ATTR_ERROR_TYPE, str),
        ("fork_answer", te.ATTR_FORK_ANSWER, bool),
    )

    cache_key: str | None = None
    provider: str | None = None
    request_model: str | None = None
    call_ordinal: int | None = None
    cache_hit: bool | None = None
    billed: bool | None = None
    response_sha256: str | None = None
    response_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    stop_reason: str | None = None
    error_type: str | None = None
    """Set when the provider raised (the call failed; nothing was cached)."""
    fork_answer: bool | None = None
    """True on a replay fork's forked call: answered with the operator's value (no cache hit)."""


@dataclass(frozen=True, slots=True)
class ToolCall(_View):
    """``TOOL_CALL``: one read-only tool call (``recorded`` for a @tool(recorded=True))."""

    KIND = TraceEvent.TOOL_CALL
    ATTRIBUTES = (
        ("tool_name", te.ATTR_TOOL_NAME, str),
        ("recorded", te.ATTR_TOOL_RECORDED, bool),
        ("args_sha256", te.ATTR_ARGS_SHA256, str),
        ("result_sha256", te.ATTR_RESULT_SHA256, str),
        ("digest_only", te.ATTR_TOOL_DIGEST_ONLY, bool),
        ("result_is_bytes", te.ATTR_TOOL_RESULT_IS_BYTES, bool),
        ("error_type", te.ATTR_ERROR_TYPE, str),
        ("fork_answer", te.ATTR_FORK_ANSWER, bool),
    )

    tool_name: str | None = None
    recorded: bool | None = None
    args_sha256: str | None = None
    result_sha256: str | None = None
    digest_only: bool | None = None
    result_is_bytes: bool | None = None
    error_type: str | None = None
    fork_answer: bool | None = None
    """True on a replay fork's forked call: its result is the operator's (the tool did not run)."""


@dataclass(frozen=True, slots=True)
class IntentStaged(_View):
    """``INTENT_STAGED``: an intent the activation created (released at commit or gated)."""

    KIND = TraceEvent.INTENT_STAGED
    ATTRIBUTES = (
        ("intent_id", te.ATTR_INTENT_ID, str),
        ("tool_name", te.ATTR_TOOL_NAME, str),
        ("args_sha256", te.ATTR_ARGS_SHA256, str),
        ("requires_approval", te.ATTR_REQUIRES_APPROVAL, bool),
        ("approval_channel", te.ATTR_APPROVAL_CHANNEL, str),
        ("expires_at_ms", te.ATTR_EXPIRES_AT_MS, int),
    )

    intent_id: str | None = None
    tool_name: str | None = None
    args_sha256: str | None = None
    requires_approval: bool | None = None
    approval_channel: str | None = None
    expires_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class IntentReleased(_View):
    """``INTENT_RELEASED``: an intent handed to executors at commit."""

    KIND = TraceEvent.INTENT_RELEASED
    ATTRIBUTES = (
        ("intent_id", te.ATTR_INTENT_ID, str),
    )

    intent_id: str | None = None


@dataclass(frozen=True, slots=True)
class Suspended(_View):
    """``SUSPENDED``: the activation ended waiting on intents (and maybe a deadline)."""

    KIND = TraceEvent.SUSPENDED
    ATTRIBUTES = (
        ("step_index", te.ATTR_STEP_INDEX, int),
        ("awaiting", te.ATTR_AWAITING, tuple),
        ("deadline_ms", te.ATTR_DEADLINE_MS, int),
        ("state_sha256", te.ATTR_STATE_SHA256, str),
    )

    step_index: int | None = None
    awaiting: tuple[str, ...] | None = None
    """The intent ids the continuation awaits (traced comma-joined)."""
    deadline_ms: int | None = None
    state_sha256: str | None = None
    """sha256 hex of the adapter snapshot (the agent's ``Suspend(state=...)``)."""


@dataclass(frozen=True, slots=True)
class ActivationEnd(_View):
    """``ACTIVATION_END``: the commit, with counts and (newer traces) output/memory digests."""

    KIND = TraceEvent.ACTIVATION_END
    ATTRIBUTES = (
        ("outcome", te.ATTR_OUTCOME, str),
        ("outputs_count", te.ATTR_OUTPUTS_COUNT, int),
        ("intents_count", te.ATTR_INTENTS_COUNT, int),
        ("outputs_sha256", te.ATTR_OUTPUTS_SHA256, tuple),
        ("memory_sha256", te.ATTR_MEMORY_SHA256, str),
        ("memory_writes_sha256", te.ATTR_MEMORY_WRITES_SHA256, str),
    )

    outcome: str | None = None
    """``done``, ``suspended``, ``released`` or ``rejected`` (compare with ``Outcome``)."""
    outputs_count: int | None = None
    intents_count: int | None = None
    outputs_sha256: tuple[str, ...] | None = None
    """Each output's sha256 hex, in order; None when the trace predates the digests."""
    memory_sha256: str | None = None
    """sha256 hex of the committed memory; None when the trace predates the digests."""
    memory_writes_sha256: str | None = None
    """sha256 hex of the activation's memory write set; None when the trace predates it."""

    @property
    def digests_traced(self) -> bool:
        """True when the trace carries the output or memory digest (newer traces)."""
        return self.outputs_sha256 is not None or self.memory_sha256 is not None


@dataclass(frozen=True, slots=True)
class ActivationFailed(_View):
    """``ACTIVATION_FAILED``: agent code (or a provider/tool miss) raised; nothing committed."""

    KIND = TraceEvent.ACTIVATION_FAILED
    ATTRIBUTES = (
        ("error_type", te.ATTR_ERROR_TYPE, str),
    )

    error_type: str | None = None


TraceView = (
    ActivationStart
    | LlmCall
    | ToolCall
    | IntentStaged
    | IntentReleased
    | Suspended
    | ActivationEnd
    | ActivationFailed
)

_VIEWS: dict[int, type[_View]] = {
    cls.KIND: cls
    for cls in (
        ActivationStart,
        LlmCall,
        ToolCall,
        IntentStaged,
        IntentReleased,
        Suspended,
        ActivationEnd,
        ActivationFailed,
    )
}


def decode(event: TraceEvent) -> TraceView | None:
    """The typed view of ``event`` for its kind; None for a kind this code does not know."""
    cls = _VIEWS.get(event.kind)
    return None if cls is None else cls.of(event)  # type: ignore[return-value]
