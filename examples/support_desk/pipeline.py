# mypy: allow-untyped-calls
"""The demo's pipeline: the support-desk agent under ``RunAgent`` on Beam's DirectRunner.

A streaming pipeline, as in production, but fed by a ``TestStream`` that
replays the bundled stream in arrival order instead of reading a topic. The
runner is named explicitly (``BundleBasedDirectRunner`` in streaming mode):
Beam's default runner tries to download a binary first. Traces and snapshots
go to ``file://`` sinks; the other outputs (replies, intents, approval
requests, errors) are written as JSON lines so the demo can show what the
support desk did.

This module imports Apache Beam; the agent modules do not, so replay can
import them without it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, ToolIntent
from beam_agents.pipeline import ErrorRecord
from examples.support_desk.agent import AGENT
from examples.support_desk.model import make_provider
from examples.support_desk.tools import TOOLS

RECORDED = ("outputs", "intents", "approvals", "errors")
"""The outputs written to ``<out>/pipeline/<name>-*.jsonl``."""

_FINAL_WATERMARK_S = 4_000_000_000.0
"""Where the watermark goes before infinity: a TestStream drops timers that would fire only
at ``advance_watermark_to_infinity`` (INFRA.md)."""


def _record(name: str, element: Any) -> dict[str, Any]:
    """One output element as a JSON-ready dict."""
    if isinstance(element, ErrorRecord):
        return {
            "code": element.code,
            "reason": element.reason,
            "entity_key": element.entity_key.decode("utf-8", "replace"),
            "envelope_id": element.envelope_id,
        }
    key, payload = element
    record: dict[str, Any] = {"entity_key": key.decode("utf-8", "replace")}
    if name in ("intents", "approvals"):
        intent = ToolIntent.FromString(payload)
        record.update(
            intent_id=intent.intent_id,
            seq=intent.seq,
            tool=intent.tool,
            args=json.loads(intent.args),
            requires_approval=intent.requires_approval,
        )
    else:
        record["payload"] = json.loads(payload)
    return record


class _WriteJsonLines(beam.DoFn):
    """Writes each bundle's elements as one ``<name>-<uuid>.jsonl`` file (whole or not at all)."""

    def __init__(self, directory: str, name: str) -> None:
        self._directory = directory
        self._name = name
        self._lines: list[str] = []

    def start_bundle(self) -> None:
        self._lines = []

    def process(self, element: Any) -> Iterator[None]:
        self._lines.append(json.dumps(_record(self._name, element), sort_keys=True))
        yield from ()

    def finish_bundle(self) -> None:
        if not self._lines:
            return
        final = Path(self._directory) / f"{self._name}-{uuid.uuid4().hex}.jsonl"
        partial = final.with_name("." + final.name)
        partial.write_text("\n".join(self._lines) + "\n", encoding="utf-8")
        partial.rename(final)
        self._lines = []


@dataclass(frozen=True)
class PipelineRun:
    """Where a run wrote its files, and what it emitted besides traces and snapshots."""

    traces_dir: Path
    snapshots_dir: Path
    records: dict[str, list[dict[str, Any]]]
    """``outputs``, ``intents``, ``approvals``, ``errors``: every element, as JSON."""


def read_records(directory: Path, name: str) -> list[dict[str, Any]]:
    """The elements of one recorded output (order across bundles is not meaningful)."""
    records: list[dict[str, Any]] = []
    for path in sorted(directory.glob(f"{name}-*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text("utf-8").splitlines())
    return records


def run_pipeline(stream: Sequence[AgentEnvelope], out: Path) -> PipelineRun:
    """Run the support-desk agent over ``stream`` and write everything under ``out``.

    Args:
        stream: The envelopes of the events topic, in arrival order.
        out: Directory for ``traces/``, ``snapshots/`` and ``pipeline/`` (created).

    Returns:
        The run's directories and recorded outputs.
    """
    traces_dir, snapshots_dir, records_dir = out / "traces", out / "snapshots", out / "pipeline"
    for directory in (traces_dir, snapshots_dir, records_dir):
        directory.mkdir(parents=True, exist_ok=True)
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to=traces_dir.resolve().as_uri(),
        snapshots_to=snapshots_dir.resolve().as_uri(),
    )
    events = TestStream()
    for envelope in stream:
        events = events.add_elements(
            [TimestampedValue(envelope.SerializeToString(), envelope.event_time_ms / 1000)]
        )
    events = events.advance_watermark_to(_FINAL_WATERMARK_S).advance_watermark_to_infinity()

    options = PipelineOptions(flags=[], streaming=True)
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as pipeline:
        outs = pipeline | "EventsTopic" >> events | "SupportDesk" >> RunAgent(AGENT, TOOLS, config)
        for name in RECORDED:
            _ = getattr(outs, name) | f"Record_{name}" >> beam.ParDo(
                _WriteJsonLines(str(records_dir), name)
            )
    return PipelineRun(
        traces_dir=traces_dir,
        snapshots_dir=snapshots_dir,
        records={name: read_records(records_dir, name) for name in RECORDED},
    )
