"""beam-agents: LLM agents inside Apache Beam pipelines, with exact offline replay.

The public surface is ``__all__`` (pinned by tests/test_exported_members.py): the
pipeline's API, and what agent code touches (``AgentContext`` is ``ctx``; ``Event``,
``ToolResult``, ``Approval`` and ``Timeout`` are what ``start``/``resume`` receive; the
model-call messages; ``derive_intent_id`` names the intents an activation stages).
``RunAgent`` and ``RunAgentOutputs`` import Apache Beam, so they are loaded on
first access (PEP 562): ``import beam_agents`` and the replay path stay Beam-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from beam_agents._protos import (
    Approval,
    ChatMessage,
    Event,
    LlmRequest,
    LlmResponse,
    SamplingParams,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from beam_agents._version import __version__ as __version__
from beam_agents.agent import Agent, Done, Inbound, Outcome, Suspend, Timeout
from beam_agents.cache_key import compute_cache_key
from beam_agents.context import AgentContext, derive_intent_id
from beam_agents.errors import BeamAgentsError
from beam_agents.hitl import HitlPolicy
from beam_agents.retry import RetryPolicy
from beam_agents.tools import ToolRegistry, tool
from beam_agents.trace_events import serialize_trace_event
from beam_agents.trace_stream import read_trace_stream, write_trace_stream

if TYPE_CHECKING:
    from beam_agents.config import AgentConfig
    from beam_agents.pipeline import RunAgent, RunAgentOutputs

_LAZY = {
    "AgentConfig": "beam_agents.config",
    "RunAgent": "beam_agents.pipeline",
    "RunAgentOutputs": "beam_agents.pipeline",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_agents' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Agent",
    "AgentConfig",
    "AgentContext",
    "Approval",
    "BeamAgentsError",
    "ChatMessage",
    "Done",
    "Event",
    "HitlPolicy",
    "Inbound",
    "LlmRequest",
    "LlmResponse",
    "Outcome",
    "RetryPolicy",
    "RunAgent",
    "RunAgentOutputs",
    "SamplingParams",
    "Suspend",
    "Timeout",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "compute_cache_key",
    "derive_intent_id",
    "read_trace_stream",
    "serialize_trace_event",
    "tool",
    "write_trace_stream",
]
