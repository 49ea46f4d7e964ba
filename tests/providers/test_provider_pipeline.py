"""RunAgent with the OpenAI-compatible provider against a local server; exported; replayed.

The server speaks Chat Completions: the first request gets a tool call, the second
(carrying the tool's result) a text answer. The pipeline's traces and snapshot go to
file:// sinks, the server is stopped, and the replay CLI reproduces the activation
from the files alone: the provider's name is in every cache key, and the responses
the pipeline cached are what the re-run is served.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("apache_beam")

import apache_beam as beam
import provider_agents
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from wire_server import Received, Reply, wire_server

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import TraceEvent
from beam_agents.cli import main
from beam_agents.providers import OpenAIChatProvider
from beam_agents.testing import event_envelope, export_request_envelope
from beam_agents.trace_stream import read_trace_stream

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
KEY = b"customer-9"
PROVIDER_NAME = "local-openai-compatible"


def _completion(message: dict[str, Any], finish_reason: str, n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_734_000_000,
        "model": "served-model-q4",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 20 * n, "completion_tokens": 5, "total_tokens": 20 * n + 5},
    }


def model(received: Received) -> Reply:
    """The served model: call lookup_order first, then answer from the tool's result."""
    last = received.body["messages"][-1]
    if last["role"] == "user":
        call = {
            "id": "call_7",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "A7"}'},
        }
        return Reply(_completion({"content": None, "tool_calls": [call]}, "tool_calls", 1))
    return Reply(_completion({"content": f"Your order: {last['content']}"}, "stop", 2))


def test_a_pipeline_on_a_real_provider_replays_reproduced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ask = event_envelope(KEY, "ask", b"where is A7?", time_ms=T0)
    with wire_server() as server:
        server.script(model, model)
        config = AgentConfig(
            provider_factory=functools.partial(
                OpenAIChatProvider,
                api_key="test-key",
                base_url=f"{server.url}/v1",
                name=PROVIDER_NAME,
                max_retries=0,
            ),
            traces_to=f"file://{tmp_path / 'traces'}",
            snapshots_to=f"file://{tmp_path / 'snapshots'}",
        )
        script = [ask, export_request_envelope(KEY, "incident", time_ms=T0 + 1000)]
        options = PipelineOptions(flags=[])
        with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
            _ = (
                p
                | beam.Create([e.SerializeToString() for e in script], reshuffle=False)
                | RunAgent(provider_agents.AGENT, provider_agents.TOOLS, config)
            )
        received = list(server.received)
    # The server is gone: replay has nothing to call.
    assert [r.body["messages"][-1]["role"] for r in received] == ["user", "tool"]
    assert received[1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_7",
        "content": '{"order_id": "A7", "status": "shipped"}',
    }
    events = [e for path in (tmp_path / "traces").glob("*.pb") for e in read_trace_stream(path)]
    calls = [e for e in events if e.kind == TraceEvent.LLM_CALL]
    assert len(calls) == 2
    assert {c.attributes["beam_agents.provider"].string_value for c in calls} == {PROVIDER_NAME}
    (snapshot,) = (tmp_path / "snapshots").glob("*.pb")
    event_file = tmp_path / "event.pb"
    event_file.write_bytes(ask.SerializeToString())
    argv = [
        "--snapshot",
        str(snapshot),
        "--traces",
        str(tmp_path / "traces"),
        "--event",
        str(event_file),
        "--agent",
        "provider_agents:AGENT",
        "--registry",
        "provider_agents:TOOLS",
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert "\nreproduced\n" in out
    assert "  provider calls: 0" in out


class _Closable:
    name = "closable"

    def __init__(self) -> None:
        self.closed = False

    def complete(self, request: Any) -> Any:  # pragma: no cover - never asked here
        raise AssertionError

    def close(self) -> None:
        self.closed = True


def test_the_dofn_closes_its_provider_in_teardown() -> None:
    from beam_agents.pipeline.agent_dofn import AgentDoFn

    built: list[_Closable] = []
    config = AgentConfig(provider_factory=lambda: built.append(_Closable()) or built[-1])
    dofn = AgentDoFn(provider_agents.AGENT, provider_agents.TOOLS, config)
    dofn.setup()
    assert built and not built[0].closed
    dofn.teardown()
    assert built[0].closed
    dofn.teardown()  # twice (Beam may): nothing left to close
