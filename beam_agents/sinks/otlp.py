"""The ``otlp://host:port`` trace sink: spans over OTLP/gRPC, with the trace's own ids.

The OpenTelemetry SDK's exporter takes spans the SDK made, with ids it drew at
random; ours are the deterministic ids of the trace events (so a span found in
a tracing UI names the exact event replay compares). So the sink builds
``ExportTraceServiceRequest`` messages itself and sends them with the OTLP
``TraceService`` stub — the OTLP/gRPC protocol, without the SDK's span model.

Each activation is one trace: ``trace_id`` = ``event.trace_id``, ``span_id`` =
``event.span_id``, parent = ``event.parent_span_id`` (the ``ACTIVATION_START``
span, itself a root). Times are the activation clock (``start_ms``/``end_ms``)
in nanoseconds. Names and attributes follow the OpenTelemetry GenAI semantic
conventions where one exists (see ``span_name``); every attribute of the event
is exported as it is (the core already names its ``gen_ai.*`` ones that way),
plus ``beam_agents.entity_key`` (hex), ``beam_agents.seq``,
``beam_agents.trace.index``, ``beam_agents.trace.kind`` and
``beam_agents.trace.name``.

Options: ``timeout_s`` (each export call; default 10 s), ``tls=true`` for a TLS
channel (default: plaintext, as for a collector beside the workers),
``headers=k1=v1,k2=v2`` (gRPC metadata, e.g. an API key) and
``service_name`` (the resource's ``service.name``, default ``beam-agents``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_agents._protos import AttributeValue, StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks.base import describe_records, describe_trace, map_client_errors
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.trace_events import kind_name
from beam_agents.trace_view import LlmCall, ToolCall, error_type_of

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_SPANS_PER_REQUEST", "OtlpSinkWriter", "span_name"]

DEFAULT_TIMEOUT_S = 10.0
"""Bound on one export call unless ``timeout_s`` says otherwise."""

MAX_SPANS_PER_REQUEST = 1000
"""Spans per export request (keeps requests well under gRPC's 4 MiB default)."""

ATTR_OPERATION = "gen_ai.operation.name"
_NS_PER_MS = 1_000_000
_MAX_FIXED64 = 2**64 - 1

# GenAI semantic conventions: operation name per kind, where one exists.
_OPERATIONS = {
    TraceEvent.ACTIVATION_START: "invoke_agent",
    TraceEvent.LLM_CALL: "chat",
    TraceEvent.TOOL_CALL: "execute_tool",
}


def span_name(event: TraceEvent) -> str:
    """The span name of an event.

    ``invoke_agent`` for ``ACTIVATION_START`` (one activation is one agent
    invocation); ``chat {gen_ai.request.model}`` for ``LLM_CALL``;
    ``execute_tool {gen_ai.tool.name}`` for ``TOOL_CALL`` (the GenAI
    conventions' names); for the kinds no convention covers, the kind in
    lower case and the event's name (``intent_staged issue_refund``,
    ``activation_failed ValueError``).
    """
    if event.kind == TraceEvent.ACTIVATION_START:
        return "invoke_agent"
    if event.kind == TraceEvent.LLM_CALL:
        return f"chat {LlmCall.of(event).request_model or event.name}".strip()
    if event.kind == TraceEvent.TOOL_CALL:
        return f"execute_tool {ToolCall.of(event).tool_name or event.name}".strip()
    return f"{kind_name(event.kind).lower()} {event.name}".strip()


def _nanos(ms: int) -> int:
    # OTLP times are unsigned nanoseconds since the epoch; an activation clock
    # outside that range (never produced from a real event time) is clamped.
    return min(max(ms, 0) * _NS_PER_MS, _MAX_FIXED64)


def _parse_headers(text: str, where: str) -> tuple[tuple[str, str], ...]:
    headers = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: headers must be key=value pairs joined by commas")
        headers.append((key.strip().lower(), value.strip()))
    return tuple(headers)


class OtlpSinkWriter:
    """Exports trace events as spans to one OTLP/gRPC endpoint."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        self._timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        self._tls = options.get("tls", "false") == "true"
        self._headers = _parse_headers(options.get("headers", ""), f"sink {self._uri}")
        self._service_name = options.get("service_name", "beam-agents")
        self._channel: Any = None
        self._stub: Any = None
        self._events: list[TraceEvent] = []

    def open(self) -> None:
        """Create the gRPC channel and stub (connecting is lazy, at the first export).

        Raises:
            SinkError: The channel cannot be created.
        """
        with map_client_errors(self._sink, "no record (creating the gRPC channel)"):
            import grpc
            from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

            target = self._sink.hosts[0]
            if self._tls:
                self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
            else:
                self._channel = grpc.insecure_channel(target)
            self._stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel; events not flushed are not exported."""
        channel, self._channel, self._stub = self._channel, None, None
        self._events.clear()
        if channel is not None:
            with map_client_errors(self._sink, "no record (closing the gRPC channel)"):
                channel.close()

    def write_trace(self, event: TraceEvent) -> None:
        """Buffer one event; it is exported as a span at the next flush."""
        self._events.append(event)

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Refused: ``otlp://`` is a traces-only exporter."""
        raise ConfigError(f"sink {self._uri}: otlp:// is a traces-only exporter")

    def flush(self) -> None:
        """Export the buffered events as spans; fail unless the receiver accepted every span.

        Raises:
            SinkError: The export call failed or timed out (``timeout_s``), or
                the receiver reported rejected spans.
        """
        events, self._events = self._events, []
        if not events:
            return
        if self._stub is None:
            raise SinkError(self._uri, describe_records([describe_trace(e) for e in events]),
                            "the writer is not open")  # fmt: skip
        for start in range(0, len(events), MAX_SPANS_PER_REQUEST):
            chunk = events[start : start + MAX_SPANS_PER_REQUEST]
            records = describe_records([describe_trace(e) for e in chunk])
            with map_client_errors(self._sink, records):
                request = self._request(chunk)
                response = self._stub.Export(
                    request, timeout=self._timeout_s, metadata=self._headers or None
                )
            rejected = response.partial_success.rejected_spans
            if rejected:
                message = response.partial_success.error_message or "no reason given"
                raise SinkError(
                    self._uri,
                    records,
                    f"the receiver rejected {rejected} of {len(chunk)} spans: {message}",
                )

    def _request(self, events: list[TraceEvent]) -> Any:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
        from opentelemetry.proto.resource.v1.resource_pb2 import Resource
        from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

        resource = Resource()
        _put(resource.attributes.add(), "service.name", self._service_name)
        scope = InstrumentationScope(name="beam_agents", version=__version__)
        spans = ScopeSpans(scope=scope)
        for event in events:
            _fill_span(spans.spans.add(), event)
        return ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[spans])]
        )


