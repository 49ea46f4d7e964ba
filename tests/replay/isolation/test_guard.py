"""The network guard: every connection attempt refused before a packet leaves, and recorded."""

from __future__ import annotations

import select
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents.activation import ActivationFailure, run_activation
from beam_agents.context import AgentContext
from beam_agents.errors import NetworkBlockedError
from beam_agents.key_state import KeyState
from beam_agents.provider import UnservableProvider
from beam_agents.replay.isolation.guard import block_network
from beam_agents.testing import event_envelope


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server on 127.0.0.1 that must receive nothing while the network is blocked."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server
    finally:
        server.close()


def received_connection(server: socket.socket, wait_s: float = 0.3) -> bool:
    readable, _, _ = select.select([server], [], [], wait_s)
    return bool(readable)


def address(server: socket.socket) -> tuple[str, int]:
    host, port = server.getsockname()[:2]
    return str(host), int(port)


def test_a_connect_is_refused_and_the_server_receives_nothing(listener: socket.socket) -> None:
    host, port = address(listener)
    with socket.socket() as client:
        client.settimeout(2)
        with block_network() as attempts, pytest.raises(NetworkBlockedError, match=f"{port}"):
            client.connect((host, port))
    assert not received_connection(listener)
    assert [(a.operation, a.address, a.tool) for a in attempts] == [
        ("socket.connect", f"{host}:{port}", None)
    ]


def test_create_connection_is_refused_at_name_resolution(listener: socket.socket) -> None:
    host, port = address(listener)
    with block_network() as attempts, pytest.raises(NetworkBlockedError):
        socket.create_connection((host, port), timeout=2)
    assert not received_connection(listener)
    assert [(a.operation, a.address) for a in attempts] == [
        ("socket.getaddrinfo", f"{host}:{port}")
    ]


def test_name_resolution_and_http_are_refused_too() -> None:
    with block_network() as attempts:
        with pytest.raises(NetworkBlockedError):
            socket.getaddrinfo("replay.invalid", 443)
        with pytest.raises(NetworkBlockedError):
            urllib.request.urlopen("http://replay.invalid:8080/rates", timeout=2)
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
            pytest.raises(NetworkBlockedError),
        ):
            udp.sendto(b"x", ("127.0.0.1", 9))
    assert [a.address for a in attempts] == [
        "replay.invalid:443",
        "replay.invalid:8080",
        "127.0.0.1:9",
    ]


def test_outside_the_block_the_hook_is_inert(listener: socket.socket) -> None:
    with block_network():
        pass
    with socket.create_connection(address(listener), timeout=2):
        assert received_connection(listener, wait_s=2)


def test_an_attempt_the_code_swallows_is_still_recorded(listener: socket.socket) -> None:
    with block_network() as attempts:
        try:
            socket.create_connection(address(listener), timeout=2)
        except Exception:  # what careless tool code does
            caught = True
    assert caught and len(attempts) == 1
    assert not received_connection(listener)


def test_overlapping_blocks_each_record_every_attempt(listener: socket.socket) -> None:
    with block_network() as outer:
        with block_network() as inner, pytest.raises(NetworkBlockedError):
            socket.create_connection(address(listener), timeout=2)
        with pytest.raises(NetworkBlockedError):  # still blocked: the outer block is active
            socket.create_connection(address(listener), timeout=2)
    assert len(inner) == 1 and len(outer) == 2


def test_an_attempt_inside_a_tool_names_the_tool_and_its_event(listener: socket.socket) -> None:
    host, port = address(listener)

    @tool
    def fetch_rate(currency: str) -> dict[str, Any]:
        with socket.create_connection((host, port), timeout=2):
            return {"currency": currency}

    class RateAgent(Agent):
        def start(self, ctx: AgentContext, event: Any) -> Done:
            ctx.call("fetch_rate", currency="EUR")
            return Done(output=b"ok")

    with block_network() as attempts:
        result = run_activation(
            RateAgent(),
            ToolRegistry([fetch_rate]),
            UnservableProvider("p"),
            KeyState(),
            event_envelope(b"k", "go", time_ms=1),
            now_ms=1,
            seq=1,
            entity_key=b"k",
        )
    assert isinstance(result, ActivationFailure)
    assert [(a.tool, a.event_index, a.address) for a in attempts] == [
        ("fetch_rate", 1, f"{host}:{port}")
    ]
    assert result.trace[1].name == "fetch_rate"
    assert "tool 'fetch_rate'" in attempts[0].describe()
    assert not received_connection(listener)


def test_a_forks_provider_may_connect_and_only_inside_its_call(listener: socket.socket) -> None:
    # docs/replay.md, "A fork": a real --fork-provider is the only network a replay may open.
    from beam_agents.replay.isolation.guard import provider_network

    host, port = address(listener)
    with block_network() as attempts:
        with provider_network(), socket.create_connection((host, port), timeout=2):
            assert received_connection(listener, wait_s=2)
        with socket.socket() as client, pytest.raises(NetworkBlockedError):
            client.connect((host, port))  # the provider's call is over: blocked again
        with provider_network(), pytest.raises(PermissionError):
            import subprocess

            subprocess.run(["true"], check=False)  # network only, never a process
    assert [a.operation for a in attempts][:1] == ["socket.connect"]
    assert all(a.operation != "socket.getaddrinfo" for a in attempts)
