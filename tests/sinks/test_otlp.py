"""otlp:// against an in-process OTLP/gRPC TraceService receiver on loopback."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks import open_sink
from beam_agents.sinks.otlp import span_name

from .peers import OtlpReceiver, closed_port
from .records import activation_events, failed_activation_events, snapshot

pytestmark = pytest.mark.slow


def attributes(span: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


def export(receiver: OtlpReceiver, events: list[Any], **options: str) -> None:
    writer = open_sink(f"otlp://127.0.0.1:{receiver.port}", role="traces", options=options)
    try:
        for event in events:
            writer.write_trace(event)
        writer.flush()
    finally:
        writer.close()


def test_each_event_becomes_a_span_with_the_traces_own_ids_and_parentage(
    otlp: OtlpReceiver,
) -> None:
    events = activation_events(b"customer-42", 7)
    export(otlp, events)
    spans = otlp.spans()
    assert [(s.trace_id, s.span_id, s.parent_span_id) for s in spans] == [
        (e.trace_id, e.span_id, e.parent_span_id) for e in events
    ]
    root = spans[0]
    assert root.parent_span_id == b""
    assert {s.trace_id for s in spans} == {events[0].trace_id}
    assert all(s.parent_span_id == root.span_id for s in spans[1:])
    assert [s.start_time_unix_nano for s in spans] == [e.start_ms * 1_000_000 for e in events]
    assert [s.end_time_unix_nano for s in spans] == [e.end_ms * 1_000_000 for e in events]


def test_span_names_and_attributes_follow_the_gen_ai_conventions(otlp: OtlpReceiver) -> None:
    events = activation_events(b"customer-42", 7)
    export(otlp, events)
    start, chat, tool, staged, end = otlp.spans()
    assert [s.name for s in (start, chat, tool, staged, end)] == [
        "invoke_agent",
        "chat gpt-test",
        "execute_tool lookup_order",
        "intent_staged issue_refund",
        "activation_end done",
    ]
    assert attributes(start)["gen_ai.operation.name"] == "invoke_agent"
    chat_attrs = attributes(chat)
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.request.model"] == "gpt-test"
    assert chat_attrs["gen_ai.usage.input_tokens"] == 120
    assert chat_attrs["gen_ai.usage.output_tokens"] == 0
    assert chat_attrs["beam_agents.cache_hit"] is False
    assert chat_attrs["beam_agents.billed"] is True
    assert chat.kind == chat.SPAN_KIND_CLIENT
    tool_attrs = attributes(tool)
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "lookup_order"
    assert tool_attrs["beam_agents.args_sha256"] == "cd" * 32
    assert attributes(staged)["beam_agents.requires_approval"] is True
    assert "gen_ai.operation.name" not in attributes(staged)
    # Every span says which trace event it is.
    assert set(
        {
            "beam_agents.entity_key": b"customer-42".hex(),
            "beam_agents.seq": 7,
            "beam_agents.trace.index": 2,
            "beam_agents.trace.kind": "TOOL_CALL",
            "beam_agents.trace.name": "lookup_order",
        }.items()
    ) <= set(attributes(tool).items())
    [resource_spans] = otlp.requests[0].resource_spans
    assert resource_spans.resource.attributes[0].key == "service.name"
    assert resource_spans.resource.attributes[0].value.string_value == "beam-agents"


def test_a_failed_activation_is_an_error_span(otlp: OtlpReceiver) -> None:
    export(otlp, failed_activation_events(b"k", 2))
    start, failed = otlp.spans()
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert failed.status.message == "ValueError"
    assert attributes(failed)["error.type"] == "ValueError"
    assert start.status.code == start.status.STATUS_CODE_UNSET
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
        assert time.monotonic() - started < 5
    finally:
        writer.close()
    assert caught.value.record == "trace key=6b31 seq=3 index=0"
    assert "UNAVAILABLE" in caught.value.cause or "DEADLINE_EXCEEDED" in caught.value.cause
    assert isinstance(caught.value.__cause__, grpc.RpcError)


def test_an_export_the_receiver_refuses_fails_the_flush(otlp: OtlpReceiver) -> None:
    otlp.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(SinkError) as caught:
        export(otlp, activation_events(b"k1", 3))
    assert "RESOURCE_EXHAUSTED" in caught.value.cause
    assert caught.value.record == "trace key=6b31 seq=3 index=0 (and 4 more)"


def test_spans_the_receiver_rejects_fail_the_flush(otlp: OtlpReceiver) -> None:
    otlp.rejected_spans = 2
    with pytest.raises(SinkError, match="rejected 2 of 5 spans: rejected by the test receiver"):
        export(otlp, activation_events(b"k1", 3))


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
    export(otlp, activation_events(b"k1", 3)[:1], headers="x-api-key=s3cret, X-Tenant=t1")
    assert otlp.metadata[-1]["x-api-key"] == "s3cret"
    assert otlp.metadata[-1]["x-tenant"] == "t1"
