"""DoFns that deliver ``.trace_batches`` and ``.snapshots`` to the configured sinks.

Each DoFn instance opens its own writer in ``setup`` (the client is never
pickled), writes every element, and flushes in ``finish_bundle``: a flush that
raises ``SinkError`` fails the bundle so the runner retries it — a record is
never dropped (docs/sinks.md, "Delivery and failure"). The writers themselves live in ``beam_agents.sinks``;
this module only drives their lifecycle from Beam's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.pipeline._beam import beam
from beam_agents.sinks.base import SinkWriter, open_sink
from beam_agents.sinks.uri import Role
from beam_agents.telemetry import ActivationTelemetry


class _WriteToSink(beam.DoFn):  # type: ignore[misc]
    """Writes ``(entity_key, bytes)`` records to one sink; emits nothing."""

    ROLE: Role = "traces"

    def __init__(self, uri: str, options: Mapping[str, str]) -> None:
        super().__init__()
        self._uri = uri
        self._options = dict(options)
        self._writer: SinkWriter | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_writer"] = None
        return state

    def setup(self) -> None:
        self._writer = open_sink(self._uri, role=self.ROLE, options=self._options)

    def _open_writer(self) -> SinkWriter:
        if self._writer is None:  # setup() not called: a runner bug, or a hand-made call
            raise RuntimeError(f"{type(self).__name__}.setup() was not called before processing")
        return self._writer

    def finish_bundle(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def teardown(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()


class WriteTraces(_WriteToSink):
    """Delivers ``.trace_batches`` elements (one activation's events) to ``AgentConfig.traces_to``."""

    ROLE: Role = "traces"

    def process(self, element: tuple[bytes, tuple[bytes, ...], bytes]) -> None:
        writer = self._open_writer()
        # The activation's wall times (beam_agents.telemetry), for the sinks that show
        # them (otlp://); the others write the trace event alone.
        telemetry = ActivationTelemetry.decode(element[2]) if len(element) > 2 else None
        for data in element[1]:
            writer.write_trace(TraceEvent.FromString(data), telemetry=telemetry)


class WriteSnapshots(_WriteToSink):
    """Delivers ``.snapshots`` elements to ``AgentConfig.snapshots_to``."""

    ROLE: Role = "snapshots"

    def process(self, element: tuple[bytes, bytes]) -> None:
        self._open_writer().write_snapshot(StateSnapshot.FromString(element[1]))
