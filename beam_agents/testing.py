"""Test helpers for agent authors: a scripted model provider, envelope builders, fixture tools.

    provider = ScriptedProvider(lambda req: "It ships tomorrow.")
    env = event_envelope(b"customer-42", "message", b"where is my order?", time_ms=1_734_000_000_000)
    REPLAY_TOOLS = fixture_registry(TOOLS, read_room=lambda room: {"room": room, "free": 3})

These are the helpers beam-agents' own tests use; they are deterministic and offline.
``run_activation`` (what the DoFn and replay both call) and ``KeyState`` (a key's
state; ``KeyState()`` is a new key's) are re-exported, for tests of one activation.
``PipelineKey`` runs a key's whole history the way ``RunAgent`` does (SEQ, commit,
HITL and retry timers, inbox, hold, exports), through the pipeline's own per-key step,
without Beam.
docs/agent-api.md lists every helper with its signature.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._protos import (
    AgentEnvelope,
    Approval,
    ChatMessage,
    Event,
    KeyHold,
    LlmRequest,
    LlmResponse,
    ToolResult,
    Usage,
)
from beam_agents.activation import run_activation
from beam_agents.agent import Agent
from beam_agents.agent_build import agent_build
from beam_agents.blobs import load_hold
from beam_agents.config import AgentConfig
from beam_agents.errors import AgentDefinitionError
from beam_agents.key_state import KeyState, StateCells, load_key_state
from beam_agents.key_step import KeyStep, MemoryKeyStore, StepResult, activation_runner
from beam_agents.provider import Provider
from beam_agents.tools import ToolRegistry

__all__ = [
    "KeyState",
    "PipelineKey",
    "ScriptedProvider",
    "StepResult",
    "approval_envelope",
    "chat_request",
    "event_envelope",
    "export_request_envelope",
    "fixture_registry",
    "run_activation",
    "tool_result_envelope",
]

Respond = Callable[[LlmRequest], LlmResponse | str]


class ScriptedProvider:
    """A provider answering from a function of the request: deterministic and offline.

    ``respond`` returns an ``LlmResponse`` or a string (wrapped as a response whose
    usage counts characters). ``requests`` records every request it was asked.
    """

    def __init__(self, respond: Respond, *, name: str = "scripted") -> None:
        self.name = name
        self._respond = respond
        self.requests: list[LlmRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    def complete(self, request: LlmRequest) -> LlmResponse:
        self.requests.append(request)
        answer = self._respond(request)
        if isinstance(answer, LlmResponse):
            return answer
        prompt_chars = sum(len(m.content) for m in request.messages)
        return LlmResponse(
            text=answer,
            stop_reason="end_turn",
            model=request.model,
            usage=Usage(input_tokens=prompt_chars, output_tokens=len(answer)),
        )


def chat_request(model: str, *messages: tuple[str, str], **params: float | int) -> LlmRequest:
    """An ``LlmRequest`` from ``(role, content)`` pairs, e.g. ``chat_request("m", ("user", "hi"))``."""
    request = LlmRequest(
        model=model, messages=[ChatMessage(role=r, content=c) for r, c in messages]
    )
    for name, value in params.items():
        setattr(request.params, name, value)
    return request


def _default_id(prefix: str, entity_key: bytes, time_ms: int, extra: bytes = b"") -> str:
    digest = hashlib.sha256(
        entity_key + b"\x00" + str(time_ms).encode() + b"\x00" + extra
    ).hexdigest()
    return f"{prefix}-{digest[:16]}"


def event_envelope(
    entity_key: bytes,
    type: str,
    payload: bytes = b"",
    *,
    time_ms: int,
    envelope_id: str | None = None,
    attributes: Mapping[str, str] | None = None,
) -> AgentEnvelope:
    """An envelope carrying an ``Event`` (starts an activation)."""
    return AgentEnvelope(
        entity_key=entity_key,
        event_time_ms=time_ms,
        envelope_id=envelope_id or _default_id("ev", entity_key, time_ms, type.encode() + payload),
        event=Event(type=type, payload=payload, attributes=dict(attributes or {})),
    )


def tool_result_envelope(
    entity_key: bytes,
    intent_id: str,
    *,
    time_ms: int,
    status: int = ToolResult.OK,
    payload: bytes = b"",
    error: str = "",
    envelope_id: str | None = None,
) -> AgentEnvelope:
    """An envelope carrying an executor's ``ToolResult`` for ``intent_id``."""
    return AgentEnvelope(
        entity_key=entity_key,
        event_time_ms=time_ms,
        envelope_id=envelope_id or _default_id("tr", entity_key, time_ms, intent_id.encode()),
        tool_result=ToolResult(intent_id=intent_id, status=status, payload=payload, error=error),  # type: ignore[arg-type]
    )


