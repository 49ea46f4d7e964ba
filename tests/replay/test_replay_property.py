"""Property: every traced activation of a real pipeline replays, unmodified, as reproduced;
and no memory-only mutant of it ever does.

Hypothesis writes random agent programs (``program_agents``: model calls,
read-only tools, a recorded tool whose service answer drifts, memory log writes and
reads of earlier activations' keys, shared keys read-then-written, peeked at, deleted,
reads of the whole memory, intents with and
without approval, suspends on new and on earlier intents, resumes, failures),
and a random stream around them: approvals and rejections of pending intents,
executors' tool results (OK, ERROR, REJECTED), HITL timeouts (the watermark
passing a deadline), start events that queue while a key is suspended, and
exports between rounds. A real ``RunAgent`` pipeline runs it (streaming
``BundleBasedDirectRunner`` fed by a ``TestStream``, ``file://`` sinks), and
every traced activation is replayed with the unmodified agent from its key's
final snapshot (and from each earlier export, for the activations since the one
before). Each replay must be:

- ``reproduced``; or
- ``irreproducible`` for a documented retention reason: a model response that is
  gone (evicted, expired, minted later, digest-only; the re-run's cache key must
  be the traced one, else the request changed), or a resume history that has
  rolled over (the snapshot's ``resumed_from`` must then be full).

- ``irreproducible`` for a memory read the snapshot cannot serve as the original saw
  it (``StopCause.MEMORY_UNSEEN``), each named read checked against the traces: the
  seq it names as the rewriter committed after the target (the target itself for its
  own write), never "unknown" (every key here is written by provenance-aware code);
- ``irreproducible`` for a recorded tool call whose answer is gone (its status among
  the retention ones, or ``ambiguous``, with the traced arguments), or whose cache entry
  holds another seq's answer than the traced one (``other_seq``: the service drifted
  and the activation that got the new answer failed).

Never ``diverged``, never a usage error. Then each committed activation is replayed
again with each memory-only mutant (``program_agents.MUTANTS``: a write dropped,
added, changed, made to read its own key first), from the same snapshots: whenever the
mutant changed the activation (``program_agents.MUTATED``), the verdict must not be
``reproduced``. The generator steers the stream with an
in-process model of the DoFn (``_Sim``: the DoFn's own per-key step, through
``PipelineKey``); the pipeline is the record, and a model
error only makes an envelope the pipeline rejects, which is fine.

``make test`` runs a few seeded examples; ``make fuzz`` (``BEAM_AGENTS_FUZZ_EXAMPLES``)
a long campaign, printing what it replayed.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
import program_agents as pa
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.testing.test_stream import TestStream as ScriptedStream
from apache_beam.transforms.window import TimestampedValue
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, StateSnapshot, ToolResult, TraceEvent
from beam_agents.activation import MAX_RESUME_HISTORY
from beam_agents.replay.engine import replay
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayResult, StopCause, UnseenWhy, Verdict
from beam_agents.testing import (
    PipelineKey,
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_events import (
    ATTR_ACTIVATION_KIND,
    ATTR_AWAITING,
    ATTR_ENVELOPE_ID,
    ATTR_INTENT_ID,
    ATTR_TRIGGER,
)
from beam_agents.trace_stream import read_trace_stream, trace_stream_files

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
FUZZ_EXAMPLES = int(os.environ.get("BEAM_AGENTS_FUZZ_EXAMPLES", "0") or 0)
"""``make fuzz`` sets it: run that many examples instead of the few of ``make test``."""
EXAMPLES = FUZZ_EXAMPLES or 4
MAX_STEPS = 60 if FUZZ_EXAMPLES else 22
GONE = {"absent", "expired", "minted_later", "digest_only"}
TOOL_GONE = GONE | {"ambiguous"}


# --------------------------------------------------------------------------- the stream model


@dataclass(frozen=True)
class Watermark:
    """Advance the watermark to ``ms`` (fires the HITL timers due by then)."""

    ms: int


SIM_CONFIG = AgentConfig(provider_factory=pa.make_provider, hitl=pa.HITL, cache=pa.CACHE)
"""The pipeline's configuration without its sinks (the model of the DoFn needs none)."""


