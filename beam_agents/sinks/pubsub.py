"""The ``pubsub://project/topic`` sink: a google-cloud-pubsub ``PublisherClient`` per writer.

Message data = the deterministic proto bytes (as for Kafka). Message ordering
is on and the ordering key is the entity key in hex, so one key's records
arrive in the order written. Attributes:

- ``entity_key``: the key in hex;
- ``kind``: ``"trace"`` or ``"snapshot"``;
- ``seq``: the activation's seq (trace) or the key's SEQ at export (snapshot);
- ``index``: the event's index (traces only).

Each publish is one attempt bounded by ``timeout_s`` (see ``_publish`` for why
the client's own retry is off): a failed publish fails the bundle and the
runner's retry publishes again. ``flush`` resolves every publish future. When a
publish fails, the client pauses that ordering key (later publishes for it
fail at once, which is what keeps order); after reporting the failure the
writer resumes the key, because the runner retries the whole failed bundle,
which republishes that key's records in order.

``PUBSUB_EMULATOR_HOST`` is honoured as by every Google Pub/Sub client.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.errors import SinkError
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

__all__ = ["DEFAULT_TIMEOUT_S", "PubSubSinkWriter"]

DEFAULT_TIMEOUT_S = 60.0
"""Bound on each publish attempt and on the wait for it in ``flush``."""


class PubSubSinkWriter:
    """Publishes trace events or snapshots to one Pub/Sub topic, ordered per key."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._uri = sink.redacted
        self._timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        self._client: Any = None
        self._topic_path = ""
        # (future, record description, ordering key) since the last flush.
        self._pending: list[tuple[Any, str, str]] = []

    def open(self) -> None:
        """Create the publisher client.

        Raises:
            SinkError: The client cannot be created (e.g. no credentials).
        """
        with map_client_errors(self._sink, "no record (creating the publisher)"):
            from google.cloud import pubsub_v1  # type: ignore[attr-defined]

            self._client = pubsub_v1.PublisherClient(
                publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
            )
            self._topic_path = self._client.topic_path(self._sink.project, self._sink.topic)

    def close(self) -> None:
        """Stop the client; records not flushed are not waited for."""
        client, self._client = self._client, None
        self._pending.clear()
        if client is not None:
            with map_client_errors(self._sink, "no record (stopping the publisher)"):
                client.stop()

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Publish one trace event (resolved by the next flush)."""
        self._publish(
            serialize_trace_event(event),
            describe_trace(event),
            event.entity_key.hex(),
            {"kind": "trace", "seq": str(event.seq), "index": str(event.index)},
        )

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Publish one snapshot (resolved by the next flush)."""
        self._publish(
            snapshot.SerializeToString(deterministic=True),
            describe_snapshot(snapshot),
            snapshot.entity_key.hex(),
            {"kind": "snapshot", "seq": str(snapshot.seq)},
        )

    def _publish(self, data: bytes, description: str, key_hex: str, attrs: dict[str, str]) -> None:
        if self._client is None:
            raise SinkError(self._uri, description, "the writer is not open (call open())")
        with map_client_errors(self._sink, description):
            future = self._client.publish(
                self._topic_path,
                data,
                ordering_key=key_hex,
                # No client retry: with message ordering on, the client stretches
                # any retry policy to an unbounded deadline, in a thread that
                # outlives the bundle. One attempt bounded by timeout_s; the
                # runner's retry of the failed bundle is the retry.
                retry=None,
                timeout=self._timeout_s,
                entity_key=key_hex,
                **attrs,
            )
        self._pending.append((future, description, key_hex))

    def flush(self) -> None:
        """Resolve every publish since the last flush; fail if any did not succeed.

        Raises:
            SinkError: A publish failed or did not complete within
                ``timeout_s`` (naming the first such record and how many more).
        """
        pending, self._pending = self._pending, []
        if not pending:
            return
        deadline = time.monotonic() + self._timeout_s
        failed: list[tuple[str, str, BaseException]] = []
        for future, description, key_hex in pending:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                failed.append((description, key_hex, exc))
        if not failed:
            return
        # A publish that failed paused its ordering key; one still in flight
        # (timed out here) did not, or not yet.
        self._resume_keys({key for _, key, exc in failed if not isinstance(exc, TimeoutError)})
        first = failed[0][2]
        if isinstance(first, TimeoutError):
            cause = f"not published within timeout_s={self._timeout_s:g}"
        else:
            cause = f"publish failed: {cause_of(first)}"
        raise SinkError(self._uri, describe_records([d for d, _, _ in failed]), cause) from first

    def _resume_keys(self, keys: set[str]) -> None:
        # The client paused these ordering keys on the failure; the retried
        # bundle republishes their records in order, so let it.
        for key_hex in sorted(keys):
            with map_client_errors(self._sink, f"no record (resuming ordering key {key_hex})"):
                try:
                    self._client.resume_publish(self._topic_path, key_hex)
                except RuntimeError as exc:
                    # Already resumed (several failures of one key share one pause).
                    if "not paused" not in str(exc):
                        raise
