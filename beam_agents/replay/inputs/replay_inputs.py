"""``ReplayInputs``: one replay's inputs as objects, what the engine runs on.

Two callers make one: the command line's adapter (``engine.load_options``: files read,
``module:ATTR`` paths imported) and ``Replayer`` (the objects it was handed, taken as
they are: a message is never serialized to be parsed again).
"""

from __future__ import annotations

from dataclasses import dataclass

from beam_agents._protos import AgentEnvelope, StateSnapshot
from beam_agents.agent import Agent
from beam_agents.hitl import HitlPolicy
from beam_agents.key_state import KeyState
from beam_agents.provider import Provider
from beam_agents.replay.inputs.traces import TraceSource
from beam_agents.replay.naming import Naming
from beam_agents.replay.options import Source
from beam_agents.tools import ToolRegistry

__all__ = ["LoadedFork", "ReplayInputs"]


@dataclass(frozen=True, kw_only=True)
class LoadedFork:
    """A fork's inputs, read and imported (``options.ForkOptions``): what the call at ``at``
    receives, before the traced event's kind says how to read it."""

    at: int
    value: str
    """The value as text (given as UTF-8)."""
    value_source: str
    """Where it came from, for the report (``--set``, ``--set @FILE``)."""
    provider: Provider | None = None
    """What answers the continuation's uncached model calls (None: nothing does)."""
    provider_path: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplayInputs:
    """Everything one replay reads, loaded and checked."""

    snapshot: StateSnapshot
    """The snapshot as parsed (the engine only reads it)."""
    state: KeyState
    """Its state at the current layouts (the re-run works on a copy)."""
    blob_versions: dict[str, int]
    """The version each blob was stored at."""
    event: AgentEnvelope | None
    """The triggering envelope given; None for a HITL timeout, or when ``events`` is."""
    events: tuple[Source, ...]
    """Topic dumps to pick the triggering envelope from (``--events``)."""
    traces: tuple[TraceSource, ...]
    agent: Agent
    registry: ToolRegistry
    hitl: HitlPolicy
    seq: int | None
    """The traced activation to replay; None: the key's highest traced one."""
    what_if: bool
    time_limit: float | None
    naming: Naming
    """How the caller named the inputs: the words refusals use for them."""
    fork: LoadedFork | None = None
    """Fork the activation (``--fork``) instead of reproducing it."""
    process_ends: bool = False
    """Run what agent code runs at interpreter exit before the judgement (the process ends
    after this replay: ``ReplayOptions.process_ends``)."""
    divergence_detail: bool = True
    """Render the first divergence's DeepDiff detail (``ReplayOptions.divergence_detail``)."""
