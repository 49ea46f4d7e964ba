"""otlp:// on the SDK's exporters: a real receiver (Arize Phoenix, over gRPC and HTTP), and
in-process OTLP/gRPC and OTLP/HTTP receivers for what a real one will not do on demand
(refuse an export, reject spans, show the request's headers and encoding)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from beam_agents._protos import AttributeValue
from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks import open_sink
from beam_agents.sinks.otlp import mixed_ids, span_name
from beam_agents.telemetry import ActivationTelemetry, LlmCallDetails

from .peers import OtlpHttpReceiver, OtlpReceiver, PhoenixReceiver, closed_port
from .records import activation_events, failed_activation_events, snapshot

pytestmark = pytest.mark.slow

T0_NS = 1_800_000_000_000_000_000  # a wall time far from the records' activation clock


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        value = getattr(kv.value, which)
        if which == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in value.values]
        out[kv.key] = value
    return out


def export(
    uri: str, events: list[Any], telemetry: ActivationTelemetry | None = None, **options: str
) -> None:
    writer = open_sink(uri, role="traces", options=options)
    try:
        for event in events:
            writer.write_trace(event, telemetry=telemetry)
        writer.flush()
    finally:
        writer.close()


def measured(events: list[Any]) -> ActivationTelemetry:
    """Telemetry as the DoFn measures it: event i ran from 10i ms to 10i + 5 ms."""
    return ActivationTelemetry(
        started_unix_ns=T0_NS,
        agent_name="SupportAgent",
        provider_name="openai",
        spans=[(i * 10_000_000, i * 10_000_000 + 5_000_000) for i in range(len(events))],
        llm_calls={
            1: LlmCallDetails(
                response_id="chatcmpl-42",
                temperature=0.2,
                max_tokens=256,
                seed=7,
                stop_sequences=("END",),
            )
        },
        finished_ns=len(events) * 10_000_000,
    )


def cache_hit(events: list[Any]) -> list[Any]:
    """The same activation, its model call served from the replay cache."""
    hit = [type(e).FromString(e.SerializeToString()) for e in events]
    hit[1].attributes["beam_agents.cache_hit"].CopyFrom(AttributeValue(bool_value=True))
    hit[1].attributes["beam_agents.billed"].CopyFrom(AttributeValue(bool_value=False))
    return hit


# -- the in-process OTLP/gRPC receiver ---------------------------------------------------------


def test_each_event_becomes_a_span_with_the_traces_own_ids_and_parentage(
    otlp: OtlpReceiver,
) -> None:
    events = activation_events(b"customer-42", 7)
    export(f"otlp://127.0.0.1:{otlp.port}", events)
    spans = otlp.spans()
    assert [(s.trace_id, s.span_id, s.parent_span_id) for s in spans] == [
        (e.trace_id, e.span_id, e.parent_span_id) for e in events
    ]
    root = spans[0]
    assert root.parent_span_id == b""
    assert all(s.parent_span_id == root.span_id for s in spans[1:])
    # Without the pipeline's telemetry (a stored trace exported by hand): the activation clock.
    assert [s.start_time_unix_nano for s in spans] == [e.start_ms * 1_000_000 for e in events]


def test_spans_are_timed_by_the_telemetry_never_by_the_trace(otlp: OtlpReceiver) -> None:
    events = activation_events(b"customer-42", 7)
    export(f"otlp://127.0.0.1:{otlp.port}", events, measured(events))
    root, chat, tool, staged, end = otlp.spans()
    # The root span is the whole activation; each other span its own step.
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (T0_NS, T0_NS + 50_000_000)
    assert (chat.start_time_unix_nano, chat.end_time_unix_nano) == (
        T0_NS + 10_000_000,
        T0_NS + 15_000_000,
    )
    assert tool.end_time_unix_nano - tool.start_time_unix_nano == 5_000_000
    # The activation clock stays searchable on every span.
    assert {attributes(s)["beam_agents.activation_clock_ms"] for s in otlp.spans()} == {
        events[0].start_ms
    }
    assert staged.start_time_unix_nano > root.start_time_unix_nano
    assert end.end_time_unix_nano <= root.end_time_unix_nano


def test_span_names_and_attributes_follow_the_gen_ai_conventions(otlp: OtlpReceiver) -> None:
    events = activation_events(b"customer-42", 7)
    export(f"otlp://127.0.0.1:{otlp.port}", events, measured(events))
    start, chat, tool, staged, end = otlp.spans()
    assert [s.name for s in (start, chat, tool, staged, end)] == [
        "invoke_agent SupportAgent",
        "chat gpt-test",
        "execute_tool lookup_order",
        "intent_staged issue_refund",
        "activation_end done",
    ]
    root = attributes(start)
    assert root["gen_ai.operation.name"] == "invoke_agent"  # Required
    assert root["gen_ai.provider.name"] == "openai"  # Required
    assert root["gen_ai.agent.name"] == "SupportAgent"
    assert root["gen_ai.conversation.id"] == "customer-42"
    chat_attrs = attributes(chat)
    assert chat.kind == chat.SPAN_KIND_CLIENT
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.provider.name"] == "openai"
    assert chat_attrs["gen_ai.request.model"] == "gpt-test"
    assert chat_attrs["gen_ai.response.model"] == "gpt-test-0613"
    assert chat_attrs["gen_ai.response.id"] == "chatcmpl-42"
    assert chat_attrs["gen_ai.request.temperature"] == 0.2
    assert chat_attrs["gen_ai.request.max_tokens"] == 256
    assert chat_attrs["gen_ai.request.seed"] == 7
    assert chat_attrs["gen_ai.request.stop_sequences"] == ["END"]
    assert chat_attrs["gen_ai.usage.input_tokens"] == 120  # billed: counted
    assert chat_attrs["beam_agents.cache_hit"] is False
    tool_attrs = attributes(tool)
    assert tool.kind == tool.SPAN_KIND_INTERNAL
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "lookup_order"
    assert tool_attrs["gen_ai.tool.type"] == "function"
    assert "gen_ai.operation.name" not in attributes(staged)
    assert set(
        {
            "beam_agents.entity_key": b"customer-42".hex(),
            "beam_agents.seq": 7,
            "beam_agents.trace.index": 2,
            "beam_agents.trace.kind": "TOOL_CALL",
            "beam_agents.trace.name": "lookup_order",
        }.items()
    ) <= set(tool_attrs.items())
    [resource_spans] = otlp.requests[0].resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource["service.name"] == "beam-agents"
    assert resource_spans.scope_spans[0].scope.name == "beam_agents"


def test_a_cache_hit_reports_no_billed_tokens(otlp: OtlpReceiver) -> None:
    export(f"otlp://127.0.0.1:{otlp.port}", cache_hit(activation_events(b"k", 3)))
    chat = attributes(otlp.spans()[1])
    assert chat["beam_agents.cache_hit"] is True and chat["beam_agents.billed"] is False
    assert "gen_ai.usage.input_tokens" not in chat and "gen_ai.usage.output_tokens" not in chat
    assert chat["beam_agents.cached_usage.input_tokens"] == 120


def test_an_instance_id_gives_each_pipeline_its_own_ids(otlp: OtlpReceiver) -> None:
    events = activation_events(b"customer-42", 7)
    uri = f"otlp://127.0.0.1:{otlp.port}"
    export(uri, events, instance_id="prod-eu")
    export(uri, events, instance_id="prod-eu")  # a retried bundle: the same ids again
    export(uri, events, instance_id="staging")
    prod, again, staging = (otlp.spans()[i * 5 : i * 5 + 5] for i in range(3))
    assert [s.span_id for s in prod] == [s.span_id for s in again]
    assert {s.trace_id for s in prod}.isdisjoint({s.trace_id for s in staging})
    assert {s.trace_id for s in prod}.isdisjoint({e.trace_id for e in events})
    assert all(s.parent_span_id == prod[0].span_id for s in prod[1:])  # parentage holds
    assert [attributes(s)["beam_agents.span_id"] for s in prod] == [e.span_id.hex() for e in events]
    assert prod[0].trace_id == mixed_ids("prod-eu", events[0].trace_id, b"")[0]
    resource = {
        kv.key: kv.value.string_value
        for kv in otlp.requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.instance.id"] == "prod-eu"


def test_a_failed_activation_is_an_error_span_and_so_is_its_agent_span(otlp: OtlpReceiver) -> None:
    export(f"otlp://127.0.0.1:{otlp.port}", failed_activation_events(b"k", 2))
    start, failed = otlp.spans()
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert failed.status.message == "ValueError"
    assert attributes(failed)["error.type"] == "ValueError"
    assert start.status.code == start.status.STATUS_CODE_ERROR
    assert attributes(start)["error.type"] == "ValueError"
    assert span_name(failed_activation_events(b"k", 2)[1]) == "activation_failed ValueError"


def test_a_dead_endpoint_fails_the_flush_within_the_timeout() -> None:
    writer = open_sink(
        f"otlp://127.0.0.1:{closed_port()}", role="traces", options={"timeout_s": "2"}
    )
    try:
        writer.write_trace(activation_events(b"k1", 3)[0])
        started = time.monotonic()
        with pytest.raises(SinkError) as caught:
            writer.flush()
        assert time.monotonic() - started < 10  # the SDK's retries stop at the timeout
    finally:
        writer.close()
    assert caught.value.record == "trace key=6b31 seq=3 index=0"
    assert "UNAVAILABLE" in caught.value.cause or "DEADLINE_EXCEEDED" in caught.value.cause


def test_an_export_the_receiver_refuses_fails_the_flush(otlp: OtlpReceiver) -> None:
    import grpc

    otlp.fail_with = grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(SinkError) as caught:
        export(f"otlp://127.0.0.1:{otlp.port}", activation_events(b"k1", 3), timeout_s="5")
    assert "PERMISSION_DENIED" in caught.value.cause
    assert caught.value.record == "trace key=6b31 seq=3 index=0 (and 4 more)"


def test_spans_the_receiver_rejects_fail_the_flush(otlp: OtlpReceiver) -> None:
    otlp.rejected_spans = 2
    with pytest.raises(SinkError, match="rejected 2 of 5 spans: rejected by the test receiver"):
        export(f"otlp://127.0.0.1:{otlp.port}", activation_events(b"k1", 3))


def test_otlp_refuses_snapshots() -> None:
    with pytest.raises(ConfigError, match="traces-only exporter"):
        open_sink("otlp://127.0.0.1:4317", role="snapshots")
    writer = open_sink("otlp://127.0.0.1:4317", role="traces")
    try:
        with pytest.raises(ConfigError, match="traces-only"):
            writer.write_snapshot(snapshot(b"k", 1))
    finally:
        writer.close()


def test_headers_are_sent_as_grpc_metadata(otlp: OtlpReceiver) -> None:
    export(
        f"otlp://127.0.0.1:{otlp.port}",
        activation_events(b"k1", 3)[:1],
        headers="x-api-key=s3cret, X-Tenant=t1",
        compression="gzip",
    )
    assert otlp.metadata[-1]["x-api-key"] == "s3cret"
    assert otlp.metadata[-1]["x-tenant"] == "t1"
    assert len(otlp.spans()) == 1


def test_a_grpc_path_is_refused() -> None:
    with pytest.raises(ConfigError, match="OTLP/gRPC takes no path"):
        open_sink("otlp://127.0.0.1:4317/v1/traces", role="traces", options={"protocol": "grpc"})


# -- the in-process OTLP/HTTP receiver ---------------------------------------------------------


def test_http_protobuf_with_gzip_and_headers(otlp_http: OtlpHttpReceiver) -> None:
    events = activation_events(b"customer-42", 7)
    export(
        f"otlp://127.0.0.1:{otlp_http.port}",
        events,
        measured(events),
        protocol="http/protobuf",
        compression="gzip",
        headers="authorization=Basic czNjcmV0",
    )
    assert [s.span_id for s in otlp_http.spans()] == [e.span_id for e in events]
    [sent] = otlp_http.headers
    assert sent["content-encoding"] == "gzip"
    assert sent["content-type"] == "application/x-protobuf"
    assert sent["authorization"] == "Basic czNjcmV0"


def test_http_path_and_the_standard_environment_variables(
    otlp_http: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``otlp://`` alone: endpoint, protocol, headers and compression from OTEL_EXPORTER_OTLP_*."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{otlp_http.port}/v1/traces"
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=from-env")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "support-desk")
    export("otlp://", activation_events(b"k", 1))
    assert len(otlp_http.spans()) == 5
    [sent] = otlp_http.headers
    assert sent["x-tenant"] == "from-env" and sent["content-encoding"] == "gzip"
    resource = {
        kv.key: kv.value.string_value
        for kv in otlp_http.requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "support-desk"


def test_http_spans_the_receiver_rejects_or_refuses_fail_the_flush(
    otlp_http: OtlpHttpReceiver,
) -> None:
    uri = f"otlp://127.0.0.1:{otlp_http.port}"
    otlp_http.rejected_spans = 1
    with pytest.raises(SinkError, match="rejected 1 of 5 spans"):
        export(uri, activation_events(b"k1", 3), protocol="http/protobuf")
    otlp_http.reset()
    otlp_http.status = 400
    with pytest.raises(SinkError, match="the OTLP export failed") as caught:
        export(uri, activation_events(b"k1", 3), protocol="http/protobuf", timeout_s="3")
    assert "400" in caught.value.cause


# -- Arize Phoenix: a real OTLP receiver, over gRPC and over HTTP --------------------------------


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_real_receiver_stores_the_spans_as_sent(phoenix: PhoenixReceiver, protocol: str) -> None:
    key = f"phoenix-{protocol}".encode()
    events = activation_events(key, 4)
    port = phoenix.grpc_port if protocol == "grpc" else phoenix.http_port
    export(f"otlp://127.0.0.1:{port}", events, measured(events), protocol=protocol)
    stored = phoenix.spans(events[0].trace_id, len(events))
    assert [s["context"]["span_id"] for s in stored] == [e.span_id.hex() for e in events]
    assert [s["parent_id"] for s in stored] == [None] + [events[0].span_id.hex()] * 4
    assert [s["name"] for s in stored][:3] == [
        "invoke_agent SupportAgent",
        "chat gpt-test",
        "execute_tool lookup_order",
    ]
    chat = stored[1]["attributes"]
    assert chat["gen_ai.provider.name"] == "openai"
    assert chat["gen_ai.usage.input_tokens"] == 120
    assert chat["gen_ai.response.id"] == "chatcmpl-42"
    # Phoenix keeps the real times: the root span lasts the whole activation (50 ms).
    root = stored[0]
    assert root["start_time"].startswith("2027-01-15T08:00:00")
    assert root["end_time"].startswith("2027-01-15T08:00:00.05")


def test_a_pipeline_exports_real_times_to_a_real_receiver(
    phoenix: PhoenixReceiver, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunAgent -> otlp:// -> Phoenix: each span at its wall time, the trace unchanged."""
    import sys
    from pathlib import Path

    pipeline_tests = str(Path(__file__).resolve().parents[1] / "pipeline")
    monkeypatch.syspath_prepend(pipeline_tests)
    from agents import make_provider
    from pipeline_harness import T0, run_agent

    from beam_agents import AgentConfig
    from beam_agents._protos import TraceEvent
    from beam_agents.testing import event_envelope

    key = f"pipeline-{time.time_ns()}".encode()
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to=f"otlp://127.0.0.1:{phoenix.grpc_port}",
        sink_options={"timeout_s": "20", "instance_id": "test-pipeline"},
    )
    before = time.time()
    got = run_agent(
        "batch", [event_envelope(key, "echo", b"hi", time_ms=T0)], tmp_path, config=config
    )
    after = time.time()
    events = [TraceEvent.FromString(data) for k, data in got.traces if k == key]
    assert events and events[0].start_ms == T0  # the trace keeps the activation clock
    trace_id = mixed_ids("test-pipeline", events[0].trace_id, b"")[0]
    stored = phoenix.spans(trace_id, len(events))
    assert [s["attributes"]["beam_agents.span_id"] for s in stored] == [
        e.span_id.hex() for e in events
    ]
    from datetime import datetime

    root = stored[0]
    started = datetime.fromisoformat(root["start_time"]).timestamp()
    assert before - 1 <= started <= after + 1  # the wall time it ran, not the event's time
    assert root["name"] == "invoke_agent ShopAgent"
    assert root["attributes"]["gen_ai.provider.name"] == make_provider().name
    assert sys.modules["agents"].MODEL in [
        s["attributes"].get("gen_ai.request.model") for s in stored
    ]
