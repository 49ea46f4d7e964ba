"""A key's serial history without Beam: what the DoFn does per element, for fast replay tests.

``KeyHistory`` hands each trigger to ``beam_agents.testing.PipelineKey``, which runs the
pipeline's own per-key step (``beam_agents.key_step``: classify, SEQ, run, commit, HITL
timer, inbox, export), the one ``AgentDoFn`` runs for each element; ``export`` answers
an export request through the same step. The end-to-end tests (``test_end_to_end.py``)
do the same through a real Beam pipeline; these unit tests pin the engine's logic quickly.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beam_agents import Agent, AgentConfig, ToolRegistry
from beam_agents._protos import AgentEnvelope, TraceEvent
from beam_agents.activation import ActivationResult
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import StateCells
from beam_agents.key_step import StepResult
from beam_agents.llm_cache import CachePolicy
from beam_agents.provider import Provider
from beam_agents.replay.options import ReplayOptions
from beam_agents.testing import PipelineKey, export_request_envelope
from beam_agents.tool_cache import ToolCachePolicy
from beam_agents.trace_stream import write_trace_stream

AGENTS = Path(__file__).resolve().parent / "agents"
"""The helper agents' folder: on PYTHONPATH (and the working directory) of the CLI runs."""

T0 = 1_734_000_000_000
KEY = b"customer-42"


@dataclass
class KeyHistory:
    """One key's state cells and SEQ, advanced one trigger at a time, with its whole trace."""

    agent: Agent
    registry: ToolRegistry
    provider: Provider
    key: bytes = KEY
    hitl: HitlPolicy = DEFAULT_HITL_POLICY
    cache_policy: CachePolicy = field(default_factory=CachePolicy)
    tool_cache_policy: ToolCachePolicy = field(default_factory=ToolCachePolicy)
    trace: list[TraceEvent] = field(default_factory=list)
    results: list[ActivationResult] = field(default_factory=list)
    pipeline_key: PipelineKey = field(init=False)

    def __post_init__(self) -> None:
        provider = self.provider
        config = AgentConfig(
            provider_factory=lambda: provider,
            hitl=self.hitl,
            cache=self.cache_policy,
            tool_cache=self.tool_cache_policy,
        )
        self.pipeline_key = PipelineKey(self.agent, self.registry, config, entity_key=self.key)

    @property
    def cells(self) -> StateCells:
        return self.pipeline_key.cells

    @property
    def seq(self) -> int:
        return self.pipeline_key.seq

    def send(self, envelope: AgentEnvelope) -> ActivationResult:
        """Run the activation ``envelope`` starts or resumes (it must start or resume one)."""
        return self._ran(self.pipeline_key.send(envelope), envelope)

    def fire_timeout(self) -> ActivationResult:
        """Fire the HITL timer of the suspended key, as the DoFn does."""
        return self._ran(self.pipeline_key.fire_timer(), "the HITL timer")

    def _ran(self, step: StepResult, what: object) -> ActivationResult:
        if not step.activations:
            raise AssertionError(f"trigger not runnable: {what} gave {step}")
        for result in step.activations:
            self.trace.extend(result.trace)
            self.results.append(result)
        return step.activations[0]

    def export(self, request_id: str = "incident-1", *, at_ms: int = T0 + 10_000_000) -> bytes:
        """The serialized snapshot an export request would get now."""
        request = export_request_envelope(self.key, request_id, time_ms=at_ms)
        [snapshot] = self.pipeline_key.send(request).snapshots
        return snapshot

    def trace_bytes(self, events: Sequence[TraceEvent] | None = None) -> bytes:
        """The trace (or ``events``) as a trace stream."""
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


class Inputs:
    """A replayed key's three inputs as files, and the flags naming them."""

    def __init__(self, directory: Path, history: KeyHistory, event: AgentEnvelope) -> None:
        self.directory = directory
        self.history = history
        self.event = event
        self.snapshot = directory / "snapshot.pb"
        self.traces = directory / "traces"
        self.event_file = directory / "event.pb"
        self.traces.mkdir()
        self.snapshot.write_bytes(history.export())
        (self.traces / "traces-0001.pb").write_bytes(history.trace_bytes())
        self.event_file.write_bytes(event.SerializeToString())

    def flags(self, **overrides: str | None) -> list[str]:
        values: dict[str, str | None] = {
            "--snapshot": str(self.snapshot),
            "--traces": str(self.traces),
            "--event": str(self.event_file),
            "--agent": "replay_agents:AGENT",
            "--registry": "replay_agents:TOOLS",
        }
        values.update({f"--{k}": v for k, v in overrides.items()})
        out: list[str] = []
        for flag, value in values.items():
            if value is not None:
                out += [flag, value]
        return out
