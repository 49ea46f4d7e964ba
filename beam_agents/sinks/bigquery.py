"""The ``bigquery://project.dataset.table`` trace sink: the Storage Write API, one row per event.

Rows follow ``beam_agents.bigquery_rows.TRACE_TABLE_SCHEMA``, sent as protocol-buffer
rows (``AppendRows`` of ``google-cloud-bigquery-storage``'s ``BigQueryWriteClient``)
with a writer schema built from that table schema. Two write modes
(``write_mode``):

- ``default`` (the default): the table's ``_default`` stream. Rows are visible at
  once; delivery is at least once (a retried bundle appends its rows again).
- ``committed``: each flush writes a ``PENDING`` stream at explicit offsets, finalizes
  it and commits it with ``BatchCommitWriteStreams``: a flush's rows appear all
  together or not at all, and an append the client retries at an offset already
  written is answered ``ALREADY_EXISTS`` and never written twice. This is what the
  API gives as exactly-once; a bundle the runner retries after its flush committed
  is still a new flush, whose copies ``rows_to_trace_events`` drops (by content).

Traces only: a snapshot has no row layout, and the URI is refused for
``snapshots_to``.

Options: ``create_table=true`` creates the table when it is missing (the dataset must
exist): the documented schema, partitioned by day on ``event_time`` and clustered by
``entity_key_hex, seq``, so the documented per-activation queries scan one partition
(``require_partition_filter=true`` also makes BigQuery refuse queries that do not
filter on it); ``timeout_s`` bounds each request, retries included.

Against an emulator: ``BIGQUERY_EMULATOR_HOST`` (REST, for creating the table) and
``BIGQUERY_STORAGE_EMULATOR_HOST`` (``host:port`` of its gRPC Storage API), with
anonymous credentials.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.bigquery_rows import (
    TRACE_TABLE_CLUSTERING,
    TRACE_TABLE_PARTITION_FIELD,
    TRACE_TABLE_SCHEMA,
    FieldSpec,
    event_time_micros,
)
from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks.base import describe_records, describe_trace, map_client_errors
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.telemetry import ActivationTelemetry
from beam_agents.trace_events import kind_name

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_REQUEST_BYTES",
    "WRITE_MODES",
    "BigQuerySinkWriter",
    "row_descriptor",
]

DEFAULT_TIMEOUT_S = 60.0
"""Bound on one request, its retries included, unless ``timeout_s`` says otherwise."""

MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""Serialized rows per ``AppendRows`` request (the API's limit is 10 MB)."""

WRITE_MODES = ("default", "committed")

_ROW_MESSAGE = "TraceRow"
_ALREADY_EXISTS = 6  # google.rpc.Code
_PROTO_TYPES = {
    "BYTES": "TYPE_BYTES",
    "INT64": "TYPE_INT64",
    "STRING": "TYPE_STRING",
    "BOOL": "TYPE_BOOL",
    "FLOAT64": "TYPE_DOUBLE",
    "TIMESTAMP": "TYPE_INT64",  # microseconds since the epoch, as the Write API takes it
}


def row_descriptor() -> Any:
    """The writer schema: a self-contained proto2 ``DescriptorProto`` of ``TRACE_TABLE_SCHEMA``.

    proto2 so that every field has presence: an empty string or a zero is written
    as such, never as NULL. Nested records are nested message types (the Write API
    takes one message with no external references).
    """
    from google.protobuf import descriptor_pb2

    def message(name: str, fields: list[FieldSpec] | tuple[FieldSpec, ...]) -> Any:
        proto = descriptor_pb2.DescriptorProto(name=name)
        for number, spec in enumerate(fields, start=1):
            field = proto.field.add(name=spec["name"], number=number)
            field.label = (
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                if spec.get("mode") == "REPEATED"
                else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
            )
            if spec["type"] == "RECORD":
                nested_name = spec["name"].title().replace("_", "")
                proto.nested_type.add().CopyFrom(message(nested_name, spec["fields"]))
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                field.type_name = nested_name
            else:
                field.type = getattr(
                    descriptor_pb2.FieldDescriptorProto, _PROTO_TYPES[spec["type"]]
                )
        return proto

    return message(_ROW_MESSAGE, TRACE_TABLE_SCHEMA)


def _row_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(
        name="beam_agents_bigquery_row.proto", package="beam_agents_bigquery", syntax="proto2"
    )
    file.message_type.add().CopyFrom(row_descriptor())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"beam_agents_bigquery.{_ROW_MESSAGE}")
    )


