"""What every sink writer offers the DoFn, and where client errors become ``SinkError``.

A writer is made per DoFn instance in ``setup`` (never pickled), opened there,
written to for each element, flushed in ``finish_bundle`` and closed in
``teardown``. ``flush`` is the durability point: it returns only when every
record written since the last flush has been delivered, and otherwise raises
``SinkError`` so the runner fails the bundle and retries it (docs/sinks.md, "Delivery and failure": a sink
never drops a record and carries on). Records may therefore arrive more than
once; they are deterministic bytes, so a consumer can drop copies by content
or by ``(entity_key, seq, index)``.

The client libraries are imported only inside ``open_sink`` for the scheme
actually opened: ``import beam_agents.sinks`` loads none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, runtime_checkable

from beam_agents._extras import import_extra
from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.errors import BeamAgentsError, SinkError
from beam_agents.sinks.uri import Role, SinkUri, parse_sink_uri, resolve_sink_options
from beam_agents.telemetry import ActivationTelemetry

__all__ = [
    "SinkWriter",
    "describe_snapshot",
    "describe_trace",
    "map_client_errors",
    "open_sink",
]

_KEY_HEX_SHOWN = 64


@runtime_checkable
class SinkWriter(Protocol):
    """One sink connection, owned by one DoFn instance.

    Not thread-safe: a DoFn instance processes one bundle at a time.
    """

    def open(self) -> None:
        """Connect or create the client (``DoFn.setup``).

        Raises:
            SinkError: The client cannot be created.
        """

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Queue one trace event; it is delivered by the next ``flush`` at the latest.

        ``telemetry`` is its activation's wall times (``beam_agents.telemetry``), where
        the pipeline measured them: ``otlp://`` times its spans with them; the sinks that
        carry the trace's own bytes ignore it (they never go into a trace record).

        Raises:
            SinkError: The record is refused at once (e.g. too large).
        """

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Queue one state snapshot; it is delivered by the next ``flush`` at the latest.

        Raises:
            SinkError: The record is refused at once.
        """

    def flush(self) -> None:
        """Block until every record written since the last flush is delivered (``finish_bundle``).

        After a flush that raised, the writer has forgotten those records
        (the runner's retry of the bundle writes them again) and is ready
        for the next bundle.

        Raises:
            SinkError: Some record was not delivered within the sink's
                timeout; names the URI and the (first) record.
        """

    def close(self) -> None:
        """Release the client (``DoFn.teardown``); records not flushed are not delivered."""


def describe_trace(event: TraceEvent) -> str:
    """How error messages name a trace record: ``trace key=6b31 seq=3 index=2``."""
    return f"trace key={_key_hex(event.entity_key)} seq={event.seq} index={event.index}"


def describe_snapshot(snapshot: StateSnapshot) -> str:
    """How error messages name a snapshot record: ``snapshot key=6b31 seq=3 request_id='r1'``."""
    return (
        f"snapshot key={_key_hex(snapshot.entity_key)} seq={snapshot.seq} "
        f"request_id={snapshot.request_id!r}"
    )


def _key_hex(key: bytes) -> str:
    shown = key.hex()
    if len(shown) > _KEY_HEX_SHOWN:
        return f"{shown[:_KEY_HEX_SHOWN]}…({len(key)} bytes)"
    return shown or "''"


def describe_records(records: list[str]) -> str:
    """``records[0]``, plus how many more there are."""
    if not records:
        return "no record"
    if len(records) == 1:
        return records[0]
    return f"{records[0]} (and {len(records) - 1} more)"


def cause_of(exc: BaseException) -> str:
    """A one-line cause: the client exception's type and message."""
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextmanager
def map_client_errors(sink: SinkUri, record: str) -> Iterator[None]:
    """Turn any exception a client library raises inside the block into ``SinkError``.

    The sink boundary (STYLE: third-party errors are mapped at the boundary):
    nothing of confluent_kafka, google.api_core, grpc or requests escapes a
    writer's methods. Our own errors pass through unchanged. The original is
    chained (``raise ... from``) so the traceback keeps it.
    """
    try:
        yield
    except BeamAgentsError:
        raise
    except Exception as exc:
        raise SinkError(sink.redacted, record, cause_of(exc)) from exc


# The client library each scheme needs, and the extra that installs it (pyproject.toml).
_CLIENTS = {
    "kafka": ("confluent_kafka", "confluent-kafka"),
    "pubsub": ("google.cloud.pubsub_v1", "google-cloud-pubsub"),
    "bigquery": ("google.cloud.bigquery_storage_v1", "google-cloud-bigquery-storage"),
    "otlp": ("opentelemetry.sdk.trace", "opentelemetry-sdk"),
}

_MODULES = {
    "kafka": ("beam_agents.sinks.kafka", "KafkaSinkWriter"),
    "pubsub": ("beam_agents.sinks.pubsub", "PubSubSinkWriter"),
    "bigquery": ("beam_agents.sinks.bigquery", "BigQuerySinkWriter"),
    "otlp": ("beam_agents.sinks.otlp", "OtlpSinkWriter"),
    "file": ("beam_agents.sinks.file", "FileSinkWriter"),
}


def open_sink(
    uri: SinkUri | str, *, role: Role, options: Mapping[str, str] | None = None
) -> SinkWriter:
    """Make and open the writer for a sink URI (call it in ``DoFn.setup``).

    Imports the client library of this one scheme, here and not before.

    Args:
        uri: The URI, parsed or as configured.
        role: ``"traces"`` or ``"snapshots"``; a traces-only scheme is refused
            for snapshots as ``parse_sink_uri`` does.
        options: Sink options from the configuration; the URI's query
            parameters override them (see ``resolve_sink_options``).

    Returns:
        The open writer.

    Raises:
        ConfigError: The URI or an option is refused.
        SinkError: The client cannot be created.
        MissingExtraError: The scheme's client library is not installed (an
            ``ImportError`` naming the extra: ``pip install 'beam-agents[kafka]'``).
    """
    sink = parse_sink_uri(uri.raw if isinstance(uri, SinkUri) else uri, role=role)
    resolved = resolve_sink_options(sink, options)
    client = _CLIENTS.get(sink.scheme)
    if client is not None:
        module, package = client
        import_extra(module, extra=sink.scheme, what=f"the {sink.scheme}:// sink", package=package)
    module_name, class_name = _MODULES[sink.scheme]
    writer_class = getattr(importlib.import_module(module_name), class_name)
    writer: SinkWriter = writer_class(sink, role=role, options=resolved)
    writer.open()
    return writer
