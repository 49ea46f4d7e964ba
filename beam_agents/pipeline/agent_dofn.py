"""``AgentDoFn``: the stateful DoFn that runs one key's serial history of activations.

Input: ``(entity_key, envelope bytes)`` in the global window (``RunAgent`` routes
and keys them). Per key it holds the state cells below and one event-time timer.
What it does with each envelope and each timer firing is ``beam_agents.key_step``
(classify, SEQ, run, commit, HITL and retry timer targets, inbox, hold, export;
Beam-free and shared with ``beam_agents.testing.PipelineKey``): this module is only an
adapter between that step and Beam, its state cells and two timers on one side
(``_CellStore``), its tagged outputs and metrics on the other, serially or in
concurrent lanes (``AgentConfig.max_in_flight > 1``, below).

Every output element is ``(entity_key, bytes)`` of deterministic serializations,
except ``trace_batches`` (``(entity_key, tuple of bytes, telemetry bytes)``: one
activation's trace, and its wall times from ``beam_agents.telemetry``) and ``errors``
(``ErrorRecord``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from typing import Any

from beam_agents._protos import AgentEnvelope, TraceEvent
from beam_agents.activation import (
    ActivationCommit,
    ActivationResult,
    TriggerDecision,
)
from beam_agents.agent import Agent, Timeout
from beam_agents.config import AgentConfig
from beam_agents.key_state import KeyState, StateCells
from beam_agents.key_step import (
    Activate,
    Emit,
    HitlDeadline,
    KeyStep,
    MemoryKeyStore,
    RetryDue,
    StepResult,
    TimerTarget,
    activation_runner,
)
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
from beam_agents.provider import Provider, observe_calls
from beam_agents.telemetry import ActivationTelemetry, measure_activation
from beam_agents.tools import ToolRegistry

METRICS_NAMESPACE = "beam_agents"

# The step's output kinds the per-element path compares with, as plain module names (an
# Enum's class attribute costs a metaclass lookup each time), and each one's tag as a str.
_OUTPUTS = Emit.OUTPUTS
_ERRORS = Emit.ERRORS
_SNAPSHOTS = Emit.SNAPSHOTS
_TRACE_BATCHES = Emit.TRACE_BATCHES
_TAG_NAMES: dict[Emit, str] = {member: member.value for member in Emit}

_BLOB_CELLS = ("memory", "llm_cache", "continuation", "pending", "resume_history", "tool_cache")
"""The ``StateCells`` fields, each held in the Beam state cell of the same name."""


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
HOLD_SPEC = ReadModifyWriteStateSpec("hold", BytesCoder())
HITL_TIMER_SPEC = TimerSpec("hitl_deadline", TimeDomain.WATERMARK)
RETRY_TIMER_SPEC = TimerSpec("retry_due", TimeDomain.WATERMARK)

# The DoFn parameters that ask Beam for each cell (module-level: they are shared defaults).
SEQ_PARAM = beam.DoFn.StateParam(SEQ_SPEC)
MEMORY_PARAM = beam.DoFn.StateParam(MEMORY_SPEC)
LLM_CACHE_PARAM = beam.DoFn.StateParam(LLM_CACHE_SPEC)
CONTINUATION_PARAM = beam.DoFn.StateParam(CONTINUATION_SPEC)
PENDING_PARAM = beam.DoFn.StateParam(PENDING_SPEC)
RESUME_HISTORY_PARAM = beam.DoFn.StateParam(RESUME_HISTORY_SPEC)
TOOL_CACHE_PARAM = beam.DoFn.StateParam(TOOL_CACHE_SPEC)
INBOX_PARAM = beam.DoFn.StateParam(INBOX_SPEC)
HOLD_PARAM = beam.DoFn.StateParam(HOLD_SPEC)
HITL_TIMER_PARAM = beam.DoFn.TimerParam(HITL_TIMER_SPEC)
RETRY_TIMER_PARAM = beam.DoFn.TimerParam(RETRY_TIMER_SPEC)
KEY_PARAM = beam.DoFn.KeyParam
TIMESTAMP_PARAM = beam.DoFn.TimestampParam
WINDOW_PARAM = beam.DoFn.WindowParam


class AgentDoFn(beam.DoFn):  # type: ignore[misc]
    """Runs ``agent`` for each key of a ``(entity_key, envelope bytes)`` PCollection.

    Main output: ``(entity_key, output bytes)`` (``Done`` outputs); tagged outputs
    ``TAG_INTENTS``, ``TAG_APPROVALS``, ``TAG_SNAPSHOTS`` (all ``(entity_key, bytes)``),
    ``TAG_TRACE_BATCHES`` (``(entity_key, tuple of bytes, telemetry bytes)``, one per
    activation) and
    ``TAG_ERRORS`` (``ErrorRecord``).
    """

    TAG_INTENTS = Emit.INTENTS.value
    """Released ``ToolIntent`` bytes: an executor may perform them now."""
    TAG_APPROVALS = Emit.APPROVALS.value
    """Approval-gated ``ToolIntent`` bytes for the approval service."""
    TAG_TRACE_BATCHES = Emit.TRACE_BATCHES.value
    """One element per activation: ``(entity_key, (serialize_trace_event bytes, ...),
    telemetry)``, the activation's events in order and its ``ActivationTelemetry.encode()``
    (real wall times, kept out of the trace). One element instead of one per event: each
    output element costs a runner far more than the bytes it carries
    (``RunAgentOutputs.traces`` splits it)."""
    TAG_SNAPSHOTS = Emit.SNAPSHOTS.value
    """``StateSnapshot`` bytes (deterministic serialization), one per export request."""
    TAG_ERRORS = Emit.ERRORS.value
    """``ErrorRecord`` of every refused trigger."""
    TAG_OUTPUTS = Emit.OUTPUTS.value
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
    """Raw envelope bytes waiting behind the key's suspension (start events) or its hold."""
    HOLD = HOLD_SPEC
    """The ``hold`` blob: the trigger the key holds while a retry is pending (a ``KeyHold``)."""
    HITL_TIMER = HITL_TIMER_SPEC
    """Set at the continuation's ``deadline_ms`` while the key is suspended."""
    RETRY_TIMER = RETRY_TIMER_SPEC
    """Set at the hold's next attempt (``RetryPending.due_ms``) while the key holds one."""

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
        self._run_activation: Activate | None = None
        self._step: KeyStep | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The provider is built per instance in setup() and is never shipped to workers.
        state = dict(self.__dict__)
        state["_provider"] = None
        state["_lanes"] = None
        state["_step"] = None
        state["_run_activation"] = None
        return state

    def setup(self) -> None:
        self._provider = self._config.provider_factory()
        # Providers that report their calls (beam_agents.providers do) feed Beam metrics.
        observe_calls(self._provider, _ProviderMetrics())
        self._activations = _Metric(Metrics.counter(METRICS_NAMESPACE, "activations"))
        self._failures = _Metric(Metrics.counter(METRICS_NAMESPACE, "activation_failures"))
        self._provider_failures = _Metric(Metrics.counter(METRICS_NAMESPACE, "provider_failures"))
        self._exports = _Metric(Metrics.counter(METRICS_NAMESPACE, "exports"))
        self._queued = _Metric(Metrics.counter(METRICS_NAMESPACE, "inbox_queued"))
        self._dead_letters = _Metric(Metrics.counter(METRICS_NAMESPACE, "dead_letters"))
        self._stale_timers = _Metric(Metrics.counter(METRICS_NAMESPACE, "stale_hitl_timers"))
        self._retries = _Metric(Metrics.counter(METRICS_NAMESPACE, "activation_retries"))
        self._retry_waits = _Metric(Metrics.distribution(METRICS_NAMESPACE, "retry_wait_ms"))
        self._deferred = _Metric(Metrics.counter(METRICS_NAMESPACE, "deferred_hitl_timeouts"))
        self._latency = _Metric(Metrics.distribution(METRICS_NAMESPACE, "activation_wall_ms"))
        self._agent_name = str(getattr(self._agent, "name", "") or type(self._agent).__name__)
        self._run_activation = activation_runner(
            self._agent,
            self._registry,
            self._provider,
            hitl=self._config.hitl,
            cache_policy=self._config.cache,
            tool_cache_policy=self._config.tool_cache,
        )
        self._step = KeyStep(
            self._activate, inbox_limit=self._config.inbox_limit, retry=self._config.retry
        )

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
        self._run_activation = None
        self._step = None
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
        hold_cell: Any = HOLD_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
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
            hold_cell,
        )
        timers = _Timers(timer, retry_timer)
        if self._lanes is not None:
            self._lanes.add(key, store, timers, _Item(raw, timestamp, window))
            return iter(())
        result = self._stepper().envelope(key, raw, store)
        timers.apply(result)
        return _tagged(self._account(result))

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
        hold_cell: Any = HOLD_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        fired_ms = fired_at.micros // 1000
        return self._on_timer(
            key,
            HitlDeadline(fired_ms),
            fired_at,
            window,
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
            hold_cell,
            _Timers(timer, retry_timer),
        )

    @on_timer(RETRY_TIMER_SPEC)  # type: ignore[untyped-decorator]
    def on_retry_due(
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
        hold_cell: Any = HOLD_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        fired_ms = fired_at.micros // 1000
        return self._on_timer(
            key,
            RetryDue(fired_ms),
            fired_at,
            window,
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
            hold_cell,
            _Timers(timer, retry_timer),
        )

    def _on_timer(
        self,
        key: bytes,
        item: HitlDeadline | RetryDue,
        fired_at: Any,
        window: Any,
        seq_cell: Any,
        blob_cells: tuple[Any, ...],
        inbox_cell: Any,
        hold_cell: Any,
        timers: _Timers,
    ) -> Iterator[Any]:
        store = _CellStore(seq_cell, blob_cells, inbox_cell, hold_cell)
        if self._lanes is not None:
            self._lanes.add(key, store, timers, _Item(item, fired_at, window))
            return iter(())
        result = self._stepper().handle(key, item, store)
        timers.apply(result)
        return _tagged(self._account(result))

    # -- the adapter's side of the step ------------------------------------------------------

    def _stepper(self) -> KeyStep:
        step = self._step
        if step is None:  # process() before setup(): a runner bug, or a hand-made call
            raise RuntimeError("AgentDoFn.setup() was not called before processing")
        return step

    def _activate(
        self,
        key: bytes,
        seq: int,
        state: KeyState,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> ActivationResult:
        """The step's ``Activate``: ``activation_runner``'s, timed and counted (Beam metrics)."""
        run = self._run_activation
        if run is None:  # process() before setup(): a runner bug, or a hand-made call
            raise RuntimeError("AgentDoFn.setup() was not called before processing")
        started = time.perf_counter()
        with measure_activation(
            agent_name=self._agent_name, provider_name=getattr(self._provider, "name", "")
        ) as telemetry:
            result = run(key, seq, state, trigger, decision, now_ms=now_ms)
        self._latency.update(int((time.perf_counter() - started) * 1000))
        _measured_on_this_thread()[(key, seq)] = telemetry
        self._activations.inc()
        if result.provider_failures:
            self._provider_failures.inc(len(result.provider_failures))
        if not isinstance(result, ActivationCommit):
            self._failures.inc()
        return result

    def _account(self, result: StepResult) -> tuple[tuple[Emit, Any], ...]:
        """Count what ``result`` says happened (Beam metrics); its elements to emit."""
        if result.queued:
            self._queued.inc()
        elif result.stale_timer:
            self._stale_timers.inc()
        elif result.deferred_deadline:
            self._deferred.inc()
        for wait_ms in result.retries:
            self._retries.inc()
            self._retry_waits.update(wait_ms)
        measured = _take_measured_on_this_thread()
        has_trace = False
        for tag, _ in result.emitted:
            if tag is _ERRORS:
                self._dead_letters.inc()
            elif tag is _SNAPSHOTS:
                self._exports.inc()
            elif tag is _TRACE_BATCHES:
                has_trace = True
        return _with_telemetry(result.emitted, measured) if has_trace else result.emitted


# -- real wall times beside each activation's trace (beam_agents.telemetry) -----------------
#
# ``_activate`` measures each activation it runs and leaves the telemetry on its thread;
# ``_account``, which handles the step's result on the same thread (the bundle's, or the
# lane's), takes it and puts each activation's telemetry next to its trace batch. Taking
# clears it, so a step that failed halfway leaves nothing for the next one.

_MEASURED = threading.local()


def _measured_on_this_thread() -> dict[tuple[bytes, int], ActivationTelemetry]:
    pending: dict[tuple[bytes, int], ActivationTelemetry] | None = getattr(
        _MEASURED, "pending", None
    )
    if pending is None:
        pending = _MEASURED.pending = {}
    return pending


def _take_measured_on_this_thread() -> dict[tuple[bytes, int], ActivationTelemetry]:
    pending: dict[tuple[bytes, int], ActivationTelemetry] = (
        getattr(_MEASURED, "pending", None) or {}
    )
    _MEASURED.pending = {}
    return pending


def _with_telemetry(
    emitted: tuple[tuple[Emit, Any], ...], measured: dict[tuple[bytes, int], ActivationTelemetry]
) -> tuple[tuple[Emit, Any], ...]:
    """``emitted`` with each trace batch ``(key, events)`` as ``(key, events, telemetry)``."""
    out = []
    for tag, value in emitted:
        if tag is _TRACE_BATCHES:
            key, events = value[0], value[1]
            seq = TraceEvent.FromString(events[0]).seq if events else -1
            telemetry = measured.get((key, seq))
            value = (key, events, telemetry.encode() if telemetry is not None else b"")
        out.append((tag, value))
    return tuple(out)


def _set_timer(timer: Any, target: TimerTarget | None) -> None:
    """Move one of Beam's timers where the step says (None: leave it)."""
    if target is None:
        return
    if target.at_ms is None:
        timer.clear()
    else:
        timer.set(_timestamp(target.at_ms))


class _Timers:
    """A key's two Beam timers: the HITL deadline and the retry of a held trigger."""

    __slots__ = ("hitl", "retry")

    def __init__(self, hitl: Any, retry: Any) -> None:
        self.hitl = hitl
        self.retry = retry

    def apply(self, result: StepResult) -> None:
        """Move both timers where ``result`` says."""
        _set_timer(self.hitl, result.timer)
        _set_timer(self.retry, result.retry_timer)


class _CellStore:
    """The Beam state cells of one key, read and written as ``StateCells``, ints and bytes."""

    __slots__ = ("_blobs", "_hold", "_inbox", "_seq")

    def __init__(self, seq: Any, blobs: tuple[Any, ...], inbox: Any, hold: Any) -> None:
        self._seq = seq
        self._blobs = blobs
        self._inbox = inbox
        self._hold = hold

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

    def read_hold(self) -> bytes:
        value = self._hold.read()
        return value or b""

    def write_hold(self, hold: bytes) -> None:
        if hold:
            self._hold.write(hold)
        else:
            self._hold.clear()


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


class _ProviderMetrics:
    """A ``CallObserver`` reporting a provider's HTTP attempts and waits as Beam metrics.

    Per provider ``name``, in the ``beam_agents`` namespace: counters
    ``provider_attempts.NAME``, ``provider_failed_attempts.NAME`` and
    ``provider_waits.NAME``; distributions ``provider_latency_ms.NAME`` (each attempt's
    wall time) and ``provider_wait_ms.NAME`` (each wait before another attempt).
    """

    def __init__(self) -> None:
        self._by_provider: dict[str, tuple[_Metric, ...]] = {}

    def _metrics(self, provider: str) -> tuple[_Metric, ...]:
        found = self._by_provider.get(provider)
        if found is None:
            found = (
                _Metric(Metrics.counter(METRICS_NAMESPACE, f"provider_attempts.{provider}")),
                _Metric(Metrics.counter(METRICS_NAMESPACE, f"provider_failed_attempts.{provider}")),
                _Metric(Metrics.distribution(METRICS_NAMESPACE, f"provider_latency_ms.{provider}")),
                _Metric(Metrics.counter(METRICS_NAMESPACE, f"provider_waits.{provider}")),
                _Metric(Metrics.distribution(METRICS_NAMESPACE, f"provider_wait_ms.{provider}")),
            )
            found = self._by_provider.setdefault(provider, found)
        return found

    def attempt(self, provider: str, seconds: float, error: BaseException | None) -> None:
        attempts, failed, latency, _, _ = self._metrics(provider)
        attempts.inc()
        if error is not None:
            failed.inc()
        latency.update(int(seconds * 1000))

    def wait(self, provider: str, seconds: float) -> None:
        _, _, _, waits, wait_ms = self._metrics(provider)
        waits.inc()
        wait_ms.update(int(seconds * 1000))


@dataclass(frozen=True)
class _Item:
    """One thing a lane runs: an envelope's bytes, or a HITL or retry timer firing."""

    input: bytes | HitlDeadline | RetryDue
    timestamp: Any
    """The element's (or timer's) timestamp: its outputs carry it."""
    window: Any


class _Lane:
    """One key's work in one bundle: its items, run in order, one at a time."""

    def __init__(
        self, key: bytes, store: _CellStore, timers: _Timers, bundle_failed: threading.Event
    ) -> None:
        self.key = key
        self._bundle_failed = bundle_failed
        self._store = store
        self._timers = timers
        # Read on the bundle's thread: Beam state is only read or written there.
        self._seq = store.read_seq()
        self._cells = store.read_cells()
        self._hold = store.read_hold()
        # Only a suspended key or one holding a trigger has waiting envelopes (the serial
        # path relies on the same rule): one state read fewer per key.
        self._inbox = store.read_inbox() if self._cells.continuation or self._hold else []
        self._memory = MemoryKeyStore(self._seq, self._cells, self._inbox, self._hold)
        self._timer_target: TimerTarget | None = None
        """Where the lane's last step that moved the HITL timer left it (None: untouched)."""
        self._retry_target: TimerTarget | None = None
        """The same for the retry timer."""
        self._items: deque[_Item] = deque()
        self._results: list[tuple[tuple[tuple[Emit, Any], ...], _Item]] = []
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
                result = dofn._stepper().handle(self.key, item.input, self._memory)
                if result.timer is not None:
                    self._timer_target = result.timer
                if result.retry_timer is not None:
                    self._retry_target = result.retry_timer
                self._results.append((dofn._account(result), item))
        except BaseException as exc:  # the bundle fails with it (commit_all re-raises)
            with self._lock:
                self.error = exc
                self._running = False
            self._bundle_failed.set()
        finally:
            _LANE_THREAD.tally = None

    def commit(self) -> Iterator[Any]:
        """Write the lane's final cells and timers through Beam's objects; yield its outputs."""
        for apply, value in self._tally:
            apply(value)
        memory = self._memory
        if memory.seq != self._seq:
            self._store.write_seq(memory.seq)
        self._store.write_changed(self._cells, memory.cells)
        if memory.inbox != self._inbox:
            self._store.write_inbox(memory.inbox)
        if memory.hold != self._hold:
            self._store.write_hold(memory.hold)
        _set_timer(self._timers.hitl, self._timer_target)
        _set_timer(self._timers.retry, self._retry_target)
        for pairs, item in self._results:
            for tag, value in pairs:
                windowed = WindowedValue(value, item.timestamp, (item.window,))
                yield (
                    windowed
                    if tag is _OUTPUTS
                    else beam.pvalue.TaggedOutput(_TAG_NAMES[tag], windowed)
                )


class _Lanes:
    """A bundle's lanes, by key in order of first appearance."""

    def __init__(self, dofn: AgentDoFn, pool: ThreadPoolExecutor) -> None:
        self._dofn = dofn
        self._pool = pool
        self._by_key: dict[bytes, _Lane] = {}
        self._failed = threading.Event()

    def add(self, key: bytes, store: _CellStore, timers: _Timers, item: _Item) -> None:
        lane = self._by_key.get(key)
        if lane is None:
            lane = self._by_key[key] = _Lane(key, store, timers, self._failed)
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


def _tagged(pairs: Iterable[tuple[Emit, Any]]) -> Iterator[Any]:
    for tag, value in pairs:
        if tag is _OUTPUTS:
            yield value
        else:
            yield beam.pvalue.TaggedOutput(_TAG_NAMES[tag], value)


__all__ = ["AgentDoFn"]