def approval_envelope(
    entity_key: bytes,
    intent_id: str,
    *,
    approved: bool,
    time_ms: int,
    approver: str = "",
    reason: str = "",
    envelope_id: str | None = None,
) -> AgentEnvelope:
    """An envelope carrying a human's ``Approval`` decision on ``intent_id``."""
    return AgentEnvelope(
        entity_key=entity_key,
        event_time_ms=time_ms,
        envelope_id=envelope_id or _default_id("ap", entity_key, time_ms, intent_id.encode()),
        approval=Approval(intent_id=intent_id, approved=approved, approver=approver, reason=reason),
    )


def export_request_envelope(
    entity_key: bytes, request_id: str, *, time_ms: int, envelope_id: str | None = None
) -> AgentEnvelope:
    """An envelope asking the pipeline for a ``StateSnapshot`` of ``entity_key``."""
    return AgentEnvelope(
        entity_key=entity_key,
        event_time_ms=time_ms,
        envelope_id=envelope_id or _default_id("ex", entity_key, time_ms, request_id.encode()),
        export_request=AgentEnvelope.StateExportRequest(request_id=request_id),
    )


def fixture_registry(registry: ToolRegistry, /, **fixtures: Callable[..., Any]) -> ToolRegistry:
    """A copy of ``registry`` whose named read-only tools run the given functions instead.

    For replaying an agent whose read-only tool is *not* recorded and reads a service:
    pass ``--registry myapp.replay_fixtures:TOOLS`` with ``TOOLS = fixture_registry(
    app.TOOLS, read_room=fake_read_room)``. Every other tool, and every declaration
    (name, ``recorded``, ``side_effect``, ``requires_approval``, description), is kept.

    The trace holds each tool call's ``result_sha256``, so the fixture is checked, not
    trusted: the replay reproduces only if the fixture returns exactly the production
    result (the same JSON value, or the same bytes), and diverges at that TOOL_CALL
    otherwise.

    Args:
        registry: The production registry.
        **fixtures: Tool name -> the function to run in its place (same arguments).

    Raises:
        AgentDefinitionError: A name the registry does not hold, a side-effect tool
            (the pipeline and replay never run those), or a fixture that is not callable.
    """
    for name, fixture in fixtures.items():
        if name not in registry:
            raise AgentDefinitionError(
                f"fixture_registry: no tool named {name!r} in the registry "
                f"(it has: {', '.join(registry.names()) or 'none'})"
            )
        if registry.get(name).side_effect:
            raise AgentDefinitionError(
                f"fixture_registry: tool {name!r} is side_effect=True; neither the pipeline nor "
                "replay ever runs it (ctx.act only stages an intent), so a fixture would never run"
            )
        if not callable(fixture):
            raise AgentDefinitionError(
                f"fixture_registry: the fixture for {name!r} must be a function, got {fixture!r}"
            )
    return ToolRegistry(
        [
            dataclasses.replace(declared, fn=fixtures[declared.name])
            if declared.name in fixtures
            else declared
            for declared in registry
        ]
    )