def _fill_row(row: Any, event: TraceEvent) -> None:
    row.entity_key = event.entity_key
    row.seq = event.seq
    row.index = event.index
    row.kind = kind_name(event.kind)
    row.name = event.name
    row.start_ms = event.start_ms
    row.end_ms = event.end_ms
    for name in sorted(event.attributes):
        value = event.attributes[name]
        item = row.attributes.add()
        item.name = name
        which = value.WhichOneof("value")
        if which is not None:
            item.value_type = which
            setattr(item, which, getattr(value, which))
    row.trace_id = event.trace_id
    row.span_id = event.span_id
    row.parent_span_id = event.parent_span_id
    row.event_time = event_time_micros(event.start_ms)
    row.entity_key_hex = event.entity_key.hex()


class BigQuerySinkWriter:
    """Writes trace events as rows into one BigQuery table through the Storage Write API."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        self._timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        self._create_table = options.get("create_table", "false") == "true"
        self._require_partition_filter = options.get("require_partition_filter") == "true"
        self._mode = options.get("write_mode", "default")
        if self._mode not in WRITE_MODES:
            raise ConfigError(
                f"sink {self._uri}: write_mode={self._mode!r} must be one of "
                f"{', '.join(WRITE_MODES)}"
            )
        self._client: Any = None
        self._row_class: Any = None
        self._schema: Any = None
        self._rows: list[tuple[bytes, str]] = []

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Create the write client, and the table when ``create_table=true`` and it is missing.

        Raises:
            SinkError: The client cannot be created (e.g. no credentials), or the table
                cannot be created.
        """
        with map_client_errors(self._sink, "no record (creating the client)"):
            from google.cloud import bigquery_storage_v1
            from google.cloud.bigquery_storage_v1 import types

            self._row_class = _row_class()
            self._schema = types.ProtoSchema(proto_descriptor=row_descriptor())
            emulator = os.environ.get("BIGQUERY_STORAGE_EMULATOR_HOST")
            if emulator:
                import grpc
                from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
                    BigQueryWriteGrpcTransport,
                )

                channel = grpc.insecure_channel(emulator)
                self._client = bigquery_storage_v1.BigQueryWriteClient(  # type: ignore[no-untyped-call]
                    transport=BigQueryWriteGrpcTransport(channel=channel)
                )
            else:
                self._client = bigquery_storage_v1.BigQueryWriteClient()  # type: ignore[no-untyped-call]
        if self._create_table:
            with map_client_errors(self._sink, "no record (creating the table)"):
                self._ensure_table()

    def _ensure_table(self) -> None:
        from google.cloud import bigquery

        credentials = None
        if os.environ.get("BIGQUERY_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        client = bigquery.Client(project=self._sink.project, credentials=credentials)
        try:
            schema = [bigquery.SchemaField.from_api_repr(dict(f)) for f in TRACE_TABLE_SCHEMA]
            table = bigquery.Table(self._sink.table_path, schema=schema)
            table.time_partitioning = bigquery.TimePartitioning(
                type_=bigquery.TimePartitioningType.DAY, field=TRACE_TABLE_PARTITION_FIELD
            )
            table.clustering_fields = list(TRACE_TABLE_CLUSTERING)
            if self._require_partition_filter:
                table.require_partition_filter = True
            retry = bigquery.DEFAULT_RETRY.with_timeout(self._timeout_s)
            client.create_table(table, exists_ok=True, retry=retry, timeout=self._timeout_s)
        finally:
            client.close()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Release the client; rows not flushed are not written."""
        client, self._client = self._client, None
        self._rows.clear()
        if client is not None:
            with map_client_errors(self._sink, "no record (closing the client)"):
                # The GAPIC client releases its transport (channel) on __exit__, its
                # documented way to close one client that owns its transport.
                client.__exit__(None, None, None)

    # ------------------------------------------------------------------ writing

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Serialize one event's row for the next flush."""
        if self._row_class is None:
            raise SinkError(self._uri, describe_trace(event), "the writer is not open")
        row = self._row_class()
        _fill_row(row, event)
        self._rows.append((row.SerializeToString(), describe_trace(event)))

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Refused: ``bigquery://`` takes traces only (the URI is refused for snapshots too)."""
        raise ConfigError(
            f"sink {self._uri} takes traces only: a snapshot is an opaque per-key state image "
            f"with no row layout"
        )

    def flush(self) -> None:
        """Append the buffered rows (``write_mode`` says to which stream); fail on any refusal.

        Raises:
            SinkError: A request failed or timed out, or BigQuery refused a row (naming
                its record and BigQuery's reason). In ``committed`` mode nothing of the
                flush is visible then.
        """
        rows, self._rows = self._rows, []
        if not rows:
            return
        if self._client is None:
            raise SinkError(self._uri, describe_records([r[1] for r in rows]),
                            "the writer is not open")  # fmt: skip
        records = describe_records([r[1] for r in rows])
        with map_client_errors(self._sink, records):
            parent = f"projects/{self._sink.project}/datasets/{self._sink.dataset}/tables/{self._sink.table}"
            if self._mode == "default":
                self._append(f"{parent}/streams/_default", rows, with_offsets=False)
                return
            from google.api_core.retry import Retry
            from google.cloud.bigquery_storage_v1 import types

            # Unary calls retry within timeout_s (the client's own default would retry
            # for a day); the append stream is not retried (see _append).
            retry = Retry(timeout=self._timeout_s)
            stream = self._client.create_write_stream(
                parent=parent,
                write_stream=types.WriteStream(type_=types.WriteStream.Type.PENDING),
                retry=retry,
                timeout=self._timeout_s,
            )
            self._append(stream.name, rows, with_offsets=True)
            self._client.finalize_write_stream(
                name=stream.name, retry=retry, timeout=self._timeout_s
            )
            committed = self._client.batch_commit_write_streams(
                types.BatchCommitWriteStreamsRequest(parent=parent, write_streams=[stream.name]),
                retry=retry,
                timeout=self._timeout_s,
            )
        if committed.stream_errors:
            error = committed.stream_errors[0]
            raise SinkError(
                self._uri,
                records,
                f"BigQuery did not commit the flush's stream: {error.error_message}",
            )

    def _append(self, stream: str, rows: list[tuple[bytes, str]], *, with_offsets: bool) -> None:
        from google.cloud.bigquery_storage_v1 import types

        chunks = list(_chunks(rows))
        offsets = []
        offset = 0
        for chunk in chunks:
            offsets.append(offset)
            offset += len(chunk)

        def requests() -> Iterator[Any]:
            for number, (chunk, start) in enumerate(zip(chunks, offsets, strict=True)):
                request = types.AppendRowsRequest(
                    proto_rows=types.AppendRowsRequest.ProtoData(
                        rows=types.ProtoRows(serialized_rows=[data for data, _ in chunk])
                    )
                )
                if number == 0:  # the stream and the writer schema go in the first request
                    request.write_stream = stream
                    request.proto_rows.writer_schema = self._schema
                if with_offsets:
                    request.offset = start  # type: ignore[assignment]  # proto-plus wraps an int
                yield request

        answered = 0
        # One stream call, bounded by timeout_s and not retried by the client (its default
        # policy retries for up to a day, and a retried default-stream append could write
        # twice): a failure fails the flush, and the runner's retry of the bundle is the retry.
        responses = self._client.append_rows(
            requests=requests(), retry=None, timeout=self._timeout_s
        )
        for response in responses:
            if answered < len(chunks):
                self._check(response, chunks[answered])
            answered += 1
        if answered < len(chunks):
            raise SinkError(
                self._uri,
                describe_records([d for chunk in chunks[answered:] for _, d in chunk]),
                f"BigQuery answered {answered} of {len(chunks)} appends",
            )

    def _check(self, response: Any, chunk: list[tuple[bytes, str]]) -> None:
        if response.row_errors:
            first = response.row_errors[0]
            index = int(first.index)
            record = chunk[index][1] if 0 <= index < len(chunk) else f"row {index}"
            more = len(response.row_errors) - 1
            tail = f" ({more} more rows refused)" if more else ""
            raise SinkError(self._uri, record, f"row refused by BigQuery: {first.message}{tail}")
        code = response.error.code if "error" in response else 0
        if code == _ALREADY_EXISTS:
            return  # this offset was written by an earlier try of the same append: not again
        if code:
            raise SinkError(
                self._uri,
                describe_records([d for _, d in chunk]),
                f"BigQuery refused the append: {response.error.message} (code {code})",
            )


def _chunks(rows: list[tuple[bytes, str]]) -> Iterator[list[tuple[bytes, str]]]:
    current: list[tuple[bytes, str]] = []
    size = 0
    for item in rows:
        if current and size + len(item[0]) > MAX_REQUEST_BYTES:
            yield current
            current, size = [], 0
        current.append(item)
        size += len(item[0])
    if current:
        yield current
