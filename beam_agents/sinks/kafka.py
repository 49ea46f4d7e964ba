"""The ``kafka://host:port[,host:port]/topic`` sink: a confluent-kafka ``Producer`` per writer.

Message key = ``entity_key``; value = the deterministic proto bytes
(``serialize_trace_event`` for a trace event, ``SerializeToString(deterministic=True)``
for a snapshot) — the bytes ``beam-agents-replay`` reads from a file. Keying
by entity key sends one key's records to one partition, in order.

Every record carries headers saying what its value is, so a consumer (or a schema
registry bridge) needs no out-of-band knowledge: ``content-type``
(``application/x-protobuf; messageType=beam_agents.v1.TraceEvent`` or
``...StateSnapshot``), ``beam-agents-message-type``, ``beam-agents-state-schema-version``
(a snapshot's own ``state_schema_version``; for a trace event, the writing package's
``STATE_SCHEMA_VERSION``) and ``beam-agents-version`` (the writing package's version).

The producer is idempotent (``enable.idempotence=true``), so librdkafka's own
retries never duplicate or reorder a message within a partition. Delivery
reports are collected per message; ``flush`` waits for all of them up to the
sink's timeout and fails the bundle if any delivery failed or is still
outstanding. Any other option (``security.protocol``, ``sasl.*``,
``compression.type``, ``linger.ms`` ...) is passed to the producer as given.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.errors import ConfigError, SinkError
from beam_agents.migrations import STATE_SCHEMA_VERSION
from beam_agents.sinks.base import (
    cause_of,
    describe_records,
    describe_snapshot,
    describe_trace,
    map_client_errors,
)
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.telemetry import ActivationTelemetry
from beam_agents.trace_events import serialize_trace_event

__all__ = ["DEFAULT_TIMEOUT_S", "KafkaSinkWriter"]

DEFAULT_TIMEOUT_S = 30.0
"""How long ``flush`` waits for delivery reports unless ``timeout_s`` says otherwise."""

_QUEUE_FULL_WAIT_S = 0.1

HEADER_CONTENT_TYPE = "content-type"
HEADER_MESSAGE_TYPE = "beam-agents-message-type"
HEADER_STATE_SCHEMA_VERSION = "beam-agents-state-schema-version"
HEADER_VERSION = "beam-agents-version"


def record_headers(message_type: str, state_schema_version: int) -> list[tuple[str, bytes]]:
    """The headers of a record whose value is a serialized ``message_type``."""
    return [
        (HEADER_CONTENT_TYPE, f"application/x-protobuf; messageType={message_type}".encode()),
        (HEADER_MESSAGE_TYPE, message_type.encode()),
        (HEADER_STATE_SCHEMA_VERSION, str(state_schema_version).encode()),
        (HEADER_VERSION, __version__.encode()),
    ]


_TRACE_HEADERS = record_headers(TraceEvent.DESCRIPTOR.full_name, STATE_SCHEMA_VERSION)


class KafkaSinkWriter:
    """Produces trace events or snapshots to one Kafka topic."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        self._timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        settings = {k: v for k, v in options.items() if k != "timeout_s"}
        self._settings: dict[str, Any] = {"enable.idempotence": "true", **settings}
        self._settings["bootstrap.servers"] = ",".join(sink.hosts)
        self._settings["error_cb"] = self._on_client_error
        self._producer: Any = None
        self._next_id = 0
        # Records produced since the last flush whose delivery report has not come yet.
        self._outstanding: dict[int, str] = {}
        self._failed: list[tuple[str, str]] = []
        self._last_client_error = ""
        self._fatal = False

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Create the producer (no connection is made until the first message).

        Raises:
            ConfigError: librdkafka refuses a producer setting.
            SinkError: The producer cannot be created for another reason.
        """
        self._producer = self._new_producer()

    def _new_producer(self) -> Any:
        from confluent_kafka import KafkaError, KafkaException, Producer

        try:
            return Producer(self._settings)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._INVALID_ARG:
                raise ConfigError(
                    f"sink {self._uri}: a Kafka producer setting is refused: {error.str()}"
                ) from exc
            raise SinkError(self._uri, "no record (creating the producer)", cause_of(exc)) from exc
        except Exception as exc:
            raise SinkError(self._uri, "no record (creating the producer)", cause_of(exc)) from exc

    def close(self) -> None:
        """Drop undelivered messages and release the producer."""
        producer, self._producer = self._producer, None
        self._outstanding.clear()
        self._failed.clear()
        if producer is not None:
            with map_client_errors(self._sink, "no record (closing the producer)"):
                producer.purge()
                producer.flush(0)
                producer.close()

    # ------------------------------------------------------------------ writing

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Produce one trace event (delivered by the next flush at the latest)."""
        self._produce(
            event.entity_key, serialize_trace_event(event), describe_trace, event, _TRACE_HEADERS
        )

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Produce one snapshot (delivered by the next flush at the latest)."""
        data = snapshot.SerializeToString(deterministic=True)
        headers = record_headers(StateSnapshot.DESCRIPTOR.full_name, snapshot.state_schema_version)
        self._produce(snapshot.entity_key, data, describe_snapshot, snapshot, headers)

    def _produce(
        self,
        key: bytes,
        value: bytes,
        describe: Any,
        record: Any,
        headers: list[tuple[str, bytes]],
    ) -> None:
        if self._producer is None:
            raise SinkError(self._uri, describe(record), "the writer is not open (call open())")
        record_id = self._next_id
        self._next_id += 1
        description = describe(record)
        callback = functools.partial(self._on_delivery, record_id)
        deadline = time.monotonic() + self._timeout_s
        with map_client_errors(self._sink, description):
            while True:
                try:
                    self._producer.produce(
                        self._sink.topic,
                        value=value,
                        key=key,
                        headers=headers,
                        on_delivery=callback,
                    )
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports to drain it,
                    # for as long as a flush would wait.
                    if time.monotonic() >= deadline:
                        raise
                    self._producer.poll(_QUEUE_FULL_WAIT_S)
            self._outstanding[record_id] = description
            self._producer.poll(0)

    # ------------------------------------------------------------------ callbacks

    def _on_delivery(self, record_id: int, err: Any, msg: Any) -> None:
        # Reports of records forgotten by a failed flush (in flight when it
        # purged) arrive late and are ignored: their bundle is being retried.
        description = self._outstanding.pop(record_id, None)
        if description is not None and err is not None:
            self._failed.append((description, f"delivery failed: {err.str()} ({err.name()})"))

    def _on_client_error(self, err: Any) -> None:
        self._last_client_error = f"{err.str()} ({err.name()})"
        if err.fatal():
            self._fatal = True

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Wait for every delivery report since the last flush; fail if any record is not delivered.

        Raises:
            SinkError: A delivery failed, or reports are still missing after
                ``timeout_s`` (naming the first such record and how many more).
        """
        if self._producer is None:
            if self._outstanding:
                raise SinkError(self._uri, describe_records(list(self._outstanding.values())),
                                "the writer is closed")  # fmt: skip
            return
        with map_client_errors(self._sink, describe_records(list(self._outstanding.values()))):
            self._producer.flush(self._timeout_s)
        if not self._failed and not self._outstanding:
            return
        failed, outstanding = self._failed, self._outstanding
        self._failed, self._outstanding = [], {}
        if failed:
            records = describe_records([d for d, _ in failed] + list(outstanding.values()))
            cause = failed[0][1]
        else:
            records = describe_records(list(outstanding.values()))
            cause = f"not delivered within timeout_s={self._timeout_s:g}"
            if self._last_client_error:
                cause += f" (last client error: {self._last_client_error})"
        self._reset_after_failure(undelivered_left=bool(outstanding))
        raise SinkError(self._uri, records, cause)

    def _reset_after_failure(self, *, undelivered_left: bool) -> None:
        # When every record has its report (a delivery the broker refused), nothing
        # is queued and the producer is reused as it is. When records are still
        # queued or in flight (a timeout), they would otherwise go out after the
        # bundle failed, and again with its retry: the producer is replaced and the
        # old one purged and closed. Purging and then reusing the same producer is
        # not safe: librdkafka applies the purge to partition queues asynchronously,
        # so under load it purged the retry's records too (seen 9 times in 10 with
        # the CPU busy). A producer hit by a fatal error can never produce again:
        # it is replaced as well.
        if not (undelivered_left or self._fatal):
            return
        with map_client_errors(self._sink, "no record (resetting after a failed flush)"):
            old, self._producer = self._producer, None
            self._fatal = False
            old.purge(in_queue=True, in_flight=True)
            old.poll(0)
            old.close()
            self._producer = self._new_producer()
        self._outstanding.clear()
        self._failed.clear()
