"""The agent context ``ctx``: everything agent code may touch during one activation.

Every method records a trace event; nothing here reads the wall clock or an
unseeded random source, so the same inputs give the same events (invariant 4).
The context works on private copies of the key's state (memory, cache, staged
intents); ``run_activation`` commits them only if the activation succeeds.
"""

from __future__ import annotations

import hashlib
import json
import random as _random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beam_agents import _running, canonical_json
from beam_agents import telemetry as _telemetry
from beam_agents import trace_events as te
from beam_agents._protos import LlmRequest, LlmResponse, RequestFingerprint, ToolIntent, TraceEvent
from beam_agents.cache_key import keyed_request_digests
from beam_agents.capture import CaptureKind, ValueCapture
from beam_agents.errors import (
    AgentCodeError,
    RecordedResultError,
    SideEffectRefusedError,
    ToolNotRecordedError,
)
from beam_agents.event_log import EventLog
from beam_agents.fork_answer import ForkAnswer
from beam_agents.hitl import HitlPolicy
from beam_agents.llm_cache import CachePolicy, LookupStatus, ReplayCache, response_digest
from beam_agents.memory import JsonMemory
from beam_agents.memory_writes import MemoryWrites
from beam_agents.provider import Provider
from beam_agents.tool_cache import (
    DEFAULT_TOOL_CACHE_POLICY,
    ToolCache,
    ToolCachePolicy,
    arg_digests,
    encode_result,
    tool_cache_key,
)
from beam_agents.tools import Tool, ToolRegistry


@dataclass(frozen=True)
class ProviderFailure:
    """A model call that the provider did not answer (in replay: a cache miss)."""

    event_index: int
    """Index of the LLM_CALL trace event recording the attempt."""
    cache_key: str
    model: str
    lookup_status: LookupStatus
    """Why the cache could not serve it (ABSENT, EXPIRED, DIGEST_ONLY, MINTED_LATER)."""
    fingerprint: RequestFingerprint
    error: BaseException


@dataclass(frozen=True)
class ToolMiss:
    """Replay: a recorded tool call the snapshot's tool cache could not serve."""

    event_index: int
    """Index of the TOOL_CALL trace event recording the attempt."""
    tool: str
    args_sha256: str
    lookup_status: LookupStatus
    """Why it could not be served (ABSENT, EXPIRED, DIGEST_ONLY, MINTED_LATER, AMBIGUOUS)."""
    arg_digests: dict[str, bytes]
    """The call's per-argument digests, to find the nearest recorded call."""


def derive_intent_id(entity_key: bytes, seq: int, ordinal: int) -> str:
    """The id of the ``ordinal``-th intent staged by activation ``(entity_key, seq)``."""
    material = b"beam-agents/intent\x00" + entity_key + b"\x00" + f"{seq}:{ordinal}".encode()
    return "in-" + hashlib.sha256(material).hexdigest()[:24]


def seeded_random(entity_key: bytes, seq: int) -> _random.Random:
    """The activation's random source, seeded from ``(entity_key, seq)``."""
    material = b"beam-agents/random\x00" + entity_key + b"\x00" + str(seq).encode()
    return _random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))


