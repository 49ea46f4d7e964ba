"""``AgentDoFn``: the stateful DoFn that runs one key's serial history of activations.

Input: ``(entity_key, envelope bytes)`` in the global window (``RunAgent`` routes
and keys them). Per key it holds the state cells below and one event-time timer.
What it does with each envelope and each timer firing is ``beam_agents.key_step``
(classify, SEQ, run, commit, HITL and retry timer targets, inbox, hold, export;
Beam-free and shared with ``beam_agents.testing.PipelineKey``): this module is only an
adapter between that step and Beam, its state cells and timers on one side
(``_CellStore``, ``_Timers``), its tagged outputs and metrics on the other. With
``AgentConfig.max_in_flight > 1`` activations run on a worker pool and outlive their
bundle: the key holds the activation in flight, and a processing-time timer commits its
result in a later bundle (below, *activations in flight*).

Every output element is ``(entity_key, bytes)`` of deterministic serializations,
except ``trace_batches`` (``(entity_key, tuple of bytes, telemetry bytes)``: one
activation's trace, and its wall times from ``beam_agents.telemetry``) and ``errors``
(``ErrorRecord``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from beam_agents._protos import AgentEnvelope
from beam_agents.activation import (
    ActivationCommit,
    ActivationResult,
    TriggerDecision,
)
from beam_agents.agent import Agent, Timeout
from beam_agents.agent_build import agent_build
from beam_agents.config import AgentConfig
from beam_agents.key_state import KeyState, StateCells
from beam_agents.key_step import (
    STARTED,
    Activate,
    ActivationDone,
    Emit,
    HitlDeadline,
    InFlightRun,
    KeyStep,
    RetryDue,
    Started,
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
IN_FLIGHT_AT_SPEC = ReadModifyWriteStateSpec("in_flight_at", VarIntCoder())
HITL_TIMER_SPEC = TimerSpec("hitl_deadline", TimeDomain.WATERMARK)
RETRY_TIMER_SPEC = TimerSpec("retry_due", TimeDomain.WATERMARK)
IN_FLIGHT_TIMER_SPEC = TimerSpec("in_flight", TimeDomain.REAL_TIME)

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
IN_FLIGHT_AT_PARAM = beam.DoFn.StateParam(IN_FLIGHT_AT_SPEC)
HITL_TIMER_PARAM = beam.DoFn.TimerParam(HITL_TIMER_SPEC)
RETRY_TIMER_PARAM = beam.DoFn.TimerParam(RETRY_TIMER_SPEC)
IN_FLIGHT_TIMER_PARAM = beam.DoFn.TimerParam(IN_FLIGHT_TIMER_SPEC)
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
    IN_FLIGHT_TIMER = IN_FLIGHT_TIMER_SPEC
    """Processing time, set at once while the key holds an activation in flight: its firing
    commits the activation's result once it is there (and sets it again until then)."""
    IN_FLIGHT_AT = IN_FLIGHT_AT_SPEC
    """The timestamp (µs) of the element that started the activation in flight: what its
    commit emits carries it."""

    def __init__(self, agent: Agent, registry: ToolRegistry, config: AgentConfig) -> None:
        super().__init__()
        self._agent = agent
        self._registry = registry
        self._config = config
        self._provider: Provider | None = None
        # Names this transform's activation pool in each worker process (survives pickling,
        # so every instance of the DoFn in a process shares one pool and one bound).
        self._pool_id = uuid.uuid4().hex
        self._flights: _Flights | None = None
        self._started: set[Future[Any]] = set()
        """Activations this instance started that may still run (its teardown waits for them)."""
        self._started_lock = threading.Lock()
        self._run_activation: Activate | None = None
        self._step: KeyStep | None = None
        self._waited_in_bundle = False
        """Whether a firing of ``in_flight`` in the current bundle waited already."""

    def __getstate__(self) -> dict[str, Any]:
        # The provider is built per instance in setup() and is never shipped to workers.
        state = dict(self.__dict__)
        state["_provider"] = None
        state["_flights"] = None
        state["_started"] = set()
        state["_started_lock"] = None
        state["_step"] = None
        state["_run_activation"] = None
        return state

    def setup(self) -> None:
        self._started = set()
        self._started_lock = threading.Lock()
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
        self._restarts = _Metric(Metrics.counter(METRICS_NAMESPACE, "in_flight_restarts"))
        self._run_activation = activation_runner(
            self._agent,
            self._registry,
            self._provider,
            hitl=self._config.hitl,
            cache_policy=self._config.cache,
            tool_cache_policy=self._config.tool_cache,
        )
        activate: Activate = self._activate
        if self._config.max_in_flight > 1:
            self._flights = _flights_of(self._pool_id, self._config.max_in_flight)
            activate = self._start
        self._step = KeyStep(
            activate,
            inbox_limit=self._config.inbox_limit,
            retry=self._config.retry,
            agent_build=agent_build(self._agent),
        )

    def start_bundle(self) -> None:
        self._waited_in_bundle = False

    def teardown(self) -> None:
        # A provider holding connections (beam_agents.providers) offers close().
        close = getattr(self._provider, "close", None)
        self._provider = None
        self._step = None

        def release() -> None:
            self._run_activation = None
            if callable(close):
                close()

        # Activations this instance started may still be running on the pool (they outlive
        # bundles, and a later bundle, maybe another instance's, commits them): the model
        # client is released once the last of them is done.
        with self._started_lock:
            unfinished = [future for future in self._started if not future.done()]
        if not unfinished:
            release()
            return
        remaining = [len(unfinished)]

        def one_done(_: Future[Any]) -> None:
            with self._started_lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                release()

        for future in unfinished:
            future.add_done_callback(one_done)

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
        in_flight_at_cell: Any = IN_FLIGHT_AT_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        in_flight_timer: Any = IN_FLIGHT_TIMER_PARAM,
        timestamp: Any = TIMESTAMP_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        key, raw = element
        return self._handle(
            key,
            raw,
            timestamp,
            _CellStore(
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
            ),
            _Timers(timer, retry_timer, in_flight_timer, in_flight_at_cell),
        )

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
        in_flight_at_cell: Any = IN_FLIGHT_AT_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        in_flight_timer: Any = IN_FLIGHT_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        return self._handle(
            key,
            HitlDeadline(fired_at.micros // 1000),
            fired_at,
            _CellStore(
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
            ),
            _Timers(timer, retry_timer, in_flight_timer, in_flight_at_cell),
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
        in_flight_at_cell: Any = IN_FLIGHT_AT_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        in_flight_timer: Any = IN_FLIGHT_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        return self._handle(
            key,
            RetryDue(fired_at.micros // 1000),
            fired_at,
            _CellStore(
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
            ),
            _Timers(timer, retry_timer, in_flight_timer, in_flight_at_cell),
        )

    @on_timer(IN_FLIGHT_TIMER_SPEC)  # type: ignore[untyped-decorator]
    def on_in_flight(
        self,
        key: Any = KEY_PARAM,
        seq_cell: Any = SEQ_PARAM,
        memory_cell: Any = MEMORY_PARAM,
        llm_cache_cell: Any = LLM_CACHE_PARAM,
        continuation_cell: Any = CONTINUATION_PARAM,
        pending_cell: Any = PENDING_PARAM,
        resume_history_cell: Any = RESUME_HISTORY_PARAM,
        tool_cache_cell: Any = TOOL_CACHE_PARAM,
        inbox_cell: Any = INBOX_PARAM,
        hold_cell: Any = HOLD_PARAM,
        in_flight_at_cell: Any = IN_FLIGHT_AT_PARAM,
        timer: Any = HITL_TIMER_PARAM,
        retry_timer: Any = RETRY_TIMER_PARAM,
        in_flight_timer: Any = IN_FLIGHT_TIMER_PARAM,
        window: Any = WINDOW_PARAM,
    ) -> Iterator[Any]:
        """Commit the key's activation in flight if its result is there; else come back."""
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
        timers = _Timers(timer, retry_timer, in_flight_timer, in_flight_at_cell)
        step = self._stepper()
        seq = step.in_flight_seq(store)
        flights = self._flights
        if seq is None or flights is None:
            # Committed already (a timer set again by a retried bundle), or never in flight.
            self._stale_timers.inc()
            return iter(())
        flight = flights.get(key, seq)
        if flight is None:
            # Lost with its worker (or with the bundle that committed it, then failed):
            # nothing of it was committed, so it runs again, from the very same state.
            again = step.in_flight(key, store)
            assert again is not None and again.seq == seq
            flight = flights.start(
                key, again.seq, again.now_ms, lambda: self._activate_on_pool(key, again)
            )
            self._track(flight)
            self._restarts.inc()
        if not flight.future.done() and not self._waited_in_bundle:
            # Nothing of this key's to commit yet. Wait (once per bundle, and only while no
            # other activation's result is waiting to be committed) so that a runner firing
            # the timer at once does not spin; never per key: a bundle firing N keys' timers
            # would hold the runner's thread N x the wait (it did: 50 ms per unfinished key).
            self._waited_in_bundle = True
            flights.wait_for_any(_COMMIT_POLL_S)
        try:
            outcome = flight.wait(0)
        except BaseException:
            flights.discard(key, flight)  # the retried bundle starts it again
            raise
        if outcome is None:
            timers.in_flight.set(_ASAP)  # not there yet: look again in a later bundle
            return iter(())
        flights.discard(key, flight)
        result, tally, measured = outcome  # a bug raised on the pool fails this bundle
        for apply, value in tally:
            apply(value)
        _measured_on_this_thread().update(measured)
        at = timers.in_flight_at.read()
        return self._emit_at(
            self._apply(key, ActivationDone(seq, result), store, timers, None),
            _ASAP if at is None else Timestamp(micros=at),
            window,
        )

    # -- the adapter's side of the step ------------------------------------------------------

    def _handle(
        self,
        key: bytes,
        item: bytes | HitlDeadline | RetryDue,
        timestamp: Any,
        store: _CellStore,
        timers: _Timers,
    ) -> Iterator[Any]:
        """One element or timer firing of ``key`` through the step; what it emits."""
        return _tagged(self._apply(key, item, store, timers, timestamp))

    def _apply(
        self,
        key: bytes,
        item: bytes | HitlDeadline | RetryDue | ActivationDone,
        store: _CellStore,
        timers: _Timers,
        timestamp: Any,
    ) -> tuple[tuple[Emit, Any], ...]:
        """Run ``item`` through the step, move the timers where it says, count it.

        ``timestamp``: the element's (or timer's), which an activation it starts in flight
        records for its commit's outputs (None: keep the one recorded).
        """
        result = self._stepper().handle(key, item, store)
        timers.apply(result)
        if result.started is not None:
            timers.in_flight.set(_ASAP)
            if timestamp is not None:
                timers.in_flight_at.write(timestamp.micros)
        elif isinstance(item, ActivationDone):
            timers.in_flight_at.clear()
        return self._account(result)

    @staticmethod
    def _emit_at(pairs: tuple[tuple[Emit, Any], ...], timestamp: Any, window: Any) -> Iterator[Any]:
        """``pairs`` as Beam outputs carrying ``timestamp`` (a processing-time firing's own
        timestamp means nothing in event time)."""
        for tag, value in pairs:
            windowed = WindowedValue(value, timestamp, (window,))
            yield (
                windowed if tag is _OUTPUTS else beam.pvalue.TaggedOutput(_TAG_NAMES[tag], windowed)
            )

    def _start(
        self,
        key: bytes,
        seq: int,
        state: KeyState,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> Started:
        """The step's ``Activate`` with ``max_in_flight > 1``: start it on the pool, return."""
        flights = self._flights
        assert flights is not None
        run = InFlightRun(seq, state, trigger, decision, now_ms)
        self._track(flights.start(key, seq, now_ms, lambda: self._activate_on_pool(key, run)))
        return STARTED

    def _track(self, flight: _Flight) -> None:
        """Note that this instance started ``flight`` (until it is done)."""
        with self._started_lock:
            self._started.add(flight.future)

        def forget(future: Future[Any]) -> None:
            with self._started_lock:
                self._started.discard(future)

        flight.future.add_done_callback(forget)

    def _activate_on_pool(
        self, key: bytes, run: InFlightRun
    ) -> tuple[
        ActivationResult,
        list[tuple[Callable[[int], None], int]],
        dict[tuple[bytes, int], ActivationTelemetry],
    ]:
        """Runs on a pool thread: the activation, the metric updates it made, its telemetry."""
        tally: list[tuple[Callable[[int], None], int]] = []
        _POOL_THREAD.tally = tally
        try:
            result = self._activate(
                key, run.seq, run.state, run.trigger, run.decision, now_ms=run.now_ms
            )
        finally:
            _POOL_THREAD.tally = None
            # Its wall times, measured here, go with it to the bundle that commits it.
            measured = _take_measured_on_this_thread()
        return result, tally, measured

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
        """One activation, to its end: ``activation_runner``'s, timed and counted (Beam
        metrics). The step's ``Activate`` serially; on the pool with ``max_in_flight > 1``."""
        run = self._run_activation
        if run is None:  # process() before setup(): a runner bug, or a hand-made call
            raise RuntimeError("AgentDoFn.setup() was not called before processing")
        started = time.perf_counter()
        with measure_activation(
            agent_name=self._agent_name, provider_name=getattr(self._provider, "name", "")
        ) as telemetry:
            result = run(key, seq, state, trigger, decision, now_ms=now_ms)
        assert not isinstance(result, Started)  # activation_runner's runs it to the end
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
        return (
            _with_telemetry(result.emitted, measured, result.activations)
            if has_trace
            else result.emitted
        )


# -- real wall times beside each activation's trace (beam_agents.telemetry) -----------------
#
# ``_activate`` measures each activation it runs and leaves the telemetry on its thread;
# ``_account``, which handles the step's result on the bundle's thread, takes it (an
# activation in flight ran on a pool thread: its telemetry comes with its result) and puts each activation's telemetry next to its trace batch. Taking
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
    emitted: tuple[tuple[Emit, Any], ...],
    measured: dict[tuple[bytes, int], ActivationTelemetry],
    activations: tuple[ActivationResult, ...],
) -> tuple[tuple[Emit, Any], ...]:
    """``emitted`` with each trace batch ``(key, events)`` as ``(key, events, telemetry)``.

    The step emits one trace batch per activation, in the order of ``activations``: the
    n-th batch is the n-th activation's, whose SEQ finds its telemetry (no event parsed).
    """
    out = []
    seqs = iter([activation.seq for activation in activations])
    for tag, value in emitted:
        if tag is _TRACE_BATCHES:
            key, events = value[0], value[1]
            telemetry = measured.get((key, next(seqs)))
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
    """A key's Beam timers: the HITL deadline, the retry of a held trigger, the commit of an
    activation in flight (with the cell recording its element's timestamp)."""

    __slots__ = ("hitl", "in_flight", "in_flight_at", "retry")

    def __init__(self, hitl: Any, retry: Any, in_flight: Any, in_flight_at: Any) -> None:
        self.hitl = hitl
        self.retry = retry
        self.in_flight = in_flight
        self.in_flight_at = in_flight_at

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
        # Spelled out (in _BLOB_CELLS order): a dict built per element to splat cost more.
        memory, llm_cache, continuation, pending, resume_history, tool_cache = self._blobs
        return StateCells(
            memory=memory.read() or b"",
            llm_cache=llm_cache.read() or b"",
            continuation=continuation.read() or b"",
            pending=pending.read() or b"",
            resume_history=resume_history.read() or b"",
            tool_cache=tool_cache.read() or b"",
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


# -- activations in flight (AgentConfig.max_in_flight > 1) --------------------------------
#
# An activation does not hold its bundle. When the step runs one, ``_start`` submits it to
# the transform's pool in this worker process (at most max_in_flight at once, the rest
# queued in order) and returns STARTED: the step writes the key's hold as *in flight*
# (KeyHold.in_flight: SEQ, clock) and every later input of the key waits behind it in the
# inbox. The DoFn sets the key's processing-time timer ``in_flight`` at once. Each firing,
# in a later bundle, looks the activation up here by (key, SEQ): finished, its result goes
# to the step as ActivationDone and is committed with that bundle (state, outputs and
# timers together, or nothing if the bundle fails); not finished, it waits a little and
# sets the timer again; not here at all (a new worker, or the bundle that committed it
# failed after taking it), it is started again from the key's cells, which nothing has
# changed since (the hold keeps them still). So each activation is committed exactly once,
# in the key's order, whatever bundles fail or workers die. A result the runner never asks
# for (its bundle was retried elsewhere) is dropped with the entry of the next SEQ.

_COMMIT_POLL_S = 0.05
"""How long a bundle's first firing of the in-flight timer that finds its activation
unfinished waits for any activation to finish before it sets the timer again (bounds the
busy-looping of a runner that fires timers at once); later firings of the bundle do not
wait."""

_ASAP = Timestamp(micros=0)
"""A processing-time timer target already passed on every runner's clock (the streaming
DirectRunner's test clock starts at 0): fire as soon as the runner gets to it."""

_POOL_THREAD = threading.local()
"""``tally``: the metric updates of the activation running on this pool thread (None on
Beam's threads)."""


class _Flight:
    """One activation started on the pool: its SEQ and clock, and its future."""

    __slots__ = ("future", "now_ms", "seq")

    def __init__(self, seq: int, now_ms: int, future: Future[Any]) -> None:
        self.seq = seq
        self.now_ms = now_ms
        self.future = future

    def wait(self, timeout_s: float) -> Any | None:
        """Its outcome (re-raising a bug), or None if it has not finished within ``timeout_s``."""
        if timeout_s <= 0 and not self.future.done():
            return None
        try:
            return self.future.result(timeout=timeout_s)
        except FutureTimeout:
            return None


class _Flights:
    """The activations in flight of one RunAgent transform in this worker process, by key.

    Shared by every DoFn instance of the transform in the process (a firing may come to
    another instance than the one that started it), with one pool of max_in_flight threads.
    """

    def __init__(self, size: int) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=size, thread_name_prefix="beam-agents-activation"
        )
        self._by_key: dict[bytes, _Flight] = {}
        self._ready: set[_Flight] = set()
        """Finished flights not yet taken for their commit (``wait_for_any`` waits on it)."""
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)

    def start(self, key: bytes, seq: int, now_ms: int, run: Callable[[], Any]) -> _Flight:
        """Start activation ``seq`` of ``key`` (the same one already started: kept, not run
        twice; a retried bundle starts it again)."""
        with self._lock:
            found = self._by_key.get(key)
            if found is not None and found.seq == seq and found.now_ms == now_ms:
                return found
            if found is not None:
                self._ready.discard(found)
            flight = self._by_key[key] = _Flight(seq, now_ms, self._pool.submit(run))

        def finished(_: Future[Any]) -> None:
            with self._lock:
                if self._by_key.get(key) is flight:
                    self._ready.add(flight)
                    self._finished.notify_all()

        flight.future.add_done_callback(finished)  # at once if it finished already
        return flight

    def wait_for_any(self, timeout_s: float) -> None:
        """Return once some activation's result waits for its commit, or after ``timeout_s``."""
        with self._finished:
            self._finished.wait_for(lambda: bool(self._ready), timeout=timeout_s)

    def get(self, key: bytes, seq: int) -> _Flight | None:
        with self._lock:
            found = self._by_key.get(key)
        return found if found is not None and found.seq == seq else None

    def discard(self, key: bytes, flight: _Flight) -> None:
        """Forget ``flight`` (its result is being committed)."""
        with self._lock:
            if self._by_key.get(key) is flight:
                del self._by_key[key]
            self._ready.discard(flight)

    def forget_all(self) -> None:
        """Forget every activation, as a worker process that died would (tests)."""
        with self._lock:
            self._by_key.clear()
            self._ready.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)


_FLIGHTS: dict[str, _Flights] = {}
_FLIGHTS_LOCK = threading.Lock()


def _flights_of(pool_id: str, size: int) -> _Flights:
    """The process-wide activations in flight of one RunAgent transform."""
    with _FLIGHTS_LOCK:
        flights = _FLIGHTS.get(pool_id)
        if flights is None:
            flights = _FLIGHTS[pool_id] = _Flights(size)
        return flights


class _Metric:
    """A Beam counter or distribution, updatable from a pool thread.

    Beam finds the metrics container of the running bundle through the calling thread;
    a pool thread has none, so an activation in flight tallies its updates and the bundle
    that commits it applies them (a failed bundle reports none, like its state).
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
        tally: list[tuple[Callable[[int], None], int]] | None = getattr(_POOL_THREAD, "tally", None)
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


def _tagged(pairs: Iterable[tuple[Emit, Any]]) -> Iterator[Any]:
    for tag, value in pairs:
        if tag is _OUTPUTS:
            yield value
        else:
            yield beam.pvalue.TaggedOutput(_TAG_NAMES[tag], value)


__all__ = ["AgentDoFn"]