class _Sim:
    """The DoFn's own per-key step, one ``PipelineKey`` per key, to aim approvals and results."""

    def __init__(self) -> None:
        self.keys: dict[bytes, PipelineKey] = {}

    def key(self, key: bytes) -> PipelineKey:
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = PipelineKey(pa.AGENT, pa.TOOLS, SIM_CONFIG, entity_key=key)
        return found

    def envelope(self, envelope: AgentEnvelope) -> None:
        self.key(envelope.entity_key).send(envelope)

    def next_deadline(self) -> int | None:
        timers = [k.timer_ms for k in self.keys.values() if k.timer_ms is not None]
        return min(timers) if timers else None

    def watermark(self, ms: int) -> None:
        """Fire every HITL timer due by ``ms`` (a resume that suspends again sets a later one)."""
        for k in self.keys.values():
            while k.timer_ms is not None and k.timer_ms <= ms:
                k.fire_timer()


# --------------------------------------------------------------------------- the generator

TEXTS = ["hello", "status?", "summarize", "again"]
ACTIONS = ["event"] * 3 + ["approve"] * 3 + ["result"] * 2 + ["timeout", "export"]
"""Weights of the next step (an approval or result with nothing to answer is an event)."""

SHARED = ["a", "b"]
"""Names of the shared keys programs read, rewrite and delete (``shared.<name>``)."""

OPS = st.one_of(
    st.tuples(st.just("llm"), st.sampled_from(TEXTS)),
    st.tuples(st.just("tool"), st.sampled_from(["A1", "B2"])),
    st.tuples(st.just("mem"), st.integers(0, 9)),
    st.just(("read",)),
    st.tuples(st.just("act"), st.booleans(), st.integers(1, 999)),
    st.just(("random",)),
    st.tuples(st.just("rw"), st.sampled_from(SHARED)),
    st.tuples(st.just("peek"), st.sampled_from(SHARED)),
    st.tuples(st.just("forget"), st.sampled_from(SHARED)),
    st.just(("scan",)),
    st.tuples(st.just("rec"), st.sampled_from(["X", "Y"])),
)


@st.composite
def programs(draw: st.DrawFn, pending: list[str], *, resume: bool = False) -> dict[str, Any]:
    ops = [list(op) for op in draw(st.lists(OPS, max_size=5))]
    if draw(st.integers(0, 11)) == 0:
        ops.insert(draw(st.integers(0, len(ops))), ["fail"])
    program: dict[str, Any] = {"ops": ops, "end": draw(st.sampled_from(["done", "suspend"]))}
    if program["end"] != "suspend":
        return program
    if resume:
        program["keep"] = draw(st.booleans())
        return program
    choice = draw(st.integers(0, 9))
    if pending and choice < 6:
        # The issue #17 shape: suspend on an intent an earlier activation staged.
        program["await"] = [draw(st.sampled_from(pending))]
    elif choice == 9:
        program["await"] = ["in-never-staged"]  # Suspend refuses it: a failed activation
    program["resumes"] = draw(st.lists(programs([], resume=True), max_size=2))
    return program


