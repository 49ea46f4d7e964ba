"""``AgentDoFn``: the stateful DoFn that runs one key's serial history of activations.

Input: ``(entity_key, envelope bytes)`` in the global window (``RunAgent`` routes
and keys them). Per key it holds the state cells below and one event-time timer,
and for each envelope does what ``classify_trigger`` decides:

    START / RESUME  take the next SEQ, call ``run_activation`` (the one
                    implementation), commit the cells on success (only SEQ on a
                    failure), emit the trace and, on success, outputs/intents/
                    approvals; arm or clear the HITL timer; when the key stops
                    being suspended, run the events waiting in its inbox.
    QUEUE           append the envelope to the key's bounded inbox.
    EXPORT          emit one ``StateSnapshot`` of the cells as they are. Read-only:
                    no cell written, no timer touched, SEQ unchanged.
    REJECT          an ``ErrorRecord`` on ``errors``; nothing changes.

Nothing here decides agent semantics: triggers are classified by
``beam_agents.activation.classify_trigger``, blobs are read by
``beam_agents.key_state.load_key_state`` (which migrates old versions in memory;
the current version is written back only by the next commit) and exported by
``make_snapshot``. This module only moves bytes between Beam's state cells, the
core, and the outputs.

Every output element is ``(entity_key, bytes)`` of deterministic serializations,
except ``trace_batches`` (``(entity_key, tuple of bytes)``: one activation's trace)
and ``errors`` (``ErrorRecord``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._protos import AgentEnvelope
from beam_agents.activation import (
    ActivationCommit,
    ActivationResult,
    TriggerAction,
    TriggerDecision,
    classify_trigger,
    hitl_timeout,
    run_activation,
    trigger_name,
)
from beam_agents.agent import Agent, Timeout
from beam_agents.config import AgentConfig
from beam_agents.dead_letter import (
    INBOX_OVERFLOW,
    MALFORMED_ENVELOPE,
    NO_BODY,
    REJECTED_TRIGGER,
    STATE_UNREADABLE,
    ErrorCode,
    ErrorRecord,
)
from beam_agents.errors import StateError
from beam_agents.key_state import KeyState, StateCells, load_key_state, make_snapshot
from beam_agents.pipeline._beam import (
    BytesCoder,
    IterableCoder,
    Metrics,
    ReadModifyWriteStateSpec,
    TimeDomain,
    TimerSpec,
    Timestamp,
    VarIntCoder,
    WindowedValue,
    beam,
    on_timer,
)
from beam_agents.provider import Provider
from beam_agents.tools import ToolRegistry
from beam_agents.trace_events import serialize_trace_event
from beam_agents.trace_view import Trigger

METRICS_NAMESPACE = "beam_agents"

_BLOB_CELLS = ("memory", "llm_cache", "continuation", "pending", "resume_history", "tool_cache")
"""The ``StateCells`` fields, each held in the Beam state cell of the same name."""


def _deadline_of(state: KeyState) -> int | None:
    return None if state.continuation is None else state.continuation.deadline_ms


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(micros=ms * 1000)


SEQ_SPEC = ReadModifyWriteStateSpec("seq", VarIntCoder())
MEMORY_SPEC = ReadModifyWriteStateSpec("memory", BytesCoder())
LLM_CACHE_SPEC = ReadModifyWriteStateSpec("llm_cache", BytesCoder())
CONTINUATION_SPEC = ReadModifyWriteStateSpec("continuation", BytesCoder())
PENDING_SPEC = ReadModifyWriteStateSpec("pending", BytesCoder())
RESUME_HISTORY_SPEC = ReadModifyWriteStateSpec("resume_history", BytesCoder())
TOOL_CACHE_SPEC = ReadModifyWriteStateSpec("tool_cache", BytesCoder())
INBOX_SPEC = ReadModifyWriteStateSpec("inbox", IterableCoder(BytesCoder()))
HITL_TIMER_SPEC = TimerSpec("hitl_deadline", TimeDomain.WATERMARK)

# The DoFn parameters that ask Beam for each cell (module-level: they are shared defaults).
SEQ_PARAM = beam.DoFn.StateParam(SEQ_SPEC)
MEMORY_PARAM = beam.DoFn.StateParam(MEMORY_SPEC)
LLM_CACHE_PARAM = beam.DoFn.StateParam(LLM_CACHE_SPEC)
CONTINUATION_PARAM = beam.DoFn.StateParam(CONTINUATION_SPEC)
PENDING_PARAM = beam.DoFn.StateParam(PENDING_SPEC)
RESUME_HISTORY_PARAM = beam.DoFn.StateParam(RESUME_HISTORY_SPEC)
TOOL_CACHE_PARAM = beam.DoFn.StateParam(TOOL_CACHE_SPEC)
INBOX_PARAM = beam.DoFn.StateParam(INBOX_SPEC)
HITL_TIMER_PARAM = beam.DoFn.TimerParam(HITL_TIMER_SPEC)
KEY_PARAM = beam.DoFn.KeyParam
TIMESTAMP_PARAM = beam.DoFn.TimestampParam
WINDOW_PARAM = beam.DoFn.WindowParam


@dataclass
class _KeyRun:
    """One key's state while one element (or timer) is handled; written back once at the end."""

    seq: int
    """The SEQ cell: the last activation's seq (0 before the first)."""
    stored: StateCells
    """The blob cells as read."""
    cells: StateCells
    """The blob cells as they will be written (``stored`` until a commit)."""
    state: KeyState
    """``cells`` loaded."""
    timer_at: int | None
    """Where the HITL timer is set now (None: not set)."""
    timer_target: int | None
    """Where it must be set when the element is done (None: cleared)."""
    outputs: list[Any] = field(default_factory=list)