def _put(kv: Any, key: str, value: str | int) -> None:
    kv.key = key
    if isinstance(value, str):
        kv.value.string_value = value
    else:
        kv.value.int_value = value


def _put_attribute(kv: Any, key: str, value: AttributeValue) -> None:
    kv.key = key
    which = value.WhichOneof("value")
    if which == "string_value":
        kv.value.string_value = value.string_value
    elif which == "int_value":
        kv.value.int_value = value.int_value
    elif which == "bool_value":
        kv.value.bool_value = value.bool_value
    elif which == "double_value":
        kv.value.double_value = value.double_value
    elif which == "bytes_value":
        kv.value.bytes_value = value.bytes_value
    # An unset AttributeValue stays an empty AnyValue, OTLP's "no value".


def _fill_span(span: Any, event: TraceEvent) -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    span.trace_id = event.trace_id
    span.span_id = event.span_id
    span.parent_span_id = event.parent_span_id
    span.name = span_name(event)
    span.kind = (
        Span.SPAN_KIND_CLIENT if event.kind == TraceEvent.LLM_CALL else Span.SPAN_KIND_INTERNAL
    )
    span.start_time_unix_nano = _nanos(event.start_ms)
    span.end_time_unix_nano = _nanos(max(event.end_ms, event.start_ms))
    names = set(event.attributes)
    operation = _OPERATIONS.get(event.kind)
    if operation and ATTR_OPERATION not in names:
        _put(span.attributes.add(), ATTR_OPERATION, operation)
    for name in sorted(names):
        _put_attribute(span.attributes.add(), name, event.attributes[name])
    extra: list[tuple[str, str | int]] = [
        ("beam_agents.entity_key", event.entity_key.hex()),
        ("beam_agents.seq", event.seq),
        ("beam_agents.trace.index", event.index),
        ("beam_agents.trace.kind", kind_name(event.kind)),
        ("beam_agents.trace.name", event.name),
    ]
    for key, value in extra:
        if key not in names:
            _put(span.attributes.add(), key, value)
    error_type = error_type_of(event)
    if event.kind == TraceEvent.ACTIVATION_FAILED or error_type:
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = error_type or event.name