@dataclass(repr=False)
class Scenario:
    steps: list[AgentEnvelope | Watermark]
    keys: list[bytes]

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        lines = []
        for step in self.steps:
            if isinstance(step, Watermark):
                lines.append(f"  watermark {step.ms}")
                continue
            body = step.WhichOneof("body")
            what: Any = body
            if body == "event":
                what = f"event {step.event.payload.decode()}"
            elif body == "approval":
                what = f"approval {step.approval.intent_id} {step.approval.approved}"
            elif body == "tool_result":
                status = ToolResult.Status.Name(step.tool_result.status)
                what = f"tool_result {step.tool_result.intent_id} {status}"
            lines.append(f"  {step.entity_key.decode()} @{step.event_time_ms} {what}")
        return "Scenario(\n" + "\n".join(lines) + "\n)"


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    keys = [f"key-{i}".encode() for i in range(draw(st.integers(1, 3)))]
    sim = _Sim()
    steps: list[AgentEnvelope | Watermark] = []
    clock = T0

    def add(envelope: AgentEnvelope) -> None:
        steps.append(envelope)
        sim.envelope(envelope)

    for n in range(draw(st.integers(3, MAX_STEPS))):
        key = draw(st.sampled_from(keys))
        clock += draw(st.sampled_from([1, 1000, 15_000, 70_000]))
        state = sim.key(key).state
        pending = [i.intent_id for i in state.pending]
        cont = state.continuation
        released = [i for i in (cont.awaiting_intent_ids if cont else []) if i not in pending]
        action = draw(st.sampled_from(ACTIONS))
        if action == "approve" and pending:
            add(
                approval_envelope(
                    key,
                    draw(st.sampled_from(pending)),
                    approved=draw(st.booleans()),
                    time_ms=clock,
                    envelope_id=f"ap-{n}",
                )
            )
        elif action == "result" and released:
            status = draw(st.sampled_from([ToolResult.OK, ToolResult.ERROR, ToolResult.REJECTED]))
            add(
                tool_result_envelope(
                    key,
                    draw(st.sampled_from(released)),
                    time_ms=clock,
                    status=status,
                    payload=b"{}",
                    envelope_id=f"tr-{n}",
                )
            )
        elif action == "timeout" and sim.next_deadline() is not None:
            deadline = sim.next_deadline()
            assert deadline is not None
            # Never backwards: a deadline behind the clock fires when the watermark reaches it.
            mark = max(deadline + 1, clock)
            steps.append(Watermark(mark))
            sim.watermark(mark)
            clock = mark + 1
        elif action == "export":
            add(export_request_envelope(key, f"x{n}", time_ms=clock, envelope_id=f"ex-{n}"))
        else:
            program = draw(programs(pending))
            kind = draw(st.sampled_from(["ask", "task"]))
            payload = json.dumps(program, sort_keys=True).encode()
            add(event_envelope(key, kind, payload, time_ms=clock, envelope_id=f"ev-{n}"))
    clock += 1
    for key in keys:
        add(export_request_envelope(key, "final", time_ms=clock, envelope_id=f"final-{key.hex()}"))
    return Scenario(steps, keys)


# --------------------------------------------------------------------------- the pipeline


def run_pipeline(scenario: Scenario, root: Path) -> None:
    stream = ScriptedStream()
    watermark = 0
    for step in scenario.steps:
        if isinstance(step, Watermark):
            if step.ms > watermark:  # it must advance strictly
                watermark = step.ms
                stream = stream.advance_watermark_to(watermark / 1000)
            continue
        at = max(step.event_time_ms, watermark) / 1000
        stream = stream.add_elements([TimestampedValue(step.SerializeToString(), at)])
    # Past every deadline before infinity (TestStream drops timers that fire only there).
    stream = stream.advance_watermark_to(4_000_000_000).advance_watermark_to_infinity()
    config = AgentConfig(
        provider_factory=pa.make_provider,
        traces_to=f"file://{root / 'traces'}",
        snapshots_to=f"file://{root / 'snapshots'}",
        hitl=pa.HITL,
        cache=pa.CACHE,
    )
    options = PipelineOptions(flags=[], streaming=True)
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        _ = p | stream | RunAgent(pa.AGENT, pa.TOOLS, config)


# --------------------------------------------------------------------------- the property

STATS: Counter[str] = Counter()


def _string(event: TraceEvent, name: str) -> str:
    return event.attributes[name].string_value if name in event.attributes else ""


def retention_reason(
    result: ReplayResult,
    snapshot: StateSnapshot,
    traced: dict[tuple[bytes, int], dict[int, TraceEvent]],
) -> str | None:
    """The documented reason an irreproducible verdict rests on, or None."""
    if result.stop is StopCause.MEMORY_UNSEEN:
        return unseen_reason(result, traced)
    miss = result.cache_miss
    if miss is not None:
        if miss.status in GONE and miss.cache_key == miss.traced_cache_key:
            return f"response {miss.status}"
        return None
    tool = result.tool_miss
    if tool is not None:
        if tool.args_sha256 != tool.traced_args_sha256:
            return None  # the arguments changed: an unchanged agent never does that
        if tool.status in TOOL_GONE:
            return f"recorded result {tool.status}"
        if tool.status == "other_seq" and tool.held_result_sha256 != tool.traced_result_sha256:
            return "recorded result of another seq (the service drifted)"
        return None
    rolled = len(snapshot.resumed_from) >= MAX_RESUME_HISTORY
    if rolled and "is no longer in the snapshot" in result.reason:
        return "continuation rolled over"
    if rolled and "pending intents at seq" in result.reason:
        return "pending intents rolled over"
    return None


