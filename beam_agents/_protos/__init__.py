"""The messages of beam_agents.v1 (DESIGN §4), generated from protos/ by `make protos`.

The modules under ``v1/`` are generated; never edit them by hand. This module
re-exports the message classes under short names, as the seed page imports them
(``from beam_agents._protos import AgentEnvelope``).

``PROTO_DIR`` and ``DESCRIPTOR_SET`` are the ``.proto`` sources and their
``FileDescriptorSet`` as shipped in the wheel, for consumers in other languages.
"""

from pathlib import Path as _Path

from beam_agents._protos.v1.bundle_pb2 import HitlSettings, IncidentBundle
from beam_agents._protos.v1.envelope_pb2 import AgentEnvelope, Approval, Event, ToolResult
from beam_agents._protos.v1.intent_pb2 import ToolIntent
from beam_agents._protos.v1.llm_pb2 import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    SamplingParams,
    ToolCall,
    ToolSpec,
    Usage,
)
from beam_agents._protos.v1.state_pb2 import (
    AgentBuild,
    Continuation,
    FailedAttempt,
    InFlight,
    KeyHold,
    KeyWaiting,
    LlmCacheBody,
    LlmCacheEntry,
    PendingIntents,
    RequestFingerprint,
    ResumeHistory,
    ResumeRecord,
    RetryPending,
    StateSnapshot,
    ToolCacheBody,
    ToolCacheEntry,
    VersionedBlob,
)
from beam_agents._protos.v1.trace_pb2 import AttributeValue, TraceEvent

__all__ = [
    "DESCRIPTOR_SET",
    "PROTO_DIR",
    "AgentBuild",
    "AgentEnvelope",
    "Approval",
    "AttributeValue",
    "ChatMessage",
    "Continuation",
    "Event",
    "FailedAttempt",
    "HitlSettings",
    "InFlight",
    "IncidentBundle",
    "KeyHold",
    "KeyWaiting",
    "LlmCacheBody",
    "LlmCacheEntry",
    "LlmRequest",
    "LlmResponse",
    "PendingIntents",
    "RequestFingerprint",
    "ResumeHistory",
    "ResumeRecord",
    "RetryPending",
    "SamplingParams",
    "StateSnapshot",
    "ToolCacheBody",
    "ToolCacheEntry",
    "ToolCall",
    "ToolIntent",
    "ToolResult",
    "ToolSpec",
    "TraceEvent",
    "Usage",
    "VersionedBlob",
]

PROTO_DIR = _Path(__file__).parent / "v1" / "proto"
"""The ``.proto`` sources (``beam_agents/v1/*.proto`` below it), as in the repository's protos/."""
DESCRIPTOR_SET = _Path(__file__).parent / "v1" / "beam_agents_v1.binpb"
"""A serialized ``FileDescriptorSet`` of those files and their imports (protoc
``--descriptor_set_out --include_imports``)."""
