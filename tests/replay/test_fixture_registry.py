"""Fixture registries: replaying a plain read-only tool that reads a service, offline.

The traced ``result_sha256`` checks the fixture: the replay reproduces only when the
fixture returns the production result, and diverges at that tool call otherwise."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import recorded_agents as rec
import replay_fixtures as fx
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents import ToolRegistry, tool
from beam_agents.errors import AgentDefinitionError
from beam_agents.replay.engine import replay
from beam_agents.replay.result import ReplayResult, Verdict
from beam_agents.testing import event_envelope, fixture_registry
from beam_agents.trace_events import ATTR_RESULT_SHA256

EVENT = event_envelope(KEY, "ask", b"A1", time_ms=T0)


@pytest.fixture(scope="module")
def production() -> Iterator[KeyHistory]:
    """The agent with the plain HTTP tool, run against a real service that is then stopped."""
    service = rec.OrderService()
    service.orders.update(fx.PRODUCTION_ORDERS)
    rec.SERVICE_URL = service.url
    history = KeyHistory(rec.AGENT, rec.TOOLS_PLAIN, rec.make_provider())
    try:
        history.send(EVENT)
    finally:
        service.stop()  # its URL stays set: a re-run of the plain tool would try it
    yield history


def run(history: KeyHistory, registry: str) -> ReplayResult:
    return replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=EVENT,
            agent="recorded_agents:AGENT",
            registry=registry,
        )
    )


def test_the_production_registry_is_blocked_by_the_network_guard(production: KeyHistory) -> None:
    result = run(production, "recorded_agents:TOOLS_PLAIN")
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert "network blocked" in result.reason and "'read_order'" in result.reason
    # The message says what to do about it, not only what went wrong.
    assert "Declare 'read_order' @tool(recorded=True)" in result.reason
    assert "fixture registry (registry=;" in result.reason
    from beam_agents.replay.reporting.text import render_report

    # The original activation did not fail: the re-run did, and the report says which.
    assert "memory blob: none — the re-run failed or stopped" in render_report(result)


def test_a_fixture_returning_the_production_result_reproduces(production: KeyHistory) -> None:
    result = run(production, "replay_fixtures:TOOLS")
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.network_attempts == ()


def test_a_fixture_returning_anything_else_diverges_at_that_tool(production: KeyHistory) -> None:
    result = run(production, "replay_fixtures:STALE_TOOLS")
    assert result.verdict is Verdict.DIVERGED, result.reason
    divergence = result.first_divergence
    assert divergence is not None and (divergence.kind, divergence.name) == (
        "TOOL_CALL",
        "read_order",
    )
    assert [row.path for row in divergence.fields] == [f"attributes[{ATTR_RESULT_SHA256!r}]"]


def test_fixture_registry_keeps_every_declaration_and_swaps_only_the_named_functions() -> None:
    swapped = fixture_registry(rec.TOOLS, read_order=fx.read_order_fixture)
    assert swapped.names() == rec.TOOLS.names()
    assert (
        swapped.get("read_order").recorded and swapped.get("read_order").fn is fx.read_order_fixture
    )
    assert swapped.get("read_order_raw") is rec.TOOLS.get("read_order_raw")
    assert rec.TOOLS.get("read_order").fn is not fx.read_order_fixture, "the original is untouched"


def test_fixture_registry_refuses_what_could_never_run() -> None:
    @tool(side_effect=True)
    def refund(order_id: str) -> None: ...

    registry = ToolRegistry([refund, rec.read_order])
    with pytest.raises(AgentDefinitionError, match="no tool named 'nope'"):
        fixture_registry(registry, nope=lambda: None)
    with pytest.raises(AgentDefinitionError, match="side_effect=True"):
        fixture_registry(registry, refund=lambda order_id: None)
    with pytest.raises(AgentDefinitionError, match="must be a function"):
        fixture_registry(registry, read_order="not callable")  # type: ignore[arg-type]


def test_the_network_reason_says_what_to_do_for_a_tool_and_for_agent_code() -> None:
    from beam_agents.cli.parsing import CLI_NAMING
    from beam_agents.replay.isolation.guard import NetworkAttempt
    from beam_agents.replay.judging.judge import _network_reason
    from beam_agents.replay.naming import REPLAYER

    attempt = NetworkAttempt("socket.connect", "10.0.0.7:443", "read_order", 2)
    in_tool = _network_reason(attempt, 1, CLI_NAMING)
    assert in_tool.startswith("network blocked: read-only tool 'read_order' tried to reach")
    assert "Declare 'read_order' @tool(recorded=True)" in in_tool and "--registry" in in_tool
    assert "(registry=;" in _network_reason(attempt, 1, REPLAYER)
    bare = _network_reason(NetworkAttempt("socket.connect", "10.0.0.7:443", None, 2), 1, REPLAYER)
    assert "agent code (outside any tool)" in bare
    assert "Move the call into a @tool(recorded=True) tool" in bare and "Declare" not in bare