def _committed(events: dict[int, TraceEvent] | None) -> bool:
    return bool(events) and events[max(events)].kind == TraceEvent.ACTIVATION_END


def unseen_reason(
    result: ReplayResult, traced: dict[tuple[bytes, int], dict[int, TraceEvent]]
) -> str | None:
    """The memory read an irreproducible verdict names, checked against the traces."""
    key, seq = result.header.entity_key, result.header.seq
    assert key is not None and seq is not None
    if not result.unseen_reads:
        return None
    for read in result.unseen_reads:
        if read.why is UnseenWhy.OWN_WRITE:
            if read.seq != seq or not _committed(traced.get((key, seq))):
                return None
        elif read.why in (UnseenWhy.REWRITTEN, UnseenWhy.DELETED):
            if read.seq is None or read.seq <= seq or not _committed(traced.get((key, read.seq))):
                return None
        else:
            return None  # every key of this pipeline was written with provenance
    return f"memory read unseen ({result.unseen_reads[0].why.value})"


def shape(events: dict[int, TraceEvent], snapshot: StateSnapshot) -> str:
    """What kind of activation a replay was (for the campaign's counts)."""
    start = events[0]
    kind = f"{_string(start, ATTR_ACTIVATION_KIND)}/{_string(start, ATTR_TRIGGER)}"
    last = events[max(events)]
    if last.kind == TraceEvent.ACTIVATION_FAILED:
        return f"{kind} failed"
    suspended = [e for e in events.values() if e.kind == TraceEvent.SUSPENDED]
    if kind == "start/event" and suspended:
        staged = {
            _string(e, ATTR_INTENT_ID)
            for e in events.values()
            if e.kind == TraceEvent.INTENT_STAGED
        }
        awaiting = [i for i in _string(suspended[0], ATTR_AWAITING).split(",") if i]
        earlier = [i for i in awaiting if i not in staged]
        still = {i.intent_id for i in snapshot.pending}
        if any(i not in still for i in earlier):
            return "start suspended on an earlier intent resolved after it (issue #17)"
        if earlier:
            return "start suspended on an earlier intent"
    return f"{kind} {'suspended' if suspended else 'ended'}"