def digest_value(value: Any, what: str) -> str:
    """sha256 hex of bytes, or of the canonical JSON of a JSON value; refuses anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(value)).hexdigest()
    why = canonical_json.check_json_value(value)
    if why is not None:
        raise AgentCodeError(f"{what}: {why} (tools take and return JSON values or bytes)")
    return hashlib.sha256(canonical_json.dumps(value)).hexdigest()


class AgentContext:
    """What agent code receives as ``ctx``."""

    def __init__(
        self,
        *,
        entity_key: bytes,
        seq: int,
        now_ms: int,
        memory: dict[str, Any],
        cache: ReplayCache,
        provider: Provider,
        registry: ToolRegistry,
        hitl: HitlPolicy,
        cache_policy: CachePolicy,
        cache_visible_through_seq: int | None = None,
        tool_cache: ToolCache | None = None,
        tool_cache_policy: ToolCachePolicy = DEFAULT_TOOL_CACHE_POLICY,
        serve_recorded_tools: bool = False,
        capture: ValueCapture | None = None,
        compact_trace: bool = False,
        fork: ForkAnswer | None = None,
    ) -> None:
        self.entity_key = entity_key
        """The key this activation runs for."""
        self.seq = seq
        """This activation's SEQ."""
        self.now_ms = now_ms
        """The activation clock: the trigger's event time. Use it instead of the wall clock."""
        self._memory = (
            JsonMemory(memory)
            if capture is None
            else capture.memory(memory, position=lambda: len(self._events))
        )
        self.memory: JsonMemory = self._memory
        """Working memory that survives activations (JSON values only)."""
        self._capture = capture
        # Seeding a Random costs more than many activations' agent code: it is seeded on
        # first use, from the (entity_key, seq) the context was built with.
        self._random: _random.Random | None = None
        self._random_seed_of = (entity_key, seq)
        # Every event of the activation shares its trace id and root span id.
        self._ids = te.ActivationIds(entity_key, seq)
        self._cache = cache
        self._provider = provider
        self._registry = registry
        self._hitl = hitl
        self._cache_policy = cache_policy
        self._visible_through_seq = cache_visible_through_seq
        self._tool_cache = tool_cache if tool_cache is not None else ToolCache()
        self._tool_cache_policy = tool_cache_policy
        self._serve_recorded = serve_recorded_tools
        # Replay's fork: the one call answered with the operator's value (``fork_answer``).
        self._fork = fork
        # Replay holds a huge activation's trace as bytes (``run_activation``'s compact_trace).
        self._events: list[TraceEvent] | EventLog = EventLog() if compact_trace else []
        self._call_ordinal = 0
        self.staged_intents: list[ToolIntent] = []
        self.provider_failures: list[ProviderFailure] = []
        self.tool_misses: list[ToolMiss] = []
        """Replay: recorded tool calls the snapshot could not serve (even if agent code caught it)."""
        self.served_tool_events: list[int] = []
        """Replay: indices of the TOOL_CALL events whose result the tool cache served."""
        self.fatal_error: RecordedResultError | None = None
        """A recorded result the tool cache cannot keep: fails the activation even if caught."""

    def memory_write_set(self, before: dict[str, Any]) -> MemoryWrites:
        """What agent code wrote to memory, against ``before`` (the memory it started from).

        Read from the memory this context was built with, whatever agent code later
        assigned to ``ctx.memory``: that one is what the activation commits.
        """
        return self._memory.write_set(before)

    @property
    def random(self) -> _random.Random:
        """A random source seeded from (entity_key, seq): the only randomness replay reproduces."""
        if self._random is None:
            self._random = seeded_random(*self._random_seed_of)
        return self._random

    @random.setter
    def random(self, value: _random.Random) -> None:
        self._random = value

    # -- trace --------------------------------------------------------------------------------

    def record(self, kind: int, name: str, attributes: dict[str, te.AttrValue]) -> int:
        """Append a trace event stamped with the activation clock; returns its index."""
        index = len(self._events)
        self._events.append(
            te.make_event(
                entity_key=self.entity_key,
                seq=self.seq,
                index=index,
                kind=kind,
                name=name,
                now_ms=self.now_ms,
                attributes=attributes,
                ids=self._ids,
            )
        )
        # The wall time goes to the side channel (a measured pipeline activation only),
        # never into the event: the trace holds what a re-run reproduces.
        _telemetry.event_recorded(index)
        return index

    @property
    def events(self) -> Sequence[TraceEvent]:
        return self._events

    # -- model calls --------------------------------------------------------------------------

    def complete(self, request: LlmRequest) -> LlmResponse:
        """Answer a model request, from the replay cache if it holds it, else from the provider."""
        if not isinstance(request, LlmRequest):
            raise AgentCodeError(
                f"ctx.complete expects an LlmRequest, got {type(request).__name__}"
            )
        _telemetry.span_opens()
        provider_name = self._provider.name
        # The fingerprint message is built only where it is kept (an insert, a failure).
        digests, key = keyed_request_digests(request, provider=provider_name)
        ordinal = self._call_ordinal
        self._call_ordinal += 1
        base: dict[str, te.AttrValue] = {
            te.ATTR_CACHE_KEY: key,
            te.ATTR_PROVIDER: provider_name,
            te.ATTR_REQUEST_MODEL: request.model,
            te.ATTR_CALL_ORDINAL: ordinal,
        }
        fork = self._fork
        if fork is not None and fork.answers_model_call(len(self._events)):
            # The fork's answer: neither a cache hit nor billed, and marked as the fork's own
            # so that no report calls it a hit (nothing came from the cache).
            served = fork.response(request)
            attrs = {**base, **_response_attrs(served, hit=False)}
            attrs[te.ATTR_BILLED] = False
            attrs[te.ATTR_FORK_ANSWER] = True
            index = self.record(TraceEvent.LLM_CALL, request.model, attrs)
            _telemetry.llm_call_details(index, request, served)
            if self._capture is not None:
                self._capture.add(index, CaptureKind.REQUEST, _frozen_copy(request))
                self._capture.add(index, CaptureKind.RESPONSE, served)
            handed = LlmResponse()
            handed.CopyFrom(served)  # agent code may change its copy; the capture keeps this one
            return handed
        found = self._cache.lookup(
            key, now_ms=self.now_ms, visible_through_seq=self._visible_through_seq
        )
        if found.status is LookupStatus.HIT and found.response is not None:
            response = LlmResponse()
            response.CopyFrom(found.response)
            index = self.record(
                TraceEvent.LLM_CALL, request.model, {**base, **_response_attrs(response, hit=True)}
            )
            _telemetry.llm_call_details(index, request, response)
            if self._capture is not None:
                self._capture.add(index, CaptureKind.REQUEST, _frozen_copy(request))
                # The cache's own response, which agent code never gets (it gets the copy
                # above) and nothing changes: copying it again would hold every response
                # served twice (issue 14: a 64 x 1 MiB cache).
                self._capture.add(index, CaptureKind.RESPONSE, found.response)
            return response
        try:
            response = self._provider.complete(request)
            if not isinstance(response, LlmResponse):
                raise AgentCodeError(
                    f"provider {provider_name!r} returned a {type(response).__name__}, "
                    "not an LlmResponse"
                )
        except Exception as exc:
            index = self.record(
                TraceEvent.LLM_CALL,
                request.model,
                {
                    **base,
                    te.ATTR_CACHE_HIT: False,
                    te.ATTR_BILLED: False,
                    te.ATTR_ERROR_TYPE: error_type_name(exc),
                },
            )
            _telemetry.llm_call_details(index, request, None)
            self.provider_failures.append(
                ProviderFailure(index, key, request.model, found.status, digests.fingerprint(), exc)
            )
            if self._capture is not None:
                self._capture.add(index, CaptureKind.REQUEST, _frozen_copy(request))
            raise
        # A staged insert: it reaches the key's state only if the activation commits.
        self._cache.insert(
            key,
            digests.fingerprint(),
            response,
            model=request.model,
            provider=provider_name,
            now_ms=self.now_ms,
            seq=self.seq,
            policy=self._cache_policy,
        )
        index = self.record(
            TraceEvent.LLM_CALL, request.model, {**base, **_response_attrs(response, hit=False)}
        )
        _telemetry.llm_call_details(index, request, response)
        if self._capture is not None:
            self._capture.add(index, CaptureKind.REQUEST, _frozen_copy(request))
            self._capture.add(index, CaptureKind.RESPONSE, _frozen_copy(response))
        return response

    # -- tools --------------------------------------------------------------------------------

    def call(self, tool: str, /, **args: Any) -> Any:
        """Run a read-only tool now and return its result (JSON value or bytes)."""
        _telemetry.span_opens()
        declared = self._registry.get(tool)
        if declared.recorded:
            return self._call_recorded(declared, args)
        attrs: dict[str, te.AttrValue] = {te.ATTR_TOOL_NAME: tool}
        try:
            if declared.side_effect:
                raise SideEffectRefusedError(tool)
            attrs[te.ATTR_ARGS_SHA256] = digest_value(args, f"arguments of tool {tool!r}")
            fork = self._fork
            if fork is not None and fork.answers_tool_call(len(self._events)):
                result = _frozen_json(fork.result)  # the fork's answer: the tool does not run
                attrs[te.ATTR_FORK_ANSWER] = True
            else:
                token = _running.TOOL.set(tool)  # replay's guard names the tool from this
                try:
                    result = declared.fn(**args)
                finally:
                    _running.TOOL.reset(token)
            attrs[te.ATTR_RESULT_SHA256] = digest_value(result, f"result of tool {tool!r}")
        except Exception as exc:
            attrs[te.ATTR_ERROR_TYPE] = error_type_name(exc)
            index = self.record(TraceEvent.TOOL_CALL, tool, attrs)
            if self._capture is not None:
                if te.ATTR_ARGS_SHA256 in attrs:
                    self._capture.add(index, CaptureKind.ARGS, _frozen_json(args))
                self._capture.add(index, CaptureKind.ERROR, exc)
            raise
        index = self.record(TraceEvent.TOOL_CALL, tool, attrs)
        if self._capture is not None:
            self._capture.add(index, CaptureKind.ARGS, _frozen_json(args))
            self._capture.add(index, CaptureKind.RESULT, _frozen_json(result))
        return result

    def _call_recorded(self, declared: Tool, args: dict[str, Any]) -> Any:
        """A ``recorded=True`` tool: run and record it (pipeline), or serve it (replay).

        The value returned is the recorded one decoded (canonical JSON round trip, or
        the bytes) in both, so agent code sees the same value in the pipeline and in
        replay (sorted keys, lists for tuples).
        """
        tool = declared.name
        attrs: dict[str, te.AttrValue] = {te.ATTR_TOOL_NAME: tool, te.ATTR_TOOL_RECORDED: True}
        args_sha256 = ""
        try:
            args_sha256 = digest_value(args, f"arguments of tool {tool!r}")
            attrs[te.ATTR_ARGS_SHA256] = args_sha256
            fork = self._fork
            if fork is not None and fork.answers_tool_call(len(self._events)):
                # The fork's answer, as a recorded result is handed over (canonical JSON).
                data, is_bytes = canonical_json.dumps(fork.result), False
                attrs[te.ATTR_RESULT_SHA256] = hashlib.sha256(data).hexdigest()
                attrs[te.ATTR_FORK_ANSWER] = True
            elif self._serve_recorded:
                found = self._tool_cache.lookup(
                    tool_cache_key(tool, args_sha256),
                    now_ms=self.now_ms,
                    visible_through_seq=self._visible_through_seq,
                )
                if found.status is not LookupStatus.HIT or found.entry is None:
                    self.tool_misses.append(
                        ToolMiss(
                            len(self._events), tool, args_sha256, found.status, arg_digests(args)
                        )
                    )
                    raise ToolNotRecordedError(tool, args_sha256, found.status.value)
                data, is_bytes = found.entry.result, found.entry.result_is_bytes
                # The digest of the bytes served, not the stored digest: a tampered entry
                # must show up as a different result, never as the recorded one.
                attrs[te.ATTR_RESULT_SHA256] = hashlib.sha256(data).hexdigest()
                self.served_tool_events.append(len(self._events))
            else:
                token = _running.TOOL.set(tool)
                try:
                    data, is_bytes = encode_result(
                        tool, declared.fn(**args), self._tool_cache_policy
                    )
                except RecordedResultError as exc:
                    self.fatal_error = exc
                    raise
                finally:
                    _running.TOOL.reset(token)
                entry = self._tool_cache.record(
                    tool=tool,
                    args_sha256=args_sha256,
                    digests=arg_digests(args),
                    result=data,
                    result_is_bytes=is_bytes,
                    now_ms=self.now_ms,
                    seq=self.seq,
                    policy=self._tool_cache_policy,
                )
                attrs[te.ATTR_RESULT_SHA256] = entry.result_sha256.hex()
                if entry.digest_only:
                    attrs[te.ATTR_TOOL_DIGEST_ONLY] = True
            if is_bytes:
                # The kind is part of the recorded result's identity: the same bytes decode
                # to a JSON value or are handed over as bytes, and only this tells them apart.
                attrs[te.ATTR_TOOL_RESULT_IS_BYTES] = True
            result = bytes(data) if is_bytes else canonical_json.loads(data)
        except Exception as exc:
            attrs[te.ATTR_ERROR_TYPE] = error_type_name(exc)
            index = self.record(TraceEvent.TOOL_CALL, tool, attrs)
            if self._capture is not None:
                if te.ATTR_ARGS_SHA256 in attrs:
                    self._capture.add(index, CaptureKind.ARGS, _frozen_json(args))
                self._capture.add(index, CaptureKind.ERROR, exc)
            raise
        index = self.record(TraceEvent.TOOL_CALL, tool, attrs)
        if self._capture is not None:
            self._capture.add(index, CaptureKind.ARGS, _frozen_json(args))
            self._capture.add(index, CaptureKind.RESULT, _frozen_json(result))
        return result

    def act(self, tool: str, /, **args: Any) -> str:
        """Stage an intent for a side-effecting tool; returns its intent id. Nothing runs now."""
        declared = self._registry.get(tool)
        if not declared.side_effect:
            raise AgentCodeError(
                f"tool {tool!r} is read-only; run it with ctx.call({tool!r}, ...) "
                "(ctx.act stages side_effect=True tools for an executor)"
            )
        why = canonical_json.check_json_value(args)
        if why is not None:
            raise AgentCodeError(f"arguments of tool {tool!r}: {why}")
        args_json = canonical_json.dumps(args)
        requires_approval = declared.requires_approval or tool in self._hitl.approval_required_tools
        intent = ToolIntent(
            intent_id=derive_intent_id(self.entity_key, self.seq, len(self.staged_intents)),
            entity_key=self.entity_key,
            seq=self.seq,
            tool=tool,
            args=args_json,
            created_ms=self.now_ms,
            expires_at_ms=self.now_ms + self._hitl.intent_ttl_ms,
            requires_approval=requires_approval,
            approval_channel=self._hitl.approval_channel if requires_approval else "",
        )
        self.staged_intents.append(intent)
        index = self.record(
            TraceEvent.INTENT_STAGED,
            tool,
            {
                te.ATTR_INTENT_ID: intent.intent_id,
                te.ATTR_TOOL_NAME: tool,
                te.ATTR_ARGS_SHA256: hashlib.sha256(args_json).hexdigest(),
                te.ATTR_REQUIRES_APPROVAL: requires_approval,
                te.ATTR_APPROVAL_CHANNEL: intent.approval_channel,
                te.ATTR_EXPIRES_AT_MS: intent.expires_at_ms,
            },
        )
        if self._capture is not None:
            self._capture.add(index, CaptureKind.INTENT_ARGS, args_json)
        return intent.intent_id


