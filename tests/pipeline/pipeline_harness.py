"""Run RunAgent on a named runner over a scripted input and collect every output.

The same script runs on every runner (INFRA.md: always name the runner):

- ``batch``: BundleBasedDirectRunner;
- ``streaming``: the DirectRunner's streaming mode (BundleBasedDirectRunner with
  ``streaming=True``) fed by a ``TestStream``, where ``Watermark`` steps advance the
  watermark (firing HITL timers) between elements;
- ``fnapi``: the portable FnApiRunner, in process;
- ``fnapi_multi``: the FnApiRunner with two SDK worker processes;
- ``portable``: the PortableRunner with its embedded job server and a loopback SDK
  worker (the path a Flink or Spark job server takes), for the core scenarios.

Batch runners read the script with ``Create(reshuffle=False)`` (one ordered
bundle) and skip ``Watermark`` steps: their watermark jumps to infinity when the
input ends, so every timer still set then fires there. Scripts that need a
timer to fire *between* two elements are streaming-only.

Outputs are collected by a DoFn writing pickled elements into a directory (no
global state: the multi-process runner's workers are other processes).
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
from agents import SHOP_AGENT, SHOP_TOOLS, make_provider
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.portable_runner import PortableRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_agents import Agent, AgentConfig, RunAgent, ToolRegistry
from beam_agents._protos import AgentEnvelope, StateSnapshot, ToolIntent, TraceEvent
from beam_agents.blobs import load_continuation
from beam_agents.key_state import StateCells
from beam_agents.pipeline import ErrorRecord
from beam_agents.pipeline import agent_dofn as dofn_params
from beam_agents.pipeline.agent_dofn import AgentDoFn

T0 = 1_734_000_000_000
KEY = b"customer-42"
OTHER = b"customer-7"
RUNNERS = ("batch", "streaming", "fnapi", "fnapi_multi")
CORE_RUNNERS = (*RUNNERS, "portable")
"""``RUNNERS`` and the PortableRunner: where the core scenarios (tests/pipeline/test_transform.py) run."""
FINAL_WATERMARK_MS = 4_000_000_000_000
"""Where the streaming script's watermark goes before infinity, so every timer fires at its
own time, between elements (on Beam 2.77 timers set then fire at infinity too, but all at
once, at the very end)."""

OUTPUT_NAMES = ("intents", "approvals", "outputs", "traces", "snapshots", "errors")


@dataclass(frozen=True)
class Watermark:
    """Streaming only: advance the watermark to ``ms`` before the next element."""

    ms: int


Step = AgentEnvelope | bytes | tuple[Any, Any] | Watermark | Any


def new_pipeline(runner: str) -> beam.Pipeline:
    """A pipeline on the named runner, with options that never read ``sys.argv``."""
    if runner == "batch":
        return beam.Pipeline(runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[]))
    if runner == "streaming":
        return beam.Pipeline(
            runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[], streaming=True)
        )
    if runner == "fnapi":
        return beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[]))
    if runner == "fnapi_multi":
        return beam.Pipeline(
            runner=FnApiRunner(),
            options=PipelineOptions(
                flags=[], direct_running_mode="multi_processing", direct_num_workers=2
            ),
        )
    if runner == "portable":
        return beam.Pipeline(
            runner=PortableRunner(),
            options=PipelineOptions(flags=[], job_endpoint="embed", environment_type="LOOPBACK"),
        )
    raise ValueError(f"unknown runner {runner!r}")


def _element(step: Any) -> Any:
    return step.SerializeToString() if isinstance(step, AgentEnvelope) else step


def source(
    p: beam.Pipeline, runner: str, steps: Sequence[Step], *, streaming_bundles: bool = False
) -> Any:
    """The script as a PCollection: a TestStream when streaming, else an ordered Create.

    Streaming, each element is its own bundle; with ``streaming_bundles`` the elements
    between two ``Watermark`` steps arrive together as one bundle (as a source's reads do).
    """
    if runner != "streaming":
        return p | "Script" >> beam.Create(
            [_element(s) for s in steps if not isinstance(s, Watermark)], reshuffle=False
        )
    stream = TestStream()
    watermark_ms = 0
    pending: list[TimestampedValue] = []
    for step in steps:
        if isinstance(step, Watermark):
            if pending:
                stream, pending = stream.add_elements(pending), []
            watermark_ms = max(watermark_ms, step.ms)
            stream = stream.advance_watermark_to(watermark_ms / 1000)
            continue
        at_ms = step.event_time_ms if isinstance(step, AgentEnvelope) else watermark_ms
        # Never behind the watermark: a late element is not what these tests are about.
        pending.append(TimestampedValue(_element(step), max(at_ms, watermark_ms) / 1000))
        if not streaming_bundles:
            stream, pending = stream.add_elements(pending), []
    if pending:
        stream = stream.add_elements(pending)
    stream = stream.advance_watermark_to(FINAL_WATERMARK_MS / 1000)
    return p | "Script" >> stream.advance_watermark_to_infinity()


class CollectToDir(beam.DoFn):  # type: ignore[misc]
    """Writes each bundle's elements as one pickle file under ``directory/tag-*.pkl``."""

    def __init__(self, directory: str, tag: str) -> None:
        self._directory = directory
        self._tag = tag
        self._buffer: list[Any] = []

    def start_bundle(self) -> None:
        self._buffer = []

    def process(self, element: Any) -> None:
        self._buffer.append(element)

    def finish_bundle(self) -> None:
        if self._buffer:
            path = Path(self._directory) / f"{self._tag}-{uuid.uuid4().hex}.pkl"
            path.write_bytes(pickle.dumps(self._buffer))
            self._buffer = []


def collect(pcoll: Any, directory: Path, tag: str) -> None:
    """Attach a collector of ``pcoll`` writing into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    _ = pcoll | f"Collect_{tag}" >> beam.ParDo(CollectToDir(str(directory), tag))


def read_collected(directory: Path, tag: str) -> list[Any]:
    """Every element collected under ``tag`` (bundle order is not meaningful)."""
    out: list[Any] = []
    for path in sorted(directory.glob(f"{tag}-*.pkl")):
        out.extend(pickle.loads(path.read_bytes()))
    return out


def _seq_prefix(output: bytes) -> int:
    return int(output.split(b":", 1)[0])


@dataclass
class Collected:
    """Everything RunAgent emitted in one run."""

    intents: list[tuple[bytes, bytes]]
    approvals: list[tuple[bytes, bytes]]
    outputs: list[tuple[bytes, bytes]]
    traces: list[tuple[bytes, bytes]]
    snapshots: list[tuple[bytes, bytes]]
    errors: list[ErrorRecord]
    events: list[TraceEvent] = field(init=False)

    def __post_init__(self) -> None:
        events = [TraceEvent.FromString(data) for _, data in self.traces]
        self.events = sorted(events, key=lambda e: (e.entity_key, e.seq, e.index))

    def outputs_of(self, key: bytes) -> list[bytes]:
        """The key's outputs, in seq order (test agents prefix each output with its seq)."""
        return sorted((o for k, o in self.outputs if k == key), key=_seq_prefix)

    def intents_of(self, key: bytes) -> list[ToolIntent]:
        return sorted(
            (ToolIntent.FromString(b) for k, b in self.intents if k == key),
            key=lambda i: (i.seq, i.intent_id),
        )

    def approvals_of(self, key: bytes) -> list[ToolIntent]:
        return sorted(
            (ToolIntent.FromString(b) for k, b in self.approvals if k == key),
            key=lambda i: (i.seq, i.intent_id),
        )

    def activation(self, key: bytes, seq: int) -> list[TraceEvent]:
        """The trace events of activation ``(key, seq)``, in order."""
        return [e for e in self.events if e.entity_key == key and e.seq == seq]

    def seqs(self, key: bytes) -> list[int]:
        """The seqs the key's traces hold, ascending."""
        return sorted({e.seq for e in self.events if e.entity_key == key})

    def snapshot(self, request_id: str) -> StateSnapshot:
        """The one snapshot answering ``request_id``."""
        found = [
            s
            for s in (StateSnapshot.FromString(b) for _, b in self.snapshots)
            if s.request_id == request_id
        ]
        assert len(found) == 1, f"{len(found)} snapshots for request {request_id!r}"
        return found[0]

    def error_codes(self) -> list[str]:
        return sorted(e.code for e in self.errors)


def run_agent(
    runner: str,
    steps: Iterable[Step],
    workdir: Path,
    *,
    config: AgentConfig | None = None,
    agent: Agent = SHOP_AGENT,
    registry: ToolRegistry = SHOP_TOOLS,
    streaming_bundles: bool = False,
) -> Collected:
    """Run ``RunAgent`` over the script on ``runner`` and return what each output carried."""
    out_dir = workdir / f"collected-{uuid.uuid4().hex[:8]}"
    config = config or AgentConfig(provider_factory=make_provider)
    with new_pipeline(runner) as p:
        script = source(p, runner, list(steps), streaming_bundles=streaming_bundles)
        outs = script | RunAgent(agent, registry, config)
        for name in OUTPUT_NAMES:
            collect(getattr(outs, name), out_dir, name)
    return Collected(*(read_collected(out_dir, name) for name in OUTPUT_NAMES))


# --------------------------------------------------------------------------- seeded state

SEED = b"\x00seed-state"
"""The value of a ``(key, SEED)`` element: ``SeededAgentDoFn`` writes the key's seed cells."""


class SeededAgentDoFn(AgentDoFn):
    """``AgentDoFn`` whose keys can start from given cells (e.g. old-version golden blobs).

    A ``(key, SEED)`` element writes ``seeds[key]`` into the key's state cells (and
    sets the HITL timer if the seed is suspended), as an earlier binary would have
    left them. Every other element goes through ``AgentDoFn.process`` unchanged.
    """

    def __init__(
        self,
        agent: Agent,
        registry: ToolRegistry,
        config: AgentConfig,
        seeds: dict[bytes, tuple[int, StateCells]],
    ) -> None:
        super().__init__(agent, registry, config)
        self._seeds = dict(seeds)

    def process(
        self,
        element: tuple[bytes, bytes],
        seq_cell: Any = dofn_params.SEQ_PARAM,
        memory_cell: Any = dofn_params.MEMORY_PARAM,
        llm_cache_cell: Any = dofn_params.LLM_CACHE_PARAM,
        continuation_cell: Any = dofn_params.CONTINUATION_PARAM,
        pending_cell: Any = dofn_params.PENDING_PARAM,
        resume_history_cell: Any = dofn_params.RESUME_HISTORY_PARAM,
        tool_cache_cell: Any = dofn_params.TOOL_CACHE_PARAM,
        inbox_cell: Any = dofn_params.INBOX_PARAM,
        hold_cell: Any = dofn_params.HOLD_PARAM,
        in_flight_at_cell: Any = dofn_params.IN_FLIGHT_AT_PARAM,
        timer: Any = dofn_params.HITL_TIMER_PARAM,
        retry_timer: Any = dofn_params.RETRY_TIMER_PARAM,
        in_flight_timer: Any = dofn_params.IN_FLIGHT_TIMER_PARAM,
        timestamp: Any = dofn_params.TIMESTAMP_PARAM,
        window: Any = dofn_params.WINDOW_PARAM,
    ) -> Iterator[Any]:
        key, raw = element
        if raw != SEED:
            return super().process(  # type: ignore[no-any-return]
                element,
                seq_cell=seq_cell,
                memory_cell=memory_cell,
                llm_cache_cell=llm_cache_cell,
                continuation_cell=continuation_cell,
                pending_cell=pending_cell,
                resume_history_cell=resume_history_cell,
                tool_cache_cell=tool_cache_cell,
                inbox_cell=inbox_cell,
                hold_cell=hold_cell,
                in_flight_at_cell=in_flight_at_cell,
                timer=timer,
                retry_timer=retry_timer,
                in_flight_timer=in_flight_timer,
                timestamp=timestamp,
                window=window,
            )
        seq, cells = self._seeds[key]
        seq_cell.write(seq)
        for cell, value in (
            (memory_cell, cells.memory),
            (llm_cache_cell, cells.llm_cache),
            (continuation_cell, cells.continuation),
            (pending_cell, cells.pending),
            (resume_history_cell, cells.resume_history),
            (tool_cache_cell, cells.tool_cache),
        ):
            if value:
                cell.write(value)
        if cells.continuation:
            continuation, _ = load_continuation(cells.continuation)
            assert continuation is not None
            timer.set(Timestamp(micros=continuation.deadline_ms * 1000))
        return iter(())


def run_seeded(
    runner: str,
    seeds: dict[bytes, tuple[int, StateCells]],
    steps: Iterable[Step],
    workdir: Path,
    *,
    config: AgentConfig | None = None,
    agent: Agent = SHOP_AGENT,
    registry: ToolRegistry = SHOP_TOOLS,
) -> Collected:
    """Run ``SeededAgentDoFn`` over ``(key, bytes)`` steps (no routing step) and collect."""
    config = config or AgentConfig(provider_factory=make_provider)
    return run_dofn(runner, SeededAgentDoFn(agent, registry, config, seeds), steps, workdir)


def run_dofn(
    runner: str,
    dofn: AgentDoFn,
    steps: Iterable[Step],
    workdir: Path,
    *,
    streaming_bundles: bool = False,
) -> Collected:
    """Run ``dofn`` (an ``AgentDoFn``) over ``(key, bytes)`` steps (no routing) and collect."""
    out_dir = workdir / f"collected-{uuid.uuid4().hex[:8]}"
    keyed = [
        (s.entity_key, s.SerializeToString()) if isinstance(s, AgentEnvelope) else s for s in steps
    ]
    with new_pipeline(runner) as p:
        script = source(p, runner, keyed, streaming_bundles=streaming_bundles)
        results = script | beam.ParDo(dofn).with_output_types(tuple[bytes, bytes]).with_outputs(
            AgentDoFn.TAG_INTENTS,
            AgentDoFn.TAG_APPROVALS,
            AgentDoFn.TAG_TRACE_BATCHES,
            AgentDoFn.TAG_SNAPSHOTS,
            AgentDoFn.TAG_ERRORS,
            main=AgentDoFn.TAG_OUTPUTS,
        )
        for name in OUTPUT_NAMES:
            if name == "traces":  # the DoFn emits one batch per activation
                batches = results[AgentDoFn.TAG_TRACE_BATCHES]
                collect(batches | beam.FlatMap(explode_trace_batch), out_dir, name)
            else:
                collect(results[name], out_dir, name)
    return Collected(*(read_collected(out_dir, name) for name in OUTPUT_NAMES))


def explode_trace_batch(
    batch: tuple[bytes, tuple[bytes, ...], bytes],
) -> list[tuple[bytes, bytes]]:
    """One activation's trace batch as ``(entity_key, event bytes)`` elements, in order."""
    key, events = batch[0], batch[1]
    return [(key, data) for data in events]
