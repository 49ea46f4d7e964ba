"""Verified values: the plaintext behind every replayed digest, marked against the trace.

A trace holds digests, never payloads. The re-run holds every value in plaintext
(``ValueCapture``): the requests it built, the responses the snapshot's cache
served, tool arguments and results, intent arguments, the Suspend state, the
outputs and the committed memory. Each is decoded here and marked:

- **verified**: its sha256 (or, for a model request, its cache key, a digest of
  the complete request material) equals the digest the traced event at the same
  index holds: this is the value production had;
- **differs**: the traced event holds another value's digest;
- **unverifiable**: nothing traced to check it with (a what-if, an event the
  trace does not have, an exception's message, which no trace carries).

A request's components (model, params, each message, each tool spec) are marked
one by one when the request differs and the snapshot's cache still holds the
traced request's entry: its fingerprint has one digest per component. Values
come from the re-run and the snapshot only; nothing here changes a verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import traceback
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, overload

from beam_agents import canonical_json
from beam_agents._protos import (
    AgentEnvelope,
    ChatMessage,
    LlmRequest,
    LlmResponse,
    RequestFingerprint,
    ToolCall,
    ToolSpec,
    TraceEvent,
)
from beam_agents.activation import envelope_digest
from beam_agents.agent import Timeout
from beam_agents.cache_key import request_digests
from beam_agents.capture import CapturedValue, CaptureKind, ValueCapture
from beam_agents.llm_cache import ReplayCache, response_digest
from beam_agents.replay.result import BlobDigest, Mark, Value, ValueList
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
from beam_agents.trace_view import IntentStaged, attribute_text, has_attribute
from beam_agents.trace_view import ToolCall as ToolCallView

__all__ = [
    "CapturedError",
    "ReplayValues",
    "agent_frame",
    "collect_values",
    "freeze_errors",
    "value_text",
]

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mark(digest: str | None, traced: str | None) -> Mark:
    if traced is None or digest is None:
        return Mark.UNVERIFIABLE
    return Mark.VERIFIED if digest == traced else Mark.DIFFERS


def _json_value(value: Any) -> tuple[Any, bool]:
    """``(JSON-able value, is_bytes)``; bytes are decoded as UTF-8 (bad bytes as ``\\xNN``)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="backslashreplace"), True
    return value, False


_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=repr)
"""``json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)``, built once
(values are derived each time they are read)."""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if type(value) is int:
        return int.__repr__(value)  # what the encoder writes for an int (not a bool)
    return _TEXT_ENCODER.encode(value)


def value_text(value: Any) -> str:
    """A value's one-line text, as every ``Value.text`` is written (a reference's too)."""
    return _text(value)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is not a finite number")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_or_text(data: str) -> Any:
    """A JSON-encoded string field (tool arguments, parameters) decoded, else as it is.

    Only a JSON value every report can print is decoded: ``NaN``, ``Infinity``, a number
    past a double's range (``1e999``), an integer past 4300 digits or nesting deeper than
    ``MAX_JSON_DEPTH`` stays text (a cached response's tool-call arguments come from the
    snapshot: ``--json`` refuses non-finite numbers and ended with an internal error).
    """
    try:
        value = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return data
    if isinstance(value, (dict, list)) and canonical_json.check_json_value(value) is not None:
        return data
    return value


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": _json_or_text(call.arguments_json)}


