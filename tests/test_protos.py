"""The committed bindings are exactly what `make protos` generates from protos/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_committed_bindings_match_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    fresh_root, committed_root = tmp_path / "v1", ROOT / "beam_agents" / "_protos" / "v1"
    fresh = {
        p.relative_to(fresh_root).as_posix(): p.read_bytes()
        for p in fresh_root.rglob("*")
        if p.is_file()
    }
    committed = {
        p.relative_to(committed_root).as_posix(): p.read_bytes()
        for p in committed_root.rglob("*")
        if p.is_file() and p.suffix in (".py", ".pyi", ".proto", ".binpb")
    }
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"bindings out of date with protos/: {stale}; run `make protos` and commit"


def test_seed_import_path_and_message_names() -> None:
    from beam_agents._protos import (
        AgentEnvelope,
        Approval,
        Event,
        LlmRequest,
        LlmResponse,
        ToolIntent,
        ToolResult,
        TraceEvent,
    )

    request = AgentEnvelope(
        entity_key=b"customer-42",
        event_time_ms=1,
        export_request=AgentEnvelope.StateExportRequest(request_id="incident-1734"),
    )
    assert request.WhichOneof("body") == "export_request"
    assert AgentEnvelope.DESCRIPTOR.full_name == "beam_agents.v1.AgentEnvelope"
    for cls in (Approval, Event, LlmRequest, LlmResponse, ToolIntent, ToolResult, TraceEvent):
        assert cls.DESCRIPTOR.full_name == f"beam_agents.v1.{cls.__name__}"


def test_field_numbers_are_the_designs() -> None:
    """Field numbers are forever: pin the ones the seed page and DESIGN §4 name."""
    from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent

    def numbers(cls: type) -> dict[str, int]:
        return {f.name: f.number for f in cls.DESCRIPTOR.fields}  # type: ignore[attr-defined]

    assert numbers(StateSnapshot) == {
        "state_schema_version": 1,
        "entity_key": 2,
        "seq": 3,
        "snapshot_at_ms": 4,
        "memory": 5,
        "llm_cache": 6,
        "continuation": 7,
        "pending": 8,
        "request_id": 9,
        "resumed_from": 10,
        "pending_schema_version": 11,
        "resumed_from_schema_version": 12,
        "tool_cache": 13,
        "agent_build": 14,
        "waiting": 15,
    }
    assert numbers(AgentEnvelope) == {
        "entity_key": 1,
        "event_time_ms": 2,
        "envelope_id": 3,
        "event": 4,
        "tool_result": 5,
        "approval": 6,
        "export_request": 7,
    }
    assert numbers(TraceEvent) == {
        "entity_key": 1,
        "seq": 2,
        "index": 3,
        "kind": 4,
        "name": 5,
        "start_ms": 6,
        "end_ms": 7,
        "attributes": 8,
        "trace_id": 9,
        "span_id": 10,
        "parent_span_id": 11,
    }


def test_the_shipped_protos_and_descriptor_set_describe_the_messages() -> None:
    """A consumer in another language decodes our bytes from what the package ships."""
    from google.protobuf import descriptor_pb2

    from beam_agents._protos import DESCRIPTOR_SET, PROTO_DIR, TraceEvent

    shipped = sorted(p.relative_to(PROTO_DIR).as_posix() for p in PROTO_DIR.rglob("*.proto"))
    sources = sorted(
        p.relative_to(ROOT / "protos").as_posix() for p in (ROOT / "protos").rglob("*.proto")
    )
    assert shipped == sources and shipped
    for name in shipped:
        assert (PROTO_DIR / name).read_bytes() == (ROOT / "protos" / name).read_bytes()
    descriptors = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes())
    files = {f.name: f for f in descriptors.file}
    assert set(shipped) <= set(files)
    trace = files["beam_agents/v1/trace.proto"]
    [message] = [m for m in trace.message_type if m.name == "TraceEvent"]
    assert {f.name: f.number for f in message.field} == {
        f.name: f.number for f in TraceEvent.DESCRIPTOR.fields
    }