class AgentDoFn(beam.DoFn):  # type: ignore[misc]
    """Runs ``agent`` for each key of a ``(entity_key, envelope bytes)`` PCollection.

    Main output: ``(entity_key, output bytes)`` (``Done`` outputs); tagged outputs
    ``TAG_INTENTS``, ``TAG_APPROVALS``, ``TAG_SNAPSHOTS`` (all ``(entity_key, bytes)``),
    ``TAG_TRACE_BATCHES`` (``(entity_key, tuple of bytes)``, one per activation) and
    ``TAG_ERRORS`` (``ErrorRecord``).
    """

    TAG_INTENTS = "intents"
    """Released ``ToolIntent`` bytes: an executor may perform them now."""
    TAG_APPROVALS = "approvals"
    """Approval-gated ``ToolIntent`` bytes for the approval service."""
    TAG_TRACE_BATCHES = "trace_batches"
    """One element per activation: ``(entity_key, (serialize_trace_event bytes, ...))``, the
    activation's events in order. One element instead of one per event: each output element
    costs a runner far more than the bytes it carries (``RunAgentOutputs.traces`` splits it)."""
    TAG_SNAPSHOTS = "snapshots"
    """``StateSnapshot`` bytes (deterministic serialization), one per export request."""
    TAG_ERRORS = "errors"
    """``ErrorRecord`` of every refused trigger."""
    TAG_OUTPUTS = "outputs"
    """The main output's name in ``RunAgentOutputs``."""

    SEQ = SEQ_SPEC
    """SEQ: the last activation's seq (absent before the first)."""
    MEMORY = MEMORY_SPEC
    LLM_CACHE = LLM_CACHE_SPEC
    CONTINUATION = CONTINUATION_SPEC
    PENDING = PENDING_SPEC
    RESUME_HISTORY = RESUME_HISTORY_SPEC
    TOOL_CACHE = TOOL_CACHE_SPEC
    """Results of ``@tool(recorded=True)`` tools (the ``tool_cache`` blob)."""
    INBOX = INBOX_SPEC
    """Raw envelope bytes of start events waiting for the key to stop being suspended."""
    HITL_TIMER = HITL_TIMER_SPEC
    """Set at the continuation's ``deadline_ms`` while the key is suspended."""

    def __init__(self, agent: Agent, registry: ToolRegistry, config: AgentConfig) -> None:
        super().__init__()
        self._agent = agent
        self._registry = registry
        self._config = config
        self._provider: Provider | None = None
        # Names this transform's activation pool in each worker process (survives pickling,
        # so every instance of the DoFn in a process shares one pool and one bound).
        self._pool_id = uuid.uuid4().hex
        self._lanes: _Lanes | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The provider is built per instance in setup() and is never shipped to workers.
        state = dict(self.__dict__)
        state["_provider"] = None
        state["_lanes"] = None
        return state

    def setup(self) -> None:
        self._provider = self._config.provider_factory()
        self._activations = _Metric(Metrics.counter(METRICS_NAMESPACE, "activations"))
        self._failures = _Metric(Metrics.counter(METRICS_NAMESPACE, "activation_failures"))
        self._provider_failures = _Metric(Metrics.counter(METRICS_NAMESPACE, "provider_failures"))
        self._exports = _Metric(Metrics.counter(METRICS_NAMESPACE, "exports"))
        self._queued = _Metric(Metrics.counter(METRICS_NAMESPACE, "inbox_queued"))
        self._dead_letters = _Metric(Metrics.counter(METRICS_NAMESPACE, "dead_letters"))
        self._stale_timers = _Metric(Metrics.counter(METRICS_NAMESPACE, "stale_hitl_timers"))
        self._latency = _Metric(Metrics.distribution(METRICS_NAMESPACE, "activation_wall_ms"))

    def start_bundle(self) -> None:
        if self._lanes is not None:  # the previous bundle failed: drop its work unrun
            self._lanes.abandon()
            self._lanes = None
        if self._config.max_in_flight > 1:
            self._lanes = _Lanes(self, _activation_pool(self._pool_id, self._config.max_in_flight))

    def finish_bundle(self) -> Iterator[Any]:
        lanes, self._lanes = self._lanes, None
        if lanes is not None:
            yield from lanes.commit_all()

    def teardown(self) -> None:
        # A provider holding connections (beam_agents.providers) offers close().
        close = getattr(self._provider, "close", None)
        self._provider = None
        if callable(close):
            close()

    # -- Beam entry points ----------------------------------------------------------------

    def process(
        self,
        element: tuple[bytes, bytes],
        seq_cell: Any = SEQ_PARAM,
        memory_cell: Any = MEMORY_PARAM,
        llm_cache_cell: Any = LLM_CACHE_PARAM,
        continuation_cell: Any = CONTINUATION_PARAM,
        pending_cell: Any = PENDING_PARAM,
        resume_history_cell: Any = RESUME_HISTORY_PARAM,
        tool_cache_cell: Any = TOOL_CACHE_PARAM,
        inbox_cell: Any = INBOX_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        timestamp: Any = TIMESTAMP_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        key, raw = element
        store = _CellStore(
            seq_cell,
            (
                memory_cell,
                llm_cache_cell,
                continuation_cell,
                pending_cell,
                resume_history_cell,
                tool_cache_cell,
            ),
            inbox_cell,
        )
        if self._lanes is not None:
            self._lanes.add(key, store, timer, _Item(raw, None, timestamp, window))
            return iter(())
        return _tagged(self._handle_envelope(key, raw, store, timer))

    @on_timer(HITL_TIMER_SPEC)  # type: ignore[untyped-decorator]
    def on_hitl_deadline(
        self,
        key: Any = KEY_PARAM,
        fired_at: Any = TIMESTAMP_PARAM,
        seq_cell: Any = SEQ_PARAM,
        memory_cell: Any = MEMORY_PARAM,
        llm_cache_cell: Any = LLM_CACHE_PARAM,
        continuation_cell: Any = CONTINUATION_PARAM,
        pending_cell: Any = PENDING_PARAM,
        resume_history_cell: Any = RESUME_HISTORY_PARAM,
        tool_cache_cell: Any = TOOL_CACHE_PARAM,
        inbox_cell: Any = INBOX_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        store = _CellStore(
            seq_cell,
            (
                memory_cell,
                llm_cache_cell,
                continuation_cell,
                pending_cell,
                resume_history_cell,
                tool_cache_cell,
            ),
            inbox_cell,
        )
        fired_ms = fired_at.micros // 1000
        if self._lanes is not None:
            self._lanes.add(key, store, timer, _Item(None, fired_ms, fired_at, window))
            return iter(())
        return _tagged(self._handle_deadline(key, fired_ms, store, timer))

    # -- the logic, on plain objects (state cells: read/write/clear; timer: set/clear) ------

    def _handle_envelope(
        self, key: bytes, raw: bytes, store: _Store, timer: Any
    ) -> Iterator[tuple[str, Any]]:
        """Handle one routed envelope of ``key``; yields ``(tag, element)`` pairs."""
        try:
            envelope = AgentEnvelope.FromString(raw)
        except DecodeError as exc:  # RunAgent routes only parsed envelopes; a hand-fed one
            yield self._error(MALFORMED_ENVELOPE, f"bytes that do not parse ({exc})", key, raw)
            return
        if envelope.WhichOneof("body") == "export_request":
            # Before loading the state: an export must work even when this binary cannot
            # load the key's blobs (that is when an operator needs the snapshot most), and
            # it only copies the cells.
            yield self._export(key, raw, envelope, store)
            return
        run = self._read(store, timer_at_from_state=True)
        if isinstance(run, StateError):
            yield self._error(
                STATE_UNREADABLE, str(run), key, raw, envelope_id=envelope.envelope_id
            )
            return
        decision = classify_trigger(run.state, envelope)
        if decision.action is TriggerAction.REJECT:
            code = NO_BODY if trigger_name(envelope) is Trigger.NONE else REJECTED_TRIGGER
            yield self._error(code, decision.reason, key, raw, envelope_id=envelope.envelope_id)
            return
        if decision.action is TriggerAction.QUEUE:
            yield from self._enqueue(key, raw, envelope, store)
            return
        was_suspended = run.state.continuation is not None
        self._activate(key, run, envelope, decision, now_ms=envelope.event_time_ms)
        if was_suspended and run.state.continuation is None:
            self._drain_inbox(key, run, store)
        self._write(run, store, timer)
        yield from run.outputs

    def _handle_deadline(
        self, key: bytes, fired_ms: int, store: _Store, timer: Any
    ) -> Iterator[tuple[str, Any]]:
        """Handle the HITL timer of ``key`` firing at ``fired_ms``; yields ``(tag, element)``."""
        run = self._read(store, timer_at_from_state=False)
        if isinstance(run, StateError):
            yield self._error(STATE_UNREADABLE, f"HITL timer at {fired_ms}: {run}", key, b"")
            return
        cont = run.state.continuation
        if cont is None or cont.deadline_ms != fired_ms:
            # A timer set for a suspension that has since ended or been replaced.
            self._stale_timers.inc()
            return
        trigger = hitl_timeout(cont, fired_ms)
        decision = classify_trigger(run.state, trigger)
        if decision.action is not TriggerAction.RESUME:
            return
        self._activate(key, run, trigger, decision, now_ms=fired_ms)
        if run.state.continuation is None:
            self._drain_inbox(key, run, store)
        self._write(run, store, timer)
        yield from run.outputs

    # -- steps -----------------------------------------------------------------------------

    def _read(self, store: _Store, *, timer_at_from_state: bool) -> _KeyRun | StateError:
        cells = store.read_cells()
        try:
            state = load_key_state(cells)
        except StateError as exc:
            return exc
        # While suspended the timer is set at the continuation's deadline (every commit
        # that suspends sets it); once it has fired it is set nowhere.
        timer_at = _deadline_of(state) if timer_at_from_state else None
        return _KeyRun(
            seq=store.read_seq(),
            stored=cells,
            cells=cells,
            state=state,
            timer_at=timer_at,
            timer_target=timer_at,
        )

    def _activate(
        self,
        key: bytes,
        run: _KeyRun,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> None:
        provider = self._provider
        if provider is None:  # process() before setup(): a runner bug, or a hand-made call
            raise RuntimeError("AgentDoFn.setup() was not called before processing")
        seq = run.seq + 1
        started = time.perf_counter()
        result: ActivationResult = run_activation(
            self._agent,
            self._registry,
            provider,
            run.state,
            trigger,
            now_ms=now_ms,
            seq=seq,
            entity_key=key,
            hitl=self._config.hitl,
            cache_policy=self._config.cache,
            tool_cache_policy=self._config.tool_cache,
            decision=decision,
        )
        self._latency.update(int((time.perf_counter() - started) * 1000))
        self._activations.inc()
        # Each activation takes its SEQ, failed or not (invariant 1 keeps only this and
        # the trace of a failure).
        run.seq = seq
        out = run.outputs
        out.append(
            (
                AgentDoFn.TAG_TRACE_BATCHES,
                (key, tuple([serialize_trace_event(event) for event in result.trace])),
            )
        )
        if result.provider_failures:
            self._provider_failures.inc(len(result.provider_failures))
        if not isinstance(result, ActivationCommit):
            self._failures.inc()
            return
        run.cells = result.cells
        run.state = result.state
        run.timer_target = result.timer_deadline_ms
        for payload in result.outputs:
            out.append((AgentDoFn.TAG_OUTPUTS, (key, payload)))
        for intent in result.released_intents:
            out.append((AgentDoFn.TAG_INTENTS, (key, intent.SerializeToString(deterministic=True))))
        for intent in result.approval_requests:
            out.append(
                (AgentDoFn.TAG_APPROVALS, (key, intent.SerializeToString(deterministic=True)))
            )

    def _drain_inbox(self, key: bytes, run: _KeyRun, store: _Store) -> None:
        """Run the key's queued start events in arrival order until one suspends it again.

        Each is its own activation with its own SEQ, on its own envelope's clock.
        Only a suspended key queues, so a key that was not suspended has an empty inbox.
        """
        inbox = store.read_inbox()
        if not inbox:
            return
        done = 0
        for raw in inbox:
            if run.state.continuation is not None:
                break
            done += 1
            envelope = AgentEnvelope.FromString(raw)
            # As a separate element would: from the committed bytes, exactly what replay
            # loads from a snapshot taken between the two.
            run.state = load_key_state(run.cells)
            decision = classify_trigger(run.state, envelope)
            if decision.action is not TriggerAction.START:
                # Only events queue, and only while suspended; kept for safety, never dropped.
                run.outputs.append(
                    self._error(
                        REJECTED_TRIGGER,
                        f"queued event refused: {decision.reason or decision.action.value}",
                        key,
                        raw,
                        envelope_id=envelope.envelope_id,
                    )
                )
                continue
            self._activate(key, run, envelope, decision, now_ms=envelope.event_time_ms)
        store.write_inbox(inbox[done:])

    def _enqueue(
        self, key: bytes, raw: bytes, envelope: AgentEnvelope, store: _Store
    ) -> Iterator[tuple[str, Any]]:
        inbox = store.read_inbox()
        limit = self._config.inbox_limit
        if len(inbox) >= limit:
            yield self._error(
                INBOX_OVERFLOW,
                f"key {key.hex()} is suspended and its inbox already holds {len(inbox)} "
                f"start events (AgentConfig.inbox_limit={limit}); this event was not queued",
                key,
                raw,
                envelope_id=envelope.envelope_id,
            )
            return
        store.write_inbox([*inbox, raw])
        self._queued.inc()

    def _export(
        self, key: bytes, raw: bytes, envelope: AgentEnvelope, store: _Store
    ) -> tuple[str, Any]:
        try:
            snapshot = make_snapshot(
                store.read_cells(),
                entity_key=key,
                seq=store.read_seq(),
                snapshot_at_ms=envelope.event_time_ms,
                request_id=envelope.export_request.request_id,
            )
        except StateError as exc:
            return self._error(
                STATE_UNREADABLE,
                f"export {envelope.export_request.request_id!r}: {exc}",
                key,
                raw,
                envelope_id=envelope.envelope_id,
            )
        self._exports.inc()
        return AgentDoFn.TAG_SNAPSHOTS, (key, snapshot.SerializeToString(deterministic=True))

    def _write(self, run: _KeyRun, store: _Store, timer: Any) -> None:
        store.write_seq(run.seq)
        store.write_changed(run.stored, run.cells)
        if run.timer_target != run.timer_at:
            if run.timer_target is None:
                timer.clear()
            else:
                timer.set(_timestamp(run.timer_target))

    def _error(
        self, code: ErrorCode, reason: str, key: bytes, raw: bytes, *, envelope_id: str = ""
    ) -> tuple[str, ErrorRecord]:
        self._dead_letters.inc()
        return AgentDoFn.TAG_ERRORS, ErrorRecord(
            code, reason, entity_key=key, envelope_id=envelope_id, raw=raw
        )


class _CellStore:
    """The Beam state cells of one key, read and written as ``StateCells`` and ints."""

    __slots__ = ("_blobs", "_inbox", "_seq")

    def __init__(self, seq: Any, blobs: tuple[Any, ...], inbox: Any) -> None:
        self._seq = seq
        self._blobs = blobs
        self._inbox = inbox

    def read_seq(self) -> int:
        value = self._seq.read()
        return 0 if value is None else int(value)

    def write_seq(self, seq: int) -> None:
        self._seq.write(seq)

    def read_cells(self) -> StateCells:
        return StateCells(
            **{
                name: cell.read() or b""
                for name, cell in zip(_BLOB_CELLS, self._blobs, strict=True)
            }
        )

    def write_changed(self, before: StateCells, after: StateCells) -> None:
        """Write the blob cells whose bytes changed (an empty value clears its cell)."""
        if after is before:
            return
        for cell, name in zip(self._blobs, _BLOB_CELLS, strict=True):
            new = getattr(after, name)
            if new == getattr(before, name):
                continue
            if new:
                cell.write(new)
            else:
                cell.clear()

    def read_inbox(self) -> list[bytes]:
        value = self._inbox.read()
        return [] if value is None else list(value)

    def write_inbox(self, inbox: list[bytes]) -> None:
        if inbox:
            self._inbox.write(inbox)
        else:
            self._inbox.clear()


# -- concurrent activations (AgentConfig.max_in_flight > 1) ---------------------------------
#
# Within a bundle, each key's elements and timer firings run in a *lane*: one after another,
# in arrival order, on a pool thread, against an in-memory copy of the key's cells (read on
# the bundle's thread when the key first appears). Lanes of different keys run at once, up to
# max_in_flight per transform per worker process. Nothing reaches Beam until finish_bundle:
# there, on the bundle's thread, every lane's final cells and timer are written through the
# state objects Beam handed to process() for that key, and its outputs are emitted with the
# timestamp and window of the element that caused them. The runner commits a bundle's state
# and outputs together or not at all, so an activation in flight when a bundle fails is
# never half-committed or committed twice: the retried bundle runs it again.
# This relies on the Python SDK committing user state after finish_bundle (every Python
# runner: DirectRunner, FnApiRunner, the portable Fn API harness of Dataflow/Flink/Spark);
# docs/pipeline.md says what a production runner needs.

_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
_LANE_THREAD = threading.local()
"""``tally``: the metric updates of the lane running on this thread (None on Beam's threads)."""


def _activation_pool(pool_id: str, size: int) -> ThreadPoolExecutor:
    """The process-wide pool of one RunAgent transform (one bound across its DoFn instances)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(pool_id)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="beam-agents-activation")
            _POOLS[pool_id] = pool
        return pool


class _Metric:
    """A Beam counter or distribution, updatable from a lane's thread.

    Beam finds the metrics container of the running bundle through the calling thread;
    a pool thread has none, so a lane tallies its updates and the bundle's thread applies
    them when it commits the lane (a failed bundle reports none, like its state).
    """

    __slots__ = ("_metric",)

    def __init__(self, metric: Any) -> None:
        self._metric = metric

    def inc(self, n: int = 1) -> None:
        self._record(self._metric.inc, n)

    def update(self, value: int) -> None:
        self._record(self._metric.update, value)

    @staticmethod
    def _record(apply: Callable[[int], None], value: int) -> None:
        tally: list[tuple[Callable[[int], None], int]] | None = getattr(_LANE_THREAD, "tally", None)
        if tally is None:
            apply(value)
        else:
            tally.append((apply, value))


@dataclass(frozen=True)
class _Item:
    """One thing a lane runs: an envelope (``raw``) or a HITL timer firing (``fired_ms``)."""

    raw: bytes | None
    fired_ms: int | None
    timestamp: Any
    """The element's (or timer's) timestamp: its outputs carry it."""
    window: Any


class _MemoryStore:
    """A key's cells held in memory while its lane runs; the ``_CellStore`` interface."""

    __slots__ = ("cells", "inbox", "seq")

    def __init__(self, seq: int, cells: StateCells, inbox: list[bytes]) -> None:
        self.seq = seq
        self.cells = cells
        self.inbox = inbox

    def read_seq(self) -> int:
        return self.seq

    def write_seq(self, seq: int) -> None:
        self.seq = seq

    def read_cells(self) -> StateCells:
        return self.cells

    def write_changed(self, before: StateCells, after: StateCells) -> None:
        self.cells = after

    def read_inbox(self) -> list[bytes]:
        return list(self.inbox)

    def write_inbox(self, inbox: list[bytes]) -> None:
        self.inbox = list(inbox)


_Store = _CellStore | _MemoryStore
"""Where the handlers read and write a key's cells: Beam's state, or a lane's copy."""

_CLEARED = object()


class _TimerOps:
    """Stands in for the HITL timer while a lane runs: keeps the last set/clear."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: Any = None

    def set(self, timestamp: Any) -> None:
        self.last = timestamp

    def clear(self) -> None:
        self.last = _CLEARED

    def apply(self, timer: Any) -> None:
        if self.last is _CLEARED:
            timer.clear()
        elif self.last is not None:
            timer.set(self.last)


class _Lane:
    """One key's work in one bundle: its items, run in order, one at a time."""

    def __init__(
        self, key: bytes, store: _CellStore, timer: Any, bundle_failed: threading.Event
    ) -> None:
        self.key = key
        self._bundle_failed = bundle_failed
        self._store = store
        self._timer = timer
        # Read on the bundle's thread: Beam state is only read or written there.
        self._seq = store.read_seq()
        self._cells = store.read_cells()
        # Only a suspended key queues, so a key that is not suspended has an empty inbox
        # (the serial path relies on the same rule): one state read fewer per key.
        self._inbox = store.read_inbox() if self._cells.continuation else []
        self._memory = _MemoryStore(self._seq, self._cells, self._inbox)
        self._timer_ops = _TimerOps()
        self._items: deque[_Item] = deque()
        self._results: list[tuple[list[tuple[str, Any]], _Item]] = []
        self._tally: list[tuple[Callable[[int], None], int]] = []
        self._lock = threading.Lock()
        self._running = False
        self._abandoned = False
        self.future: Future[None] | None = None
        self.error: BaseException | None = None

    def add(self, item: _Item, pool: ThreadPoolExecutor, dofn: AgentDoFn) -> None:
        with self._lock:
            self._items.append(item)
            if self._running or self.error is not None:
                return
            self._running = True
        self.future = pool.submit(self._run, dofn)

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            self._items.clear()

    def _run(self, dofn: AgentDoFn) -> None:
        _LANE_THREAD.tally = self._tally
        try:
            while True:
                with self._lock:
                    # Once any lane of the bundle failed, nothing of it will be committed:
                    # start no more work (the retried bundle runs it all again).
                    if not self._items or self._abandoned or self._bundle_failed.is_set():
                        self._running = False
                        return
                    item = self._items.popleft()
                if item.raw is not None:
                    pairs = dofn._handle_envelope(self.key, item.raw, self._memory, self._timer_ops)
                else:
                    assert item.fired_ms is not None
                    pairs = dofn._handle_deadline(
                        self.key, item.fired_ms, self._memory, self._timer_ops
                    )
                self._results.append((list(pairs), item))
        except BaseException as exc:  # the bundle fails with it (commit_all re-raises)
            with self._lock:
                self.error = exc
                self._running = False
            self._bundle_failed.set()
        finally:
            _LANE_THREAD.tally = None

    def commit(self) -> Iterator[Any]:
        """Write the lane's final cells and timer through Beam's objects; yield its outputs."""
        for apply, value in self._tally:
            apply(value)
        memory = self._memory
        if memory.seq != self._seq:
            self._store.write_seq(memory.seq)
        self._store.write_changed(self._cells, memory.cells)
        if memory.inbox != self._inbox:
            self._store.write_inbox(memory.inbox)
        self._timer_ops.apply(self._timer)
        for pairs, item in self._results:
            for tag, value in pairs:
                windowed = WindowedValue(value, item.timestamp, (item.window,))
                yield (
                    windowed
                    if tag == AgentDoFn.TAG_OUTPUTS
                    else beam.pvalue.TaggedOutput(tag, windowed)
                )


class _Lanes:
    """A bundle's lanes, by key in order of first appearance."""

    def __init__(self, dofn: AgentDoFn, pool: ThreadPoolExecutor) -> None:
        self._dofn = dofn
        self._pool = pool
        self._by_key: dict[bytes, _Lane] = {}
        self._failed = threading.Event()

    def add(self, key: bytes, store: _CellStore, timer: Any, item: _Item) -> None:
        lane = self._by_key.get(key)
        if lane is None:
            lane = self._by_key[key] = _Lane(key, store, timer, self._failed)
        lane.add(item, self._pool, self._dofn)

    def abandon(self) -> None:
        for lane in self._by_key.values():
            lane.abandon()

    def commit_all(self) -> Iterator[Any]:
        """Wait for every lane; if one failed, raise (nothing written); else commit each."""
        lanes = list(self._by_key.values())
        wait_for_futures([lane.future for lane in lanes if lane.future is not None])
        for lane in lanes:
            if lane.error is not None:
                raise lane.error
        for lane in lanes:
            yield from lane.commit()


def _tagged(pairs: Iterable[tuple[str, Any]]) -> Iterator[Any]:
    for tag, value in pairs:
        if tag == AgentDoFn.TAG_OUTPUTS:
            yield value
        else:
            yield beam.pvalue.TaggedOutput(tag, value)


__all__ = ["AgentDoFn"]