_FREEZE_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _frozen_json(value: Any) -> Any:
    """A copy of a tool's arguments or result (a JSON value or bytes, as ``digest_value``
    checked), so agent code editing the object it was handed after the call cannot change
    what replay shows and verifies against the traced digest."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    try:
        return json.loads(_FREEZE_ENCODER.encode(value))
    except (ValueError, TypeError, RecursionError):  # pragma: no cover - digested as JSON
        return value


def _frozen_copy(message: Any) -> Any:
    """A copy of a request or response, so later mutation by agent code cannot change it."""
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def _response_attrs(response: LlmResponse, *, hit: bool) -> dict[str, te.AttrValue]:
    return {
        te.ATTR_CACHE_HIT: hit,
        te.ATTR_BILLED: not hit,
        te.ATTR_RESPONSE_SHA256: response_digest(response).hex(),
        te.ATTR_RESPONSE_MODEL: response.model,
        te.ATTR_USAGE_INPUT: response.usage.input_tokens,
        te.ATTR_USAGE_OUTPUT: response.usage.output_tokens,
        te.ATTR_STOP_REASON: response.stop_reason,
    }


def error_type_name(exc: BaseException) -> str:
    """What ``error.type`` holds for ``exc``: its class's qualified name, with its module
    unless it is a builtin (``ValueError``, ``myapp.errors.OrderNotFound``)."""
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
