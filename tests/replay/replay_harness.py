"""A key's serial history without Beam: what the DoFn does per element, for fast replay tests.

``KeyHistory`` loads the key's cells, classifies the trigger, takes the next
SEQ, calls ``run_activation`` and keeps the commit's cells, exactly as
``AgentDoFn`` does; ``export`` answers an export request with ``make_snapshot``.
The end-to-end tests (``test_end_to_end.py``) do the same through a real Beam
pipeline; these unit tests pin the engine's logic quickly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beam_agents import Agent, ToolRegistry
from beam_agents._protos import AgentEnvelope, TraceEvent
from beam_agents.activation import (
    ActivationCommit,
    ActivationResult,
    TriggerAction,
    classify_trigger,
    run_activation,
)
from beam_agents.agent import Timeout
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import StateCells, load_key_state, make_snapshot
from beam_agents.llm_cache import CachePolicy
from beam_agents.provider import Provider
from beam_agents.replay.options import ReplayOptions
from beam_agents.tool_cache import ToolCachePolicy
from beam_agents.trace_stream import write_trace_stream

T0 = 1_734_000_000_000
KEY = b"customer-42"


@dataclass
class KeyHistory:
    """One key's state cells and SEQ, advanced one trigger at a time."""

    agent: Agent
    registry: ToolRegistry
    provider: Provider
    key: bytes = KEY
    hitl: HitlPolicy = DEFAULT_HITL_POLICY
    cache_policy: CachePolicy = field(default_factory=CachePolicy)
    tool_cache_policy: ToolCachePolicy = field(default_factory=ToolCachePolicy)
    cells: StateCells = field(default_factory=StateCells)
    seq: int = 0
    trace: list[TraceEvent] = field(default_factory=list)
    results: list[ActivationResult] = field(default_factory=list)

    def send(self, trigger: AgentEnvelope | Timeout) -> ActivationResult:
        """Run the activation ``trigger`` starts (it must start or resume one)."""
        state = load_key_state(self.cells)
        decision = classify_trigger(state, trigger)
        if decision.action not in (TriggerAction.START, TriggerAction.RESUME):
            raise AssertionError(f"trigger not runnable: {decision}")
        now_ms = trigger.deadline_ms if isinstance(trigger, Timeout) else trigger.event_time_ms
        self.seq += 1
        result = run_activation(
            self.agent,
            self.registry,
            self.provider,
            state,
            trigger,
            now_ms=now_ms,
            seq=self.seq,
            entity_key=self.key,
            hitl=self.hitl,
            cache_policy=self.cache_policy,
            tool_cache_policy=self.tool_cache_policy,
            decision=decision,  # as the DoFn does: run what classify_trigger decided
        )
        self.trace.extend(result.trace)
        self.results.append(result)
        if isinstance(result, ActivationCommit):
            self.cells = result.cells
        return result

    def fire_timeout(self) -> ActivationResult:
        """Fire the HITL timer of the suspended key, as the DoFn does."""
        cont = load_key_state(self.cells).continuation
        assert cont is not None, "the key is not suspended"
        return self.send(
            Timeout(
                deadline_ms=cont.deadline_ms, awaiting_intent_ids=tuple(cont.awaiting_intent_ids)
            )
        )

    def export(self, request_id: str = "incident-1", *, at_ms: int = T0 + 10_000_000) -> bytes:
        """The serialized snapshot an export request would get now."""
        snapshot = make_snapshot(
            self.cells,
            entity_key=self.key,
            seq=self.seq,
            snapshot_at_ms=at_ms,
            request_id=request_id,
        )
        return snapshot.SerializeToString(deterministic=True)

    def trace_bytes(self, events: Sequence[TraceEvent] | None = None) -> bytes:
        """The trace (or ``events``) as a trace stream."""
        import io

        out = io.BytesIO()
        write_trace_stream(out, self.trace if events is None else events)
        return out.getvalue()


def options(
    snapshot: bytes | Path,
    traces: bytes | Path,
    *,
    event: AgentEnvelope | bytes | Path | None = None,
    agent: str = "replay_agents:AGENT",
    registry: str = "replay_agents:TOOLS",
    seq: int | None = None,
    hitl: str | None = None,
    what_if: bool = False,
) -> ReplayOptions:
    """ReplayOptions over in-memory inputs (or paths)."""
    event_source: bytes | Path | None
    event_source = event.SerializeToString() if isinstance(event, AgentEnvelope) else event
    return ReplayOptions(
        snapshot=snapshot,
        traces=(traces,),
        event=event_source,
        agent=agent,
        registry=registry,
        seq=seq,
        hitl=hitl,
        what_if=what_if,
    )