def check_replays(scenario: Scenario, root: Path) -> list[str]:
    """Replay every traced activation; return what broke the property."""
    envelopes = {s.envelope_id: s for s in scenario.steps if isinstance(s, AgentEnvelope)}
    traced: dict[tuple[bytes, int], dict[int, TraceEvent]] = {}
    for path in trace_stream_files(root / "traces"):
        for event in read_trace_stream(path):
            traced.setdefault((event.entity_key, event.seq), {})[event.index] = event
    starts: dict[bytes, dict[int, TraceEvent]] = {}
    for (key, seq), events in traced.items():
        if 0 in events:
            starts.setdefault(key, {})[seq] = events[0]
    snapshots: dict[bytes, list[tuple[StateSnapshot, Path]]] = {}
    for path in sorted((root / "snapshots").glob("*.pb")):
        snapshot = StateSnapshot.FromString(path.read_bytes())
        snapshots.setdefault(snapshot.entity_key, []).append((snapshot, path))
    problems: list[str] = []
    for key in scenario.keys:
        exported = sorted(
            snapshots.get(key, []), key=lambda s: (s[0].seq, s[0].request_id == "final")
        )
        if not exported:
            problems.append(f"{key!r}: no snapshot")
            continue
        final = exported[-1]
        plan: list[tuple[int, StateSnapshot, Path]] = []
        previous = 0
        for snapshot, path in exported:
            plan += [(seq, snapshot, path) for seq in range(previous + 1, snapshot.seq + 1)]
            previous = snapshot.seq
        if final[0].request_id == "final":
            plan += [(seq, *final) for seq in range(1, final[0].seq + 1)]
        done: set[tuple[int, Path]] = set()
        for seq, snapshot, path in plan:
            if (seq, path) in done:
                continue
            done.add((seq, path))
            start = starts.get(key, {}).get(seq)
            if start is None:
                problems.append(f"{key!r} seq {seq}: not traced")
                continue
            event = None
            if _string(start, ATTR_TRIGGER) != "timeout":
                event = envelopes[_string(start, ATTR_ENVELOPE_ID)].SerializeToString()
            where = f"{key!r} seq {seq} from snapshot {snapshot.request_id!r} (seq {snapshot.seq})"
            result = replay_with("program_agents:AGENT", path, root, event, seq)
            STATS["replays"] += 1
            STATS[f"shape: {shape(traced[(key, seq)], snapshot)}"] += 1
            if result.verdict is Verdict.REPRODUCED:
                STATS["reproduced"] += 1
            else:
                reason = (
                    retention_reason(result, snapshot, traced)
                    if result.verdict is Verdict.IRREPRODUCIBLE
                    else None
                )
                if reason is not None:
                    STATS[f"irreproducible: {reason}"] += 1
                else:
                    STATS[f"VIOLATION {result.verdict.value}"] += 1
                    problems.append(
                        f"{where}: {result.verdict.value}: {result.reason} {result.error}"
                    )
            if _committed(traced[(key, seq)]):
                problems += check_mutants(where, path, root, event, seq)
    return problems


def replay_with(
    agent: str, snapshot: Path, root: Path, event: bytes | None, seq: int
) -> ReplayResult:
    return replay(
        ReplayOptions(
            snapshot=snapshot,
            traces=(root / "traces",),
            event=event,
            agent=agent,
            registry="program_agents:TOOLS",
            hitl="program_agents:HITL",
            seq=seq,
        )
    )


def check_mutants(
    where: str, snapshot: Path, root: Path, event: bytes | None, seq: int
) -> list[str]:
    """Replay a committed activation with each memory-only mutant: none that changed what the
    activation wrote may read ``reproduced``."""
    problems: list[str] = []
    for name, attribute in pa.MUTANTS.items():
        before = pa.MUTATED[name]
        result = replay_with(f"program_agents:{attribute}", snapshot, root, event, seq)
        if pa.MUTATED[name] == before:
            continue  # the mutant had nothing to change here (no write to drop, a failure)
        STATS[f"mutant {name}: replays"] += 1
        STATS[f"mutant {name}: {result.verdict.value}"] += 1
        if result.verdict is Verdict.REPRODUCED or result.exit_code == 0:
            STATS[f"VIOLATION mutant {name} reproduced"] += 1
            problems.append(
                f"{where}: mutant {name!r} read {result.verdict.value}: {result.reason}"
            )
    return problems


@pytest.mark.timeout(0 if FUZZ_EXAMPLES else 300)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not FUZZ_EXAMPLES,
    # A long campaign reports its first failing scenario as found (readable, see
    # Scenario.__repr__): shrinking one pipeline run at a time takes hours.
    phases=[Phase.generate] if FUZZ_EXAMPLES else list(Phase),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
@given(scenario=scenarios())
def test_every_traced_activation_replays_as_reproduced_or_for_a_retention_reason(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("property")
    run_pipeline(scenario, root)
    problems = check_replays(scenario, root)
    assert not problems, "\n".join(problems)


def test_zz_report_what_the_property_replayed(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints the campaign's counts (``make fuzz`` shows them) and checks it replayed something."""
    if not STATS:
        pytest.skip("the property test did not run in this session")
    with capsys.disabled():
        print("\nreplay property:")
        for name, count in sorted(STATS.items()):
            print(f"  {name}: {count}")
    assert STATS["replays"] > 0 and STATS["reproduced"] > 0
    assert sum(v for k, v in STATS.items() if k.startswith("mutant") and k.endswith("replays"))
