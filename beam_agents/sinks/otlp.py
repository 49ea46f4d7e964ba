"""The ``otlp://`` trace sink: spans through the official OpenTelemetry SDK exporters.

Each trace event becomes one SDK ``ReadableSpan`` handed to the SDK's own
``OTLPSpanExporter``, over gRPC (``opentelemetry-exporter-otlp-proto-grpc``) or
HTTP/protobuf (``opentelemetry-exporter-otlp-proto-http``). The exporter sends the
span ids it is given, so by default a span carries the trace's deterministic ids and a
span in a tracing UI names exactly the event replay compares. With
``instance_id=...`` (a pipeline's identity: ``prod-eu``, a deployment id) every id is
mixed with it, so two pipelines (staging and prod, or a reset one) never share a
trace id; the trace's own ids stay on each span as ``beam_agents.trace_id`` /
``beam_agents.span_id``.

Times are real: the DoFn measures each activation on a side channel
(``beam_agents.telemetry``) and each span starts and ends when its step ran; the
activation clock (the event's ``start_ms``, what replay compares) is the attribute
``beam_agents.activation_clock_ms``. Events written without telemetry (a sink opened
by hand on a stored trace) fall back to the activation clock.

Names and attributes follow the OpenTelemetry GenAI semantic conventions
(``span_name``, ``span_attributes``; docs/sinks.md lists each attribute with its
requirement level). Tokens are reported for billed calls only: a cache hit's trace
event repeats the cached call's usage, which is shown as
``beam_agents.cached_usage.*`` instead of ``gen_ai.usage.*``, so token sums count
what was billed.

Configuration: the URI, the sink options, then the standard ``OTEL_EXPORTER_OTLP_*``
environment variables (read by the SDK for whatever the URI and options leave unset),
then the SDK's defaults. ``otlp://`` with no host takes the endpoint from
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks.base import (
    cause_of,
    describe_records,
    describe_trace,
    map_client_errors,
)
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.telemetry import ActivationTelemetry
from beam_agents.trace_events import (
    ATTR_BILLED,
    ATTR_CACHE_HIT,
    ATTR_ERROR_TYPE,
    ATTR_PROVIDER,
    ATTR_REQUEST_MODEL,
    ATTR_STOP_REASON,
    ATTR_TOOL_NAME,
    ATTR_USAGE_INPUT,
    ATTR_USAGE_OUTPUT,
    kind_name,
)

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "MAX_SPANS_PER_REQUEST",
    "OtlpSinkWriter",
    "mixed_ids",
    "span_attributes",
    "span_name",
]

MAX_SPANS_PER_REQUEST = 1000
"""Spans per export request (keeps requests well under gRPC's 4 MiB default)."""

DEFAULT_SERVICE_NAME = "beam-agents"
"""``service.name`` unless the ``service_name`` option or ``OTEL_SERVICE_NAME`` says otherwise."""

PROTOCOLS = ("grpc", "http/protobuf")

_NS_PER_MS = 1_000_000
_MAX_INT64 = 2**63 - 1
_ID_MIX_PREFIX = b"beam-agents/otlp-instance-id/v1\x00"

# GenAI semantic conventions: gen_ai.operation.name per kind, where one exists.
_OPERATIONS = {
    TraceEvent.ACTIVATION_START: "invoke_agent",
    TraceEvent.LLM_CALL: "chat",
    TraceEvent.TOOL_CALL: "execute_tool",
}
# Attributes of the trace that the span shows under another name (or not at all).
_USAGE = {
    ATTR_USAGE_INPUT: "beam_agents.cached_usage.input_tokens",
    ATTR_USAGE_OUTPUT: "beam_agents.cached_usage.output_tokens",
}


def _string(event: TraceEvent, name: str) -> str:
    value = event.attributes.get(name)
    return value.string_value if value is not None else ""


def span_name(event: TraceEvent, agent_name: str = "") -> str:
    """The span name of an event, as the GenAI conventions spell it.

    ``invoke_agent {agent}`` for ``ACTIVATION_START`` (``invoke_agent`` when the agent's
    name is not known); ``chat {gen_ai.request.model}`` for ``LLM_CALL``;
    ``execute_tool {gen_ai.tool.name}`` for ``TOOL_CALL``; for the kinds no convention
    covers, the kind in lower case and the event's name (``intent_staged issue_refund``,
    ``activation_failed ValueError``).
    """
    if event.kind == TraceEvent.ACTIVATION_START:
        return f"invoke_agent {agent_name}".strip()
    if event.kind == TraceEvent.LLM_CALL:
        return f"chat {_string(event, ATTR_REQUEST_MODEL) or event.name}".strip()
    if event.kind == TraceEvent.TOOL_CALL:
        return f"execute_tool {_string(event, ATTR_TOOL_NAME) or event.name}".strip()
    return f"{kind_name(event.kind).lower()} {event.name}".strip()


def conversation_id(entity_key: bytes) -> str:
    """``gen_ai.conversation.id``: the key's serial history is the conversation.

    The key as text when it is printable UTF-8 (``customer-42``), else its hex.
    """
    try:
        text = entity_key.decode("utf-8")
    except UnicodeDecodeError:
        return entity_key.hex()
    return text if text and text.isprintable() else entity_key.hex()


def _values(event: TraceEvent) -> dict[str, Any]:
    """The event's attribute values by name, unset ones left out (one pass over the map)."""
    values = {}
    for name, value in event.attributes.items():
        which = value.WhichOneof("value")
        if which is not None:
            values[name] = getattr(value, which)
    return values


def span_attributes(
    event: TraceEvent, telemetry: ActivationTelemetry | None = None
) -> dict[str, Any]:
    """The span's attributes: the GenAI conventions' where one applies, and the trace's own.

    Every attribute of the trace event is kept under its own name (the core names its
    ``gen_ai.*`` ones that way), except a cache hit's ``gen_ai.usage.*`` (renamed to
    ``beam_agents.cached_usage.*``: nothing was billed). docs/sinks.md lists them.
    """
    values = _values(event)
    hit = event.kind == TraceEvent.LLM_CALL and values.get(ATTR_CACHE_HIT) is True
    if hit:
        attrs = {_USAGE.get(name, name): values[name] for name in sorted(values)}
    else:
        attrs = {name: values[name] for name in sorted(values)}
    operation = _OPERATIONS.get(event.kind)
    if operation is not None:
        attrs["gen_ai.operation.name"] = operation
    attrs["gen_ai.conversation.id"] = conversation_id(event.entity_key)
    provider = values.get(ATTR_PROVIDER) or (telemetry.provider_name if telemetry else "")
    if event.kind == TraceEvent.ACTIVATION_START:
        if telemetry is not None and telemetry.agent_name:
            attrs["gen_ai.agent.name"] = telemetry.agent_name
        if provider:
            attrs["gen_ai.provider.name"] = provider
    elif event.kind == TraceEvent.LLM_CALL:
        if provider:
            attrs["gen_ai.provider.name"] = provider
        stop = values.get(ATTR_STOP_REASON)
        if stop:
            attrs["gen_ai.response.finish_reasons"] = [stop]
        details = telemetry.llm_calls.get(event.index) if telemetry is not None else None
        if details is not None:
            if details.response_id:
                attrs["gen_ai.response.id"] = details.response_id
            for key, value in (
                ("gen_ai.request.temperature", details.temperature),
                ("gen_ai.request.top_p", details.top_p),
                ("gen_ai.request.max_tokens", details.max_tokens),
                ("gen_ai.request.seed", details.seed),
            ):
                if value is not None:
                    attrs[key] = value
            if details.stop_sequences:
                attrs["gen_ai.request.stop_sequences"] = list(details.stop_sequences)
        if hit:
            attrs[ATTR_BILLED] = False
    elif event.kind == TraceEvent.TOOL_CALL:
        attrs["gen_ai.tool.type"] = "function"
    attrs["beam_agents.entity_key"] = event.entity_key.hex()
    attrs["beam_agents.seq"] = event.seq
    attrs["beam_agents.trace.index"] = event.index
    attrs["beam_agents.trace.kind"] = kind_name(event.kind)
    attrs["beam_agents.trace.name"] = event.name
    attrs["beam_agents.activation_clock_ms"] = event.start_ms
    return attrs


def mixed_ids(instance_id: str, trace_id: bytes, span_id: bytes) -> tuple[bytes, bytes]:
    """(trace id, span id) of a span of pipeline ``instance_id``; empty span id stays empty.

    A digest of the instance and the trace's own ids: deterministic (a retried bundle
    exports the same ids), and different for every instance.
    """
    base = _ID_MIX_PREFIX + instance_id.encode("utf-8") + b"\x00" + trace_id
    mixed_trace = hashlib.sha256(base).digest()[:16]
    mixed_span = hashlib.sha256(base + b"\x00" + span_id).digest()[:8] if span_id else b""
    return mixed_trace, mixed_span


def _nanos(ms: int) -> int:
    # The SDK takes int64 nanoseconds; an activation clock outside that range (never
    # produced from a real event time) is clamped.
    return min(max(ms, 0) * _NS_PER_MS, _MAX_INT64)


def _parse_headers(text: str, where: str) -> dict[str, str]:
    headers = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{where}: headers must be key=value pairs joined by commas")
        headers[key.strip().lower()] = value.strip()
    return headers


def _protocol(options: Mapping[str, str], where: str) -> str:
    protocol = (
        options.get("protocol")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"{where}: protocol {protocol!r} is not supported; use one of {', '.join(PROTOCOLS)} "
            f"(http/json is not)"
        )
    return protocol


def _resource_with_cached_hash(resource: Any) -> Any:
    """``resource`` as an equal ``Resource`` whose hash is computed once.

    The SDK's encoder groups spans by resource, hashing it for every span, and a
    ``Resource`` hashes by JSON-dumping its attributes each time: a tenth of an
    export's time. A resource never changes, so its hash need not either.
    """
    from opentelemetry.sdk.resources import Resource

    class _Resource(Resource):
        __slots__ = ("_hash",)

        def __hash__(self) -> int:
            cached: int | None = getattr(self, "_hash", None)
            if cached is None:
                cached = self._hash = super().__hash__()
            return cached

        def __eq__(self, other: object) -> bool:
            return super().__eq__(other)

    return _Resource(resource.attributes, resource.schema_url)


class _ExportOutcome:
    """What the receiver answered to the last export: an error, or spans it rejected.

    The SDK's exporters log a failure and return ``FAILURE`` (their logger drops repeated
    lines, so the log cannot be relied on for the cause), and they succeed on any OK
    answer, dropping its ``partial_success``. A sink never drops a record silently and
    names why it failed, so the answer is read here: for HTTP through the
    ``requests.Session`` the exporter is given (its public ``session`` argument), for
    gRPC by wrapping the exporter's stub (``_client``, checked when the sink opens).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rejected = 0
        self.message = ""
        self.error = ""

    def read(self, response: Any) -> None:
        partial = getattr(response, "partial_success", None)
        if partial is not None and partial.rejected_spans:
            self.rejected = int(partial.rejected_spans)
            self.message = partial.error_message or "no reason given"


class _ReadingStub:
    def __init__(self, stub: Any, outcome: _ExportOutcome) -> None:
        self._stub = stub
        self._outcome = outcome

    def Export(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = self._stub.Export(*args, **kwargs)
        except Exception as exc:
            code = getattr(exc, "code", None)
            details = getattr(exc, "details", None)
            if callable(code) and callable(details):
                self._outcome.error = f"{code().name}: {details()}"
            else:
                self._outcome.error = cause_of(exc)
            raise
        self._outcome.read(response)
        return response


def _reading_session(outcome: _ExportOutcome) -> Any:
    import requests
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    class ReadingSession(requests.Session):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().request(*args, **kwargs)
            except Exception as exc:
                outcome.error = cause_of(exc)
                raise
            if not response.ok:
                body = response.text[:200].strip().replace("\n", " ")
                outcome.error = f"HTTP {response.status_code} {response.reason}" + (
                    f": {body}" if body else ""
                )
            elif response.content:
                # An OK answer whose body is not the protobuf response (a proxy's page)
                # says nothing of rejected spans: the export counts as accepted.
                with contextlib.suppress(DecodeError):
                    outcome.read(ExportTraceServiceResponse.FromString(response.content))
            return response

    return ReadingSession()


class OtlpSinkWriter:
    """Exports trace events as spans through the SDK's OTLP exporter (gRPC or HTTP)."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        where = f"sink {self._uri}"
        self._protocol = _protocol(options, where)
        if sink.path and self._protocol == "grpc":
            raise ConfigError(
                f"{where}: OTLP/gRPC takes no path; write otlp://host:port, or set "
                f"protocol=http/protobuf for an HTTP endpoint with a path"
            )
        self._timeout_s = float(options["timeout_s"]) if "timeout_s" in options else None
        tls = options.get("tls")
        self._tls = None if tls is None else tls == "true"
        self._headers = _parse_headers(options["headers"], where) if "headers" in options else None
        compression = options.get("compression")
        if compression is not None and compression not in ("gzip", "none"):
            raise ConfigError(f"{where}: compression={compression!r} must be 'gzip' or 'none'")
        self._compression = compression
        self._service_name = options.get("service_name")
        self._instance_id = options.get("instance_id", "")
        self._exporter: Any = None
        self._resource: Any = None
        self._scope: Any = None
        self._outcome = _ExportOutcome()
        self._events: list[tuple[TraceEvent, ActivationTelemetry | None]] = []

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Create the SDK exporter (it connects lazily, at the first export).

        Raises:
            SinkError: The exporter cannot be created.
        """
        with map_client_errors(self._sink, "no record (creating the OTLP exporter)"):
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope

            created = Resource.create(self._resource_attributes())
            self._resource = _resource_with_cached_hash(created)
            self._scope = InstrumentationScope("beam_agents", __version__)
            if self._protocol == "grpc":
                self._exporter = self._grpc_exporter()
            else:
                self._exporter = self._http_exporter()

    def _resource_attributes(self) -> dict[str, str]:
        attrs: dict[str, str] = {}
        if self._service_name:
            attrs["service.name"] = self._service_name
        elif not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        ):
            attrs["service.name"] = DEFAULT_SERVICE_NAME
        if self._instance_id:
            attrs["service.instance.id"] = self._instance_id
        return attrs

    def _grpc_exporter(self) -> Any:
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        kwargs: dict[str, Any] = {}
        if self._sink.hosts:
            kwargs["endpoint"] = self._sink.hosts[0]
            # A host:port in the URI is plaintext (a collector beside the workers) unless
            # tls=true; with no host, the SDK's own rules (env, endpoint scheme) decide.
            kwargs["insecure"] = not self._tls
        elif self._tls is not None:
            kwargs["insecure"] = not self._tls
        if self._timeout_s is not None:
            kwargs["timeout"] = self._timeout_s
        if self._headers is not None:
            kwargs["headers"] = tuple(self._headers.items())
        if self._compression is not None:
            kwargs["compression"] = (
                grpc.Compression.Gzip
                if self._compression == "gzip"
                else grpc.Compression.NoCompression
            )
        exporter = OTLPSpanExporter(**kwargs)
        stub = getattr(exporter, "_client", None)
        if stub is None or not hasattr(stub, "Export"):
            raise SinkError(
                self._uri,
                "no record (creating the OTLP exporter)",
                "this opentelemetry-exporter-otlp-proto-grpc has no Export stub to read "
                "rejected spans from; install a version the [otlp] extra names",
            )
        exporter._client = _ReadingStub(stub, self._outcome)  # type: ignore[assignment]
        return exporter

    def _http_exporter(self) -> Any:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        kwargs: dict[str, Any] = {"session": _reading_session(self._outcome)}
        if self._sink.hosts:
            scheme = "https" if self._tls else "http"
            kwargs["endpoint"] = (
                f"{scheme}://{self._sink.hosts[0]}{self._sink.path or '/v1/traces'}"
            )
        if self._timeout_s is not None:
            kwargs["timeout"] = self._timeout_s
        if self._headers is not None:
            kwargs["headers"] = self._headers
        if self._compression is not None:
            kwargs["compression"] = (
                Compression.Gzip if self._compression == "gzip" else Compression.NoCompression
            )
        return OTLPSpanExporter(**kwargs)

    def close(self) -> None:
        """Shut the exporter down; events not flushed are not exported."""
        exporter, self._exporter = self._exporter, None
        self._events.clear()
        if exporter is not None:
            with map_client_errors(self._sink, "no record (shutting the OTLP exporter down)"):
                exporter.shutdown()

    # ------------------------------------------------------------------ writing

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Buffer one event; it is exported as a span at the next flush."""
        self._events.append((event, telemetry))

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Refused: ``otlp://`` is a traces-only exporter."""
        raise ConfigError(f"sink {self._uri}: otlp:// is a traces-only exporter")

    def flush(self) -> None:
        """Export the buffered events as spans; fail unless the receiver accepted every span.

        Raises:
            SinkError: The export failed (the SDK exporter's own retries and
                ``timeout_s`` included; the cause is what it reported), or the
                receiver answered that it rejected spans.
        """
        events, self._events = self._events, []
        if not events:
            return
        if self._exporter is None:
            raise SinkError(self._uri, describe_records([describe_trace(e) for e, _ in events]),
                            "the writer is not open")  # fmt: skip
        from opentelemetry.sdk.trace.export import SpanExportResult

        # Activations of this flush that failed, with their error type: their root spans
        # are errors too. (A bundle holds each activation's events whole.)
        failures = {
            (e.entity_key, e.seq): _string(e, ATTR_ERROR_TYPE) or e.name
            for e, _ in events
            if e.kind == TraceEvent.ACTIVATION_FAILED
        }
        for start in range(0, len(events), MAX_SPANS_PER_REQUEST):
            chunk = events[start : start + MAX_SPANS_PER_REQUEST]
            records = describe_records([describe_trace(e) for e, _ in chunk])
            self._outcome.reset()
            with map_client_errors(self._sink, records):
                spans = [
                    self._span(event, telemetry, failures.get((event.entity_key, event.seq)))
                    for event, telemetry in chunk
                ]
                result = self._exporter.export(spans)
            if result is not SpanExportResult.SUCCESS:
                said = self._outcome.error or "the exporter gave no reason (see its log)"
                raise SinkError(self._uri, records, f"the OTLP export failed: {said}")
            if self._outcome.rejected:
                raise SinkError(
                    self._uri,
                    records,
                    f"the receiver rejected {self._outcome.rejected} of {len(chunk)} spans: "
                    f"{self._outcome.message}",
                )

    # ------------------------------------------------------------------ spans

    def _ids(self, event: TraceEvent) -> tuple[bytes, bytes, bytes]:
        if not self._instance_id:
            return event.trace_id, event.span_id, event.parent_span_id
        trace_id, span_id = mixed_ids(self._instance_id, event.trace_id, event.span_id)
        _, parent = mixed_ids(self._instance_id, event.trace_id, event.parent_span_id)
        return trace_id, span_id, parent

    def _span(
        self, event: TraceEvent, telemetry: ActivationTelemetry | None, failed_with: str | None
    ) -> Any:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        trace_id, span_id, parent_id = self._ids(event)
        flags = TraceFlags(TraceFlags.SAMPLED)
        context = SpanContext(
            int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big"), False, flags
        )
        parent = (
            SpanContext(
                int.from_bytes(trace_id, "big"), int.from_bytes(parent_id, "big"), False, flags
            )
            if parent_id
            else None
        )
        attrs = span_attributes(event, telemetry)
        if self._instance_id:
            attrs["beam_agents.trace_id"] = event.trace_id.hex()
            attrs["beam_agents.span_id"] = event.span_id.hex()
        wall = telemetry.span_unix_ns(event.index) if telemetry is not None else None
        if wall is None:
            start = _nanos(event.start_ms)
            end = _nanos(max(event.end_ms, event.start_ms))
        else:
            start, end = wall
        error_type = str(attrs.get(ATTR_ERROR_TYPE, ""))
        if event.kind == TraceEvent.ACTIVATION_START and failed_with is not None:
            # The agent invocation ended in an error: its span says so (error.type is
            # conditionally required when the operation ended in an error).
            error_type = failed_with
            attrs[ATTR_ERROR_TYPE] = failed_with
        failed = event.kind == TraceEvent.ACTIVATION_FAILED or bool(error_type)
        status = (
            Status(StatusCode.ERROR, error_type or event.name)
            if failed
            else Status(StatusCode.UNSET)
        )
        kind = SpanKind.CLIENT if event.kind == TraceEvent.LLM_CALL else SpanKind.INTERNAL
        return ReadableSpan(
            name=span_name(event, telemetry.agent_name if telemetry is not None else ""),
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=attrs,
            kind=kind,
            status=status,
            start_time=start,
            end_time=max(end, start),
            instrumentation_scope=self._scope,
        )
