"""beam_agents.agent_build: snapshots name the agent build that wrote them; traces never do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import core_agents
from core_agents import TOOLS, SupportAgent, make_provider

from beam_agents import AgentConfig
from beam_agents._protos import AgentBuild, StateSnapshot
from beam_agents.agent_build import agent_build, build_differences, describe_build
from beam_agents.key_step import Emit
from beam_agents.testing import PipelineKey, event_envelope, export_request_envelope

KEY = b"customer-42"
T0 = 1_734_000_000_000


class Released(SupportAgent):
    build_version = "1.4.2"


def test_the_identity_is_the_class_its_modules_source_digest_and_the_authors_version() -> None:
    build = agent_build(Released())
    assert build.agent_class == f"{__name__}:Released"
    assert build.code_sha256 == hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    assert build.version == "1.4.2"
    plain = agent_build(SupportAgent())
    assert plain.agent_class == "core_agents:SupportAgent" and plain.version == ""
    assert plain.code_sha256 == hashlib.sha256(Path(core_agents.__file__).read_bytes()).hexdigest()
    assert describe_build(build) == (
        f"{__name__}:Released code sha256={build.code_sha256[:12]} version 1.4.2"
    )


def test_differences_name_class_code_and_version_and_nothing_for_an_unrecorded_build() -> None:
    base = AgentBuild(agent_class="m:A", code_sha256="a" * 64, version="1")
    assert build_differences(base, base) == ()
    other = AgentBuild(agent_class="m:B", code_sha256="b" * 64, version="2")
    assert build_differences(base, other) == ("class", "code", "version")
    assert build_differences(base, AgentBuild(agent_class="m:A", code_sha256="a" * 64)) == (
        "version",
    )
    assert build_differences(AgentBuild(), other) == ()  # an old snapshot: nothing to compare


def _run(agent: SupportAgent) -> tuple[list[object], StateSnapshot]:
    key = PipelineKey(agent, TOOLS, AgentConfig(provider_factory=make_provider), entity_key=KEY)
    batches: list[object] = []
    for i, text in enumerate(["where is A1?", "refund A1 please"]):
        envelope = event_envelope(KEY, "msg", text.encode(), time_ms=T0 + i)
        batches.extend(key.send(envelope).of(Emit.TRACE_BATCHES))
    exported = key.send(export_request_envelope(KEY, "incident-1", time_ms=T0 + 10))
    ((_, raw),) = exported.of(Emit.SNAPSHOTS)
    return batches, StateSnapshot.FromString(raw)


def test_a_snapshot_carries_the_build_and_the_trace_bytes_do_not_depend_on_it() -> None:
    plain_trace, plain_snapshot = _run(SupportAgent())
    released_trace, released_snapshot = _run(Released())
    assert plain_snapshot.agent_build == agent_build(SupportAgent())
    assert released_snapshot.agent_build.version == "1.4.2"
    # Another build, the very same trace: no digest over trace bytes can move with it.
    assert released_trace == plain_trace
    plain_snapshot.ClearField("agent_build")
    released_snapshot.ClearField("agent_build")
    assert plain_snapshot == released_snapshot
