"""The ``bigquery://project.dataset.table`` trace sink: streaming inserts, one row per event.

Rows follow ``beam_agents.bigquery_rows.TRACE_TABLE_SCHEMA`` (made by
``trace_event_to_row``); each row's insert id is ``trace_row_id(event)``, a
digest of ``(entity_key, seq, index)``, so the rows of a retried bundle are
de-duplicated by BigQuery (best-effort, as BigQuery documents;
``rows_to_trace_events`` drops any copy that gets through). Traces only: a
snapshot has no row layout, and the URI is refused for ``snapshots_to``.

Options: ``create_table=true`` creates the table with the documented schema
when it is missing (the dataset must exist); ``timeout_s`` bounds each insert
request, retries included. ``BIGQUERY_EMULATOR_HOST`` is honoured as by the
BigQuery client, with anonymous credentials.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.bigquery_rows import TRACE_TABLE_SCHEMA, trace_event_to_row, trace_row_id
from beam_agents.errors import ConfigError, SinkError
from beam_agents.sinks.base import describe_records, describe_trace, map_client_errors
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.telemetry import ActivationTelemetry

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_ROWS_PER_REQUEST", "BigQuerySinkWriter"]

DEFAULT_TIMEOUT_S = 60.0
"""Bound on one insert request, its retries included, unless ``timeout_s`` says otherwise."""

MAX_ROWS_PER_REQUEST = 500
"""BigQuery's recommended ceiling on rows per streaming-insert request."""

_MAX_REQUEST_BYTES = 8 * 1024 * 1024  # under the 10 MB request limit, with room for JSON framing


class BigQuerySinkWriter:
    """Streams trace events as rows into one BigQuery table."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        self._timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        self._create_table = options.get("create_table", "false") == "true"
        self._client: Any = None
        self._retry: Any = None
        self._rows: list[tuple[dict[str, Any], str, str, int]] = []

    def open(self) -> None:
        """Create the client, and the table when ``create_table=true`` and it is missing.

        Raises:
            SinkError: The client cannot be created (e.g. no credentials), or
                the table cannot be created.
        """
        with map_client_errors(self._sink, "no record (creating the client)"):
            from google.cloud import bigquery

            credentials = None
            if os.environ.get("BIGQUERY_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
            self._client = bigquery.Client(project=self._sink.project, credentials=credentials)
            self._retry = bigquery.DEFAULT_RETRY.with_timeout(self._timeout_s)
        if self._create_table:
            with map_client_errors(self._sink, "no record (creating the table)"):
                schema = [bigquery.SchemaField.from_api_repr(dict(f)) for f in TRACE_TABLE_SCHEMA]
                table = bigquery.Table(self._sink.table_path, schema=schema)
                self._client.create_table(
                    table, exists_ok=True, retry=self._retry, timeout=self._timeout_s
                )

    def close(self) -> None:
        """Close the client; rows not flushed are not inserted."""
        client, self._client = self._client, None
        self._rows.clear()
        if client is not None:
            with map_client_errors(self._sink, "no record (closing the client)"):
                client.close()

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Buffer one event's row for the next flush."""
        row = trace_event_to_row(event)
        size = len(json.dumps(row))
        self._rows.append((row, trace_row_id(event), describe_trace(event), size))

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Refused: ``bigquery://`` takes traces only (the URI is refused for snapshots too)."""
        raise ConfigError(
            f"sink {self._uri} takes traces only: a snapshot is an opaque per-key state image "
            f"with no row layout"
        )

    def flush(self) -> None:
        """Insert the buffered rows (in requests of at most 500 rows); fail on any refused row.

        Raises:
            SinkError: A request failed, or BigQuery reported ``insertErrors``
                for a row (naming its record and BigQuery's reason).
        """
        rows, self._rows = self._rows, []
        if not rows:
            return
        if self._client is None:
            raise SinkError(
                self._uri, describe_records([r[2] for r in rows]), "the writer is not open"
            )
        for chunk in _chunks(rows):
            records = [description for _, _, description, _ in chunk]
            with map_client_errors(self._sink, describe_records(records)):
                errors = self._client.insert_rows_json(
                    self._sink.table_path,
                    [row for row, _, _, _ in chunk],
                    row_ids=[row_id for _, row_id, _, _ in chunk],
                    retry=self._retry,
                    timeout=self._timeout_s,
                )
            if errors:
                raise SinkError(self._uri, *_first_refusal(errors, records))


def _chunks(
    rows: list[tuple[dict[str, Any], str, str, int]],
) -> list[list[tuple[dict[str, Any], str, str, int]]]:
    chunks: list[list[tuple[dict[str, Any], str, str, int]]] = []
    current: list[tuple[dict[str, Any], str, str, int]] = []
    size = 0
    for item in rows:
        if current and (
            len(current) >= MAX_ROWS_PER_REQUEST or size + item[3] > _MAX_REQUEST_BYTES
        ):
            chunks.append(current)
            current, size = [], 0
        current.append(item)
        size += item[3]
    if current:
        chunks.append(current)
    return chunks


def _first_refusal(errors: list[dict[str, Any]], records: list[str]) -> tuple[str, str]:
    """(record, cause) for the first row BigQuery refused, from its ``insertErrors``."""

    # BigQuery refuses a whole request when one row is bad, reporting the other
    # rows as "stopped"; name the row that was actually wrong when there is one.
    def is_stopped(entry: dict[str, Any]) -> bool:
        return all(e.get("reason") == "stopped" for e in entry.get("errors", []))

    ordered = sorted(errors, key=is_stopped)
    first = ordered[0]
    index = int(first.get("index", 0))
    record = records[index] if 0 <= index < len(records) else f"row {index}"
    reasons = "; ".join(
        f"{e.get('location') or '-'}: {e.get('message') or e.get('reason')}"
        for e in first.get("errors", [])
    )
    bad = sum(1 for e in errors if not is_stopped(e))
    more = f" ({bad - 1} more rows refused)" if bad > 1 else ""
    return record, f"row refused by BigQuery: {reasons}{more}"
