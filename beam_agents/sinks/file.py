"""The ``file:///DIR`` sink: trace-stream files and snapshot files in a local directory.

For laptops, tests and the demo (docs/sinks.md, file:///DIR). Every file appears whole or not
at all: it is written under a temporary dot-name, synced, then renamed into
place, so a reader scanning ``DIR/*.pb`` never takes a half-written file for
a whole one.

- Traces: each ``flush`` writes the events buffered since the last one as
  one new trace stream, ``traces-<uuid4 hex>.pb``. The random name means two
  workers (or a retried bundle) never write over each other; file names carry
  no meaning, the events inside do.
- Snapshots: one file per snapshot, ``{entity_key hex}-{seq}-{request_id}.pb``,
  holding ``snapshot.SerializeToString(deterministic=True)`` — the same bytes
  a Kafka sink would carry as the message value. See ``snapshot_file_name``
  for how the request id is made safe for a file name.
"""

from __future__ import annotations

import hashlib
import os
import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.errors import SinkError
from beam_agents.sinks.base import cause_of, describe_records, describe_snapshot, describe_trace
from beam_agents.sinks.uri import Role, SinkUri
from beam_agents.telemetry import ActivationTelemetry
from beam_agents.trace_stream import temporary_sibling, write_trace_stream

__all__ = ["FileSinkWriter", "snapshot_file_name"]

_MAX_NAME_BYTES = 255  # NAME_MAX on Linux, macOS and Windows file systems


def snapshot_file_name(snapshot: StateSnapshot) -> str:
    """``{entity_key hex}-{seq}-{request_id}.pb``, with the request id made safe for a file name.

    The request id is percent-encoded (``urllib.parse.quote`` with no safe
    characters): letters, digits and ``_.-~`` stay as they are, every other
    byte of its UTF-8 becomes ``%XX``. The encoding is reversible, so two
    different request ids never share a file name, and the name never holds
    a path separator. ``urllib.parse.unquote`` gives the request id back.

    A name longer than 255 bytes (a very long key or request id) keeps its
    first 200 bytes and ends in ``~`` plus the first 32 hex digits of the
    full name's sha256, so it stays unique and valid.
    """
    request = urllib.parse.quote(snapshot.request_id, safe="")
    name = f"{snapshot.entity_key.hex()}-{snapshot.seq}-{request}.pb"
    if len(name) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return f"{name[:200]}~{digest}.pb"


class FileSinkWriter:
    """Writes trace-stream files (traces) or snapshot files (snapshots) into one directory."""

    def __init__(self, sink: SinkUri, *, role: Role, options: Mapping[str, str]) -> None:
        self._sink = sink
        self._role = role
        self._directory = Path(sink.directory)
        self._events: list[TraceEvent] = []
        self._snapshots: list[StateSnapshot] = []

    def open(self) -> None:
        """Create the directory if it is missing."""
        try:
            self._directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(self._sink.redacted, "no record (opening)", cause_of(exc)) from exc

    def write_trace(self, event: TraceEvent, telemetry: ActivationTelemetry | None = None) -> None:
        """Buffer one event for the next trace-stream file."""
        self._events.append(event)

    def write_snapshot(self, snapshot: StateSnapshot) -> None:
        """Buffer one snapshot; it is written as its own file at the next flush."""
        self._snapshots.append(snapshot)

    def flush(self) -> None:
        """Write the buffered events as one new stream file and each snapshot as its file.

        Raises:
            SinkError: A file cannot be written (naming the first record it held).
        """
        events, self._events = self._events, []
        snapshots, self._snapshots = self._snapshots, []
        if events:
            dest = self._directory / f"traces-{uuid.uuid4().hex}.pb"
            try:
                write_trace_stream(dest, events)
            except Exception as exc:
                records = describe_records([describe_trace(e) for e in events])
                raise SinkError(self._sink.redacted, records, cause_of(exc)) from exc
        for snapshot in snapshots:
            try:
                self._write_snapshot_file(snapshot)
            except Exception as exc:
                record = describe_snapshot(snapshot)
                raise SinkError(self._sink.redacted, record, cause_of(exc)) from exc

    def _write_snapshot_file(self, snapshot: StateSnapshot) -> None:
        # The same snapshot exported twice (a retried bundle) has the same name
        # and the same bytes, so replacing is idempotent. Two export requests
        # reusing one request id at one seq differ only in snapshot_at_ms; the
        # later one wins, as documented in docs/sinks.md.
        path = self._directory / snapshot_file_name(snapshot)
        data = snapshot.SerializeToString(deterministic=True)
        tmp = temporary_sibling(path)  # fits NAME_MAX whatever the key and request id
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if os.name == "posix":
            dir_fd = os.open(self._directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def close(self) -> None:
        """Drop anything not flushed (the bundle that wrote it did not finish)."""
        self._events = []
        self._snapshots = []