def _message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [_tool_call(c) for c in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def _tool_spec(spec: ToolSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "description": spec.description,
        "parameters": _json_or_text(spec.parameters_json),
    }


def _params(request: LlmRequest) -> dict[str, Any]:
    p = request.params
    out: dict[str, Any] = {}
    for name in ("temperature", "top_p", "max_tokens", "seed"):
        if p.HasField(name):
            value = getattr(p, name)
            # A non-finite float (agent code may set one) as its text: --json prints no NaN.
            finite = not isinstance(value, float) or math.isfinite(value)
            out[name] = value if finite else repr(value)
    if p.stop:
        out["stop"] = list(p.stop)
    if p.extra:
        out["extra"] = dict(sorted(p.extra.items()))
    return out


def agent_frame(error: BaseException) -> str:
    """Where agent code raised ``error`` (or called what raised it): ``file:line in fn: code``."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    if not frames:
        return ""
    frame = (outside or frames)[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{code}"


class _Builder:
    """Collects the values of one replayed event against its traced counterpart.

    ``texts_only``: collect each value's path and text only (``texts``), no ``Value``;
    digests and marks, which no text shows, are not computed (``wants_digests``).
    """

    def __init__(
        self, traced: TraceEvent | None, replayed: TraceEvent, *, texts_only: bool = False
    ) -> None:
        # A traced event of another kind holds another step's digests: nothing to verify with.
        self.traced = traced if traced is not None and traced.kind == replayed.kind else None
        self.index = replayed.index
        self.values: list[Value] = []
        self.wants_digests = not texts_only
        self.texts: list[str] | None = [] if texts_only else None

    def traced_attr(self, name: str) -> str | None:
        return attribute_text(self.traced, name)

    def add(
        self,
        path: str,
        value: Any,
        *,
        digest: str | None = None,
        attribute: str | None = None,
        mark: Mark | None = None,
        traced: str | None = None,
    ) -> None:
        shown, is_bytes = _json_value(value)
        if self.texts is not None:
            self.texts += (path, _text(shown))
            return
        if traced is None and attribute is not None:
            traced = self.traced_attr(attribute)
        self.values.append(
            Value(
                event_index=self.index,
                path=path,
                value=shown,
                text=_text(shown),
                is_bytes=is_bytes,
                mark=mark if mark is not None else _mark(digest, traced),
                digest=digest,
                traced_digest=traced,
                attribute=attribute,
            )
        )


def _request_values(
    b: _Builder,
    request: LlmRequest,
    provider: str,
    fingerprint_of: Callable[[str], RequestFingerprint | None],
) -> None:
    digests = request_digests(request, provider=provider)
    key = digests.cache_key()
    traced_key = b.traced_attr(ATTR_CACHE_KEY)
    whole = _mark(key, traced_key)
    # The traced request's fingerprint, when its entry is still cached: marks per component.
    fingerprint: RequestFingerprint | None = None
    if whole is Mark.DIFFERS and traced_key is not None:
        fingerprint = fingerprint_of(traced_key)

    def component(path: str, value: Any, mine: bytes, theirs: bytes | None) -> None:
        mark: Mark
        if whole is not Mark.DIFFERS:
            mark = whole
        elif theirs is None:
            mark = Mark.UNVERIFIABLE
        else:
            mark = Mark.VERIFIED if mine == theirs else Mark.DIFFERS
        b.add(
            path,
            value,
            digest=mine.hex(),
            attribute=ATTR_CACHE_KEY,
            mark=mark,
            traced=theirs.hex() if theirs is not None else traced_key,
        )

    def nth(items: Sequence[bytes] | None, i: int) -> bytes | None:
        if items is None:
            return None
        return items[i] if i < len(items) else b""

    fp = fingerprint
    b.add("request", {"cache_key": key}, digest=key, attribute=ATTR_CACHE_KEY)
    component("request.model", request.model, digests.model, fp.model if fp else None)
    component("request.params", _params(request), digests.params, fp.params if fp else None)
    for i, message in enumerate(request.messages):
        theirs = nth(fp.messages if fp else None, i)
        component(f"request.messages[{i}]", _message(message), digests.messages[i], theirs)
    for i, spec in enumerate(request.tools):
        theirs = nth(fp.tools if fp else None, i)
        component(f"request.tools[{i}]", _tool_spec(spec), digests.tools[i], theirs)


def _response_values(b: _Builder, response: LlmResponse) -> None:
    digest = response_digest(response).hex() if b.wants_digests else None
    traced = b.traced_attr(ATTR_RESPONSE_SHA256)
    mark = _mark(digest, traced)

    def add(path: str, value: Any) -> None:
        b.add(path, value, digest=digest, attribute=ATTR_RESPONSE_SHA256, mark=mark, traced=traced)

    add("response.text", response.text)
    if response.tool_calls:
        add("response.tool_calls", [_tool_call(c) for c in response.tool_calls])
    add(
        "response.usage",
        {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    )
    add("response.stop_reason", response.stop_reason)
    add("response.model", response.model)


def _tool_digest(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _sha(bytes(value))
    if canonical_json.check_json_value(value) is not None:
        return None
    try:
        return _sha(canonical_json.dumps(value))
    except ValueError:  # e.g. a lone surrogate (no UTF-8): a tampered recorded result
        return None


def _recorded_kind_differs(traced: TraceEvent | None, value: Any) -> bool:
    """Whether a recorded tool's traced result kind (bytes or JSON) is not ``value``'s.

    The same bytes hash alike as bytes and as canonical JSON, so the digest alone
    cannot verify a recorded result. Plain tools' events do not trace the kind.
    """
    if traced is None or not has_attribute(traced, ATTR_TOOL_RECORDED):
        return False  # not a recorded tool's event (checked first: values are derived often)
    call = ToolCallView.of(traced)
    if not call.recorded:
        return False
    return bool(call.result_is_bytes) != isinstance(value, (bytes, bytearray, memoryview))


@dataclass(frozen=True, slots=True)
class CapturedError:
    """An exception the re-run captured, as text: what the values show of it."""

    type: str
    message: str
    raised_at: str


def freeze_errors(capture: ValueCapture) -> None:
    """Replace each exception in ``capture`` by its text (``CapturedError``), in place.

    ``str()`` of an exception runs agent code (its class's ``__str__``): the engine calls
    this at the end of the re-run, on its thread, so that code runs once, within the time
    limit and the guard, and values derived later (each time they are read) are the same
    on every read. A ``__str__`` that raises shows as a message saying so.
    """
    from beam_agents.context import error_type_name

    values = capture.values
    # Where it was raised is shown for the activation's own failure only: its last event.
    last = max((item.event_index for item in values), default=-1)
    for i, item in enumerate(values):
        error = item.value
        if item.what != CaptureKind.ERROR or not isinstance(error, BaseException):
            continue
        try:
            message = str(error)
        except Exception as exc:
            message = f"(str() of this exception raised {type(exc).__name__})"
        where = agent_frame(error) if item.event_index == last else ""
        values[i] = CapturedValue(
            item.event_index, CaptureKind.ERROR, CapturedError(error_type_name(error), message, where)
        )


def _error_values(b: _Builder, error: BaseException | CapturedError, *, frame: bool) -> None:
    from beam_agents.context import error_type_name

    if not isinstance(error, CapturedError):
        error = CapturedError(error_type_name(error), str(error), agent_frame(error))
    kind = error.type
    traced = b.traced_attr(ATTR_ERROR_TYPE)
    b.add(
        "error.type",
        kind,
        attribute=ATTR_ERROR_TYPE,
        mark=_mark(kind, traced),
        traced=traced,
        digest=kind,
    )
    b.add("error.message", error.message, mark=Mark.UNVERIFIABLE)
    if frame and error.raised_at:
        b.add("error.raised_at", error.raised_at, mark=Mark.UNVERIFIABLE)


def _envelope_value(trigger: AgentEnvelope | Timeout) -> Any:
    if isinstance(trigger, Timeout):
        return {
            "timeout": {
                "deadline_ms": trigger.deadline_ms,
                "awaiting_intent_ids": list(trigger.awaiting_intent_ids),
            }
        }
    body = trigger.WhichOneof("body")
    out: dict[str, Any] = {"envelope_id": trigger.envelope_id}
    if body == "event":
        payload, _ = _json_value(trigger.event.payload)
        out["event"] = {"type": trigger.event.type, "payload": payload}
        if trigger.event.attributes:
            out["event"]["attributes"] = dict(sorted(trigger.event.attributes.items()))
    elif body is not None:
        from google.protobuf.json_format import MessageToDict

        out[body] = MessageToDict(getattr(trigger, body), preserving_proto_field_name=True)
    return out


class ReplayValues(ValueList):
    """Every replayed event's values, in event order, each marked: derived when read.

    No ``Value`` is kept: an event's values are derived from what the re-run
    captured (``ValueCapture``) and the two events each time they are read, so
    the values of a 100,000-event activation, or a 1 MiB model response's text,
    are never held beside the re-run's own objects (issue 14). ``check`` derives
    them all once, so that a value that cannot be decoded is known before anything
    is rendered; deriving is deterministic, so every later read yields the same
    values. ``for_event`` keeps the last few events' values for a renderer that
    reads one event again and again (the TUI's detail pane).
    """

    __slots__ = (
        "_cache",
        "_captured",
        "_counts",
        "_fingerprints",
        "_keys",
        "_lock",
        "_memory",
        "_order",
        "_outputs",
        "_provider",
        "_recent",
        "_replayed",
        "_traced",
        "_trigger",
    )

    RECENT_EVENTS = 64
    """How many events' values ``for_event`` keeps."""

    def __init__(
        self,
        traced: Sequence[TraceEvent] | None,
        replayed: Sequence[TraceEvent],
        *,
        capture: ValueCapture,
        trigger: AgentEnvelope | Timeout,
        provider: str,
        cache: ReplayCache | None,
        outputs: Sequence[BlobDigest],
        memory: BlobDigest | None,
    ) -> None:
        self._traced = traced
        self._replayed = replayed
        self._trigger = trigger
        self._provider = provider
        self._outputs = tuple(outputs)
        self._memory = memory
        self._cache = cache
        self._fingerprints: dict[str, RequestFingerprint | None] = {}
        captured = capture.values
        # The captured values of one event are a run of ``_order`` (stable: capture order).
        keys = [c.event_index for c in captured]
        order: Sequence[int] = range(len(captured))
        if any(a > b for a, b in pairwise(keys)):
            order = array("q", sorted(order, key=keys.__getitem__))
            keys = [keys[i] for i in order]
        self._captured = captured
        self._order = order
        self._keys = array("q", keys)
        self._counts: array[int] | None = None
        self._recent: OrderedDict[int, tuple[Value, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self) -> None:
        """Derive every value once (raising what deriving raises), then let go of the cache.

        The cache is read only for the traced requests' fingerprints, which are kept
        (copied: not a view that would keep the whole cache alive).
        """
        counts = array("q")
        for position in range(len(self._replayed)):
            counts.append(len(self._derive(position)))
        self._counts = counts
        self._cache = None

    def _fingerprint(self, key: str) -> RequestFingerprint | None:
        if key in self._fingerprints:
            return self._fingerprints[key]
        found: RequestFingerprint | None = None
        entry = self._cache.get(key) if self._cache is not None else None
        if entry is not None and entry.fingerprint.key_format:
            found = RequestFingerprint()
            found.CopyFrom(entry.fingerprint)
        self._fingerprints[key] = found
        return found

    def _captured_for(self, index: int) -> list[CapturedValue]:
        lo = bisect_left(self._keys, index)
        hi = bisect_right(self._keys, index, lo)
        if isinstance(self._order, range):  # captured in event order (the usual case)
            return self._captured[lo:hi]
        return [self._captured[self._order[k]] for k in range(lo, hi)]

    def _derive(self, position: int) -> list[Value]:
        return self._build(position, texts_only=False).values

    def _build(
        self,
        position: int,
        *,
        texts_only: bool,
        event: TraceEvent | None = None,
        captured: Sequence[CapturedValue] | None = None,
    ) -> _Builder:
        """The values of the replayed event at ``position`` (``event``: it, already read;
        ``captured``: what was captured for it, already found)."""
        if event is None:
            event = self._replayed[position]
        traced = self._traced
        counterpart = (
            traced[event.index]
            if not texts_only and traced is not None and event.index < len(traced)
            else None
        )
        b = _Builder(counterpart, event, texts_only=texts_only)
        _event_values(
            b,
            event,
            self._captured_for(event.index) if captured is None else captured,
            self._trigger,
            self._provider,
            self._fingerprint,
        )
        if event.kind == TraceEvent.ACTIVATION_END:
            for i, out in enumerate(self._outputs):
                b.add(
                    f"outputs[{i}]",
                    out.payload,
                    digest=out.sha256,
                    attribute=ATTR_OUTPUTS_SHA256,
                    mark=out.mark,
                    traced=out.traced_sha256,
                )
            memory = self._memory
            if memory is not None:
                b.add(
                    "memory",
                    _json_or_text(memory.payload.decode("utf-8", errors="backslashreplace")),
                    digest=memory.sha256,
                    attribute=ATTR_MEMORY_SHA256,
                    mark=memory.mark,
                    traced=memory.traced_sha256,
                )
        return b

    def _position_of(self, index: int) -> int | None:
        replayed = self._replayed
        if 0 <= index < len(replayed) and replayed[index].index == index:
            return index  # the re-run numbers its events 0, 1, … in order
        for position, event in enumerate(replayed):  # pragma: no cover - never numbered so
            if event.index == index:
                return position
        return None

    def for_event(self, index: int) -> tuple[Value, ...]:
        """The values of event ``index`` (the last ``RECENT_EVENTS`` events' are kept)."""
        with self._lock:
            found = self._recent.get(index)
            if found is not None:
                self._recent.move_to_end(index)
                return found
        position = self._position_of(index)
        values = tuple(self._derive(position)) if position is not None else ()
        with self._lock:
            self._recent[index] = values
            if len(self._recent) > self.RECENT_EVENTS:
                self._recent.popitem(last=False)
        return values

    def search_texts(self, index: int) -> list[str]:
        """``ValueList.search_texts``, derived without digests, marks or ``Value`` objects
        (the TUI's ``/`` reads every event's: a third of deriving its values), and not kept."""
        replayed = self._replayed
        event = replayed[index] if 0 <= index < len(replayed) else None
        if event is not None and event.index == index:
            texts = self._build(index, texts_only=True, event=event).texts
        else:  # pragma: no cover - the re-run numbers its events 0, 1, … in order
            position = self._position_of(index)
            if position is None:
                return []
            texts = self._build(position, texts_only=True).texts
        assert texts is not None
        return texts

    def search_rows(self) -> Iterator[tuple[TraceEvent, list[str]]]:
        """Each replayed event, in order, with its ``search_texts`` (one pass: each event is
        read once and its captured values are found without a search)."""
        keys, captured, k = self._keys, self._captured, 0
        in_order = isinstance(self._order, range)
        for position, event in enumerate(self._replayed):
            index = event.index
            if not in_order or (k and keys[k - 1] >= index):
                texts = self._build(position, texts_only=True, event=event).texts
            else:
                while k < len(keys) and keys[k] < index:
                    k += 1
                lo = k
                while k < len(keys) and keys[k] == index:
                    k += 1
                texts = self._build(
                    position, texts_only=True, event=event, captured=captured[lo:k]
                ).texts
            assert texts is not None
            yield event, texts

    def __iter__(self) -> Iterator[Value]:
        for position in range(len(self._replayed)):
            yield from self._derive(position)

    def _event_counts(self) -> array[int]:
        if self._counts is None:
            self.check()
        assert self._counts is not None
        return self._counts

    def __len__(self) -> int:
        return sum(self._event_counts())

    def __bool__(self) -> bool:
        return any(self._event_counts())

    @overload
    def __getitem__(self, i: int) -> Value: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Value, ...]: ...

    def __getitem__(self, i: int | slice) -> Value | tuple[Value, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        size = len(self)
        if i < 0:
            i += size
        if not 0 <= i < size:
            raise IndexError("value index out of range")
        for position, count in enumerate(self._event_counts()):
            if i < count:
                return self._derive(position)[i]
            i -= count
        raise IndexError("value index out of range")  # pragma: no cover - counted above

    def __repr__(self) -> str:
        return f"ReplayValues({len(self._replayed)} events)"


def collect_values(
    traced: Sequence[TraceEvent] | None,
    replayed: Sequence[TraceEvent],
    *,
    capture: ValueCapture,
    trigger: AgentEnvelope | Timeout,
    provider: str,
    cache: ReplayCache,
    outputs: Sequence[BlobDigest],
    memory: BlobDigest | None,
) -> ReplayValues:
    """Every replayed event's values, in event order, each marked (see the module docstring).

    They are derived once here (an error deriving them is raised here, never while a
    report is being written) and again each time they are read: ``ReplayValues``.

    Args:
        traced: The traced events (None for a what-if: every value is unverifiable).
        replayed: The re-run's events.
        capture: What the re-run computed its digests from.
        trigger: The re-run's trigger (its envelope is ACTIVATION_START's value).
        provider: The provider name the cache keys were computed with.
        cache: The pre-state's replay cache (fingerprints of traced requests).
        outputs: The re-run's outputs, already marked (``end_check``).
        memory: The re-run's committed memory, already marked.
    """
    values = ReplayValues(
        traced,
        replayed,
        capture=capture,
        trigger=trigger,
        provider=provider,
        cache=cache,
        outputs=outputs,
        memory=memory,
    )
    values.check()
    return values


def _event_values(
    b: _Builder,
    event: TraceEvent,
    captured: Sequence[CapturedValue],
    trigger: AgentEnvelope | Timeout,
    provider: str,
    fingerprint_of: Callable[[str], RequestFingerprint | None],
) -> None:
    """Add the values of ``event`` to ``b``, from what the re-run captured for it."""
    kind = event.kind
    if kind == TraceEvent.ACTIVATION_START:
        digest = envelope_digest(trigger) if isinstance(trigger, AgentEnvelope) else None
        b.add(
            "envelope",
            _envelope_value(trigger),
            digest=digest,
            attribute=ATTR_ENVELOPE_SHA256 if digest is not None else None,
        )
    for item in captured:
        if item.what == CaptureKind.REQUEST:
            _request_values(b, item.value, provider, fingerprint_of)
        elif item.what == CaptureKind.RESPONSE:
            _response_values(b, item.value)
        elif item.what == CaptureKind.ARGS:
            digest = _tool_digest(item.value) if b.wants_digests else None
            b.add("args", item.value, digest=digest, attribute=ATTR_ARGS_SHA256)
        elif item.what == CaptureKind.RESULT:
            b.add(
                "result",
                item.value,
                digest=_tool_digest(item.value) if b.wants_digests else None,
                attribute=ATTR_RESULT_SHA256,
                mark=Mark.DIFFERS if _recorded_kind_differs(b.traced, item.value) else None,
            )
        elif item.what == CaptureKind.ERROR:
            _error_values(b, item.value, frame=kind == TraceEvent.ACTIVATION_FAILED)
        elif item.what == CaptureKind.INTENT_ARGS:
            staged = IntentStaged.of(event)
            tool = staged.tool_name if staged.tool_name is not None else event.name
            b.add("intent.tool", tool, digest=tool, attribute=ATTR_TOOL_NAME)
            b.add(
                "intent.args",
                _json_or_text(item.value.decode("utf-8", errors="backslashreplace")),
                digest=_sha(item.value),
                attribute=ATTR_ARGS_SHA256,
            )
        elif item.what == CaptureKind.SUSPEND_STATE:
            b.add(
                "suspend.state",
                _json_or_text(item.value.decode("utf-8", errors="backslashreplace")),
                digest=_sha(item.value),
                attribute=ATTR_STATE_SHA256,
            )