class PipelineKey:
    """One key as ``RunAgent`` holds it: its SEQ, state cells, inbox, hold and two timers.

    ``send(envelope)``, ``fire_timer()``, ``fire_retry()`` and ``advance_to(ms)`` hand it
    one input at a time to the pipeline's own per-key step (``beam_agents.key_step``,
    what ``AgentDoFn`` runs for each element and timer firing), without Beam, and return
    the ``StepResult``:
    what the pipeline would emit (``.outputs``, ``.intents``, ``.approvals``,
    ``.snapshots``, ``.errors``; all of it in order in ``.emitted``) and the
    activations that ran (``.activations``: ``ActivationCommit``/``ActivationFailure``). The provider is built
    once from ``config.provider_factory``, as a DoFn instance builds it in ``setup``.
    """

    def __init__(
        self, agent: Agent, registry: ToolRegistry, config: AgentConfig, *, entity_key: bytes
    ) -> None:
        if not isinstance(entity_key, bytes) or not entity_key:
            raise TypeError(
                f"PipelineKey entity_key= must be the key as non-empty bytes (as in "
                f"AgentEnvelope.entity_key, e.g. b'customer-42'), got {entity_key!r}"
            )
        self.entity_key = entity_key
        self.provider: Provider = config.provider_factory()
        self.store = MemoryKeyStore()
        """The key's SEQ, cells and inbox (``MemoryKeyStore``: plain attributes)."""
        self.timer_ms: int | None = None
        """Where the key's HITL timer is set (None: not set)."""
        self.retry_timer_ms: int | None = None
        """Where the key's retry timer is set: its held trigger's next attempt (None: not set)."""
        activate = activation_runner(
            agent,
            registry,
            self.provider,
            hitl=config.hitl,
            cache_policy=config.cache,
            tool_cache_policy=config.tool_cache,
        )
        self._step = KeyStep(
            activate,
            inbox_limit=config.inbox_limit,
            retry=config.retry,
            agent_build=agent_build(agent),
        )

    @property
    def seq(self) -> int:
        """The last activation's seq (0 before the first)."""
        return self.store.seq

    @property
    def cells(self) -> StateCells:
        """The committed state cells, as the DoFn's state cells hold them."""
        return self.store.cells

    @property
    def state(self) -> KeyState:
        """The committed state, loaded."""
        return load_key_state(self.store.cells)

    @property
    def inbox(self) -> list[bytes]:
        """Raw envelopes waiting behind the key's suspension or its hold, in arrival order."""
        return list(self.store.inbox)

    @property
    def hold(self) -> KeyHold | None:
        """The trigger the key holds for a retry (its attempts, its next due time), or None."""
        return load_hold(self.store.hold)[0]

    def send(self, envelope: AgentEnvelope | bytes) -> StepResult:
        """Hand the key one envelope (or its bytes, as read from a source).

        Bytes that do not parse are the step's ``malformed_envelope`` error record, as
        in the pipeline; an envelope (parsed or as bytes) for another key is refused
        with ``ValueError``, since ``RunAgent`` would never route it here.
        """
        if isinstance(envelope, AgentEnvelope):
            routed: AgentEnvelope | None = envelope
            raw = envelope.SerializeToString()
        elif isinstance(envelope, bytes | bytearray | memoryview):
            raw = bytes(envelope)
            try:
                routed = AgentEnvelope.FromString(raw)
            except DecodeError:
                routed = None  # the step refuses it as RunAgent's errors output would
        else:
            raise TypeError(
                "PipelineKey.send takes an AgentEnvelope (event_envelope(...) and the other "
                f"builders here) or its serialized bytes, got {type(envelope).__name__}: "
                f"{envelope!r:.80}"
            )
        if routed is not None and not routed.entity_key:
            raise ValueError(
                f"PipelineKey for {self.entity_key!r} was sent an envelope with an empty "
                "entity_key; RunAgent refuses it on .errors (it cannot be routed to a key)"
            )
        if routed is not None and routed.entity_key != self.entity_key:
            raise ValueError(
                f"PipelineKey for {self.entity_key!r} was sent an envelope for "
                f"{routed.entity_key!r}; RunAgent would route it to that key: "
                "build one PipelineKey per key"
            )
        return self._apply(self._step.envelope(self.entity_key, raw, self.store))

    def fire_timer(self) -> StepResult:
        """Fire the HITL timer where it is set, as the watermark passing it would."""
        fired_ms = self.timer_ms
        if fired_ms is None:
            raise ValueError(
                f"PipelineKey {self.entity_key!r} has no HITL timer set (only a commit that "
                "suspends the key sets one, and firing spends it)"
            )
        self.timer_ms = None
        return self._apply(self._step.deadline(self.entity_key, fired_ms, self.store))

    def fire_retry(self) -> StepResult:
        """Fire the retry timer where it is set: the held trigger's next attempt runs."""
        fired_ms = self.retry_timer_ms
        if fired_ms is None:
            raise ValueError(
                f"PipelineKey {self.entity_key!r} has no retry timer set (only an activation "
                "that fails transiently with attempts left sets one, and firing spends it)"
            )
        self.retry_timer_ms = None
        return self._apply(self._step.retry_due(self.entity_key, fired_ms, self.store))

    def advance_to(self, watermark_ms: int) -> list[StepResult]:
        """Move the watermark to ``watermark_ms``: fire every timer due by then, earliest
        first (a retry before a HITL deadline at the same time), as the runner would."""
        fired: list[StepResult] = []
        while True:
            due = [
                (at, order, fire)
                for at, order, fire in (
                    (self.retry_timer_ms, 0, self.fire_retry),
                    (self.timer_ms, 1, self.fire_timer),
                )
                if at is not None and at <= watermark_ms
            ]
            if not due:
                return fired
            fired.append(min(due, key=lambda d: (d[0], d[1]))[2]())

    def _apply(self, result: StepResult) -> StepResult:
        if result.timer is not None:
            self.timer_ms = result.timer.at_ms
        if result.retry_timer is not None:
            self.retry_timer_ms = result.retry_timer.at_ms
        return result
