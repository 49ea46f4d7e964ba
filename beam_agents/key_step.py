"""One key's step: what the pipeline does with one input for one key, without Beam.

``KeyStep.handle(key, item, store)`` takes one input of one key, an envelope's
bytes or a HITL deadline firing (``HitlDeadline``), reads and writes the key's
SEQ, blob cells and inbox through a ``KeyStore``, and returns a ``StepResult``:
what to emit, in order, and where the key's HITL timer must be set. Per input:

    export request  one ``StateSnapshot`` of the cells as they are (read-only: no
                    cell written, no timer touched, SEQ unchanged); before the
                    state is loaded, so it works when this binary cannot load it.
    START / RESUME  take the next SEQ, run the activation, commit the cells on
                    success (only SEQ on a failure), emit the trace batch and, on
                    success, outputs / released intents / approval requests; the
                    timer target follows the commit; when the key stops being
                    suspended, run the events waiting in its inbox.
    QUEUE           append the envelope to the key's bounded inbox.
    REJECT          an ``ErrorRecord``; nothing changes.
    deadline        a firing that matches the suspension resumes it with
                    ``hitl_timeout``; a stale one (the suspension ended or was
                    replaced) changes nothing.

When an activation fails (it commits nothing but its SEQ and trace), the retry
policy (``beam_agents.retry``) decides what becomes of its trigger: a transient
failure with attempts left makes the key **hold** the trigger (the ``hold`` cell, a
``KeyHold``) and sets its retry timer at the next attempt's due time; anything else
is dead-lettered (``activation_failed`` / ``retries_exhausted`` on ``.errors``, with
every attempt). While a key holds a trigger, every later envelope but an export waits
behind it in the inbox, in arrival order, and a HITL deadline that passes is noted in
the hold and handled in its place among them. When the retry timer fires
(``RetryDue``), the trigger runs again as a new activation with the next SEQ, on the
due time as its clock; once it commits or is given up, the waiting envelopes run.
So every input envelope ends committed, waiting (inbox, hold, suspension) or
dead-lettered: never lost.

An ``Activate`` may also return ``STARTED``: it started the activation elsewhere (a
worker thread, ``AgentConfig.max_in_flight > 1``) and did not wait for it. The key then
holds the trigger **in flight** (``KeyHold.in_flight``: its SEQ, clock and earlier failed
attempts); nothing of the key commits meanwhile, and every later input, export requests
included, waits behind it (an export must observe the commit before it). The result comes
back as its own input, ``ActivationDone``: it is committed (or failed) exactly as it would
have been had the step waited, and the inbox drains as after any hold. Envelopes that
arrived while the activation was in flight are then handled as they would have been on
arrival (``InFlight.arrived_from`` says where they start in the inbox), so per key the
step gives the same bytes, in the same order, as a step that waits for every activation.
A result for another SEQ than the held one is stale and changes nothing: each activation
is committed once, and one lost with its worker is run again from the committed cells
(``KeyStep.in_flight``).

Triggers are classified by ``classify_trigger``; the activation itself is the
``Activate`` callable the step is built with (``run_activation`` with the
pipeline's configuration, see ``activation_runner``). ``AgentDoFn`` is an adapter
from Beam's state cells and timer to this step, on its serial path and in its
concurrent lanes alike; ``beam_agents.testing.PipelineKey`` drives it on a
``MemoryKeyStore`` for tests.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from google.protobuf.message import DecodeError

from beam_agents._protos import (
    AgentBuild,
    AgentEnvelope,
    FailedAttempt,
    InFlight,
    KeyHold,
    KeyWaiting,
    RetryPending,
)
from beam_agents.activation import (
    ActivationCommit,
    ActivationFailure,
    ActivationResult,
    TriggerAction,
    TriggerDecision,
    classify_trigger,
    hitl_timeout,
    run_activation,
    trigger_name,
)
from beam_agents.agent import Agent, Timeout
from beam_agents.blobs import dump_hold, load_hold
from beam_agents.cache_memo import CacheMemo
from beam_agents.dead_letter import (
    ACTIVATION_FAILED,
    INBOX_OVERFLOW,
    MALFORMED_ENVELOPE,
    MAX_ATTEMPT_TEXT,
    MAX_ERROR_TEXT,
    NO_BODY,
    REJECTED_TRIGGER,
    RETRIES_EXHAUSTED,
    STATE_UNREADABLE,
    Attempt,
    ErrorCode,
    ErrorRecord,
    log_dead_letter,
)
from beam_agents.errors import StateError
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import KeyState, StateCells, load_key_state, make_snapshot
from beam_agents.llm_cache import DEFAULT_CACHE_POLICY, CachePolicy
from beam_agents.provider import Provider
from beam_agents.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_transient
from beam_agents.tool_cache import DEFAULT_TOOL_CACHE_POLICY, ToolCachePolicy
from beam_agents.tools import ToolRegistry
from beam_agents.trace_events import serialize_trace_event
from beam_agents.trace_view import Trigger


class Emit(enum.StrEnum):
    """Where an emitted element goes: ``AgentDoFn``'s output tags (the same strings)."""

    OUTPUTS = "outputs"
    """``(key, output bytes)``: a ``Done``'s output."""
    INTENTS = "intents"
    """``(key, ToolIntent bytes)``: a released intent an executor may perform now."""
    APPROVALS = "approvals"
    """``(key, ToolIntent bytes)``: an approval-gated intent for the approval service."""
    TRACE_BATCHES = "trace_batches"
    """``(key, (serialized trace event, ...))``: one activation's trace, in order."""
    SNAPSHOTS = "snapshots"
    """``(key, StateSnapshot bytes)``: the answer to an export request."""
    ERRORS = "errors"
    """``ErrorRecord``: a refused input."""


_LOG = logging.getLogger("beam_agents")
"""Where an operator hears of a retry (INFO) and of every dead letter (WARNING): the
package's logger, configured as the application configures logging."""


# The members the per-element path uses, as plain module names (an Enum's class attribute
# costs a lookup through its metaclass each time).
_TRACE_BATCHES = Emit.TRACE_BATCHES
_OUTPUTS = Emit.OUTPUTS
_INTENTS = Emit.INTENTS
_APPROVALS = Emit.APPROVALS


@dataclass(frozen=True)
class HitlDeadline:
    """The key's HITL timer firing at event time ``fired_ms`` (the step's non-envelope input)."""

    fired_ms: int


@dataclass(frozen=True)
class RetryDue:
    """The key's retry timer firing at event time ``fired_ms``: try the held trigger again."""

    fired_ms: int


@dataclass(frozen=True)
class ActivationDone:
    """The result of the activation the key holds in flight (an ``Activate`` returned
    ``STARTED`` for it): commit it now."""

    seq: int
    """The SEQ it ran at (a result for another SEQ than the held one is stale)."""
    result: ActivationResult


class Started:
    """What an ``Activate`` returns when it started the activation and did not wait for it.

    Its result comes back later as ``ActivationDone``; until then the key holds the trigger
    in flight.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "STARTED"


STARTED = Started()
"""The one ``Started`` value."""


@dataclass(frozen=True)
class InFlightRun:
    """What the key holds in flight, as the arguments of an ``Activate`` call: run it (again)."""

    seq: int
    state: KeyState
    trigger: AgentEnvelope | Timeout
    decision: TriggerDecision
    now_ms: int


@dataclass(frozen=True)
class TimerTarget:
    """Where the key's HITL timer must be set after a step."""

    at_ms: int | None
    """The event time to fire at; None: clear the timer."""


class StepResult(NamedTuple):
    """What one input of one key produced. The store has been written already.

    Immutable (a named tuple: the DoFn builds one per element, and a frozen dataclass
    costs several times more to build).
    """

    emitted: tuple[tuple[Emit, Any], ...] = ()
    """Every element to emit, in order, with where it goes (see ``Emit``)."""
    activations: tuple[ActivationResult, ...] = ()
    """The activations that ran, in order (a resume can be followed by queued events)."""
    timer: TimerTarget | None = None
    """Where to set the HITL timer now; None: leave it as it is."""
    queued: bool = False
    """The envelope was appended to the key's inbox (behind its suspension or its hold)."""
    stale_timer: bool = False
    """The deadline was for a suspension that has since ended or been replaced (or the
    retry firing for a hold that is no longer there)."""
    retry_timer: TimerTarget | None = None
    """Where to set the retry timer now (a hold's next attempt); None: leave it as it is."""
    retries: tuple[int, ...] = ()
    """For each failed activation whose trigger the key now holds for another attempt, the
    wait (ms of event time) the retry policy chose before it."""
    deferred_deadline: bool = False
    """The HITL deadline fired while the key held a trigger: noted in the hold, handled
    once the hold is resolved."""
    started: int | None = None
    """The SEQ of the activation this step started and did not wait for (its ``Activate``
    returned ``STARTED``): the key holds it in flight until its ``ActivationDone``."""

    def of(self, where: Emit) -> tuple[Any, ...]:
        """The emitted elements that go to ``where``, in order."""
        return tuple(value for tag, value in self.emitted if tag is where)

    def payloads(self, where: Emit) -> tuple[bytes, ...]:
        """The bytes emitted to ``where`` (not ``ERRORS``), in order, without their key."""
        return tuple(value[1] for value in self.of(where))

    @property
    def outputs(self) -> tuple[bytes, ...]:
        """The ``Done`` outputs."""
        return self.payloads(Emit.OUTPUTS)

    @property
    def intents(self) -> tuple[bytes, ...]:
        """Released ``ToolIntent`` bytes: an executor performs them."""
        return self.payloads(Emit.INTENTS)

    @property
    def approvals(self) -> tuple[bytes, ...]:
        """Approval-gated ``ToolIntent`` bytes, for the approval service."""
        return self.payloads(Emit.APPROVALS)

    @property
    def snapshots(self) -> tuple[bytes, ...]:
        """Serialized ``StateSnapshot``s (one per export request)."""
        return self.payloads(Emit.SNAPSHOTS)

    @property
    def errors(self) -> tuple[ErrorRecord, ...]:
        """The refused inputs' ``ErrorRecord``s."""
        return self.of(Emit.ERRORS)


class KeyStore(Protocol):
    """One key's SEQ, blob cells and inbox, wherever they are held."""

    def read_seq(self) -> int:
        """The last activation's seq (0 before the first)."""
        ...

    def write_seq(self, seq: int) -> None: ...

    def read_cells(self) -> StateCells: ...

    def write_changed(self, before: StateCells, after: StateCells) -> None:
        """Write the cells of ``after`` whose bytes differ from ``before`` (empty: clear)."""
        ...

    def read_inbox(self) -> list[bytes]:
        """Raw envelopes waiting behind the key's suspension (events) or its hold (any)."""
        ...

    def write_inbox(self, inbox: list[bytes]) -> None: ...

    def read_hold(self) -> bytes:
        """The ``hold`` cell: the trigger the key holds for a retry (``b""``: none)."""
        ...

    def write_hold(self, hold: bytes) -> None:
        """Write the ``hold`` cell (``b""``: clear it)."""
        ...


class MemoryKeyStore:
    """A ``KeyStore`` held in memory (a new key's by default)."""

    __slots__ = ("cells", "hold", "inbox", "seq")

    def __init__(
        self,
        seq: int = 0,
        cells: StateCells | None = None,
        inbox: list[bytes] | None = None,
        hold: bytes = b"",
    ) -> None:
        self.seq = seq
        self.cells = StateCells() if cells is None else cells
        self.inbox = [] if inbox is None else inbox
        self.hold = hold

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

    def read_hold(self) -> bytes:
        return self.hold

    def write_hold(self, hold: bytes) -> None:
        self.hold = hold


class Activate(Protocol):
    """Runs one activation: ``run_activation`` with a pipeline's agent and configuration."""

    def __call__(
        self,
        key: bytes,
        seq: int,
        state: KeyState,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> ActivationResult | Started: ...


def activation_runner(
    agent: Agent,
    registry: ToolRegistry,
    provider: Provider,
    *,
    hitl: HitlPolicy = DEFAULT_HITL_POLICY,
    cache_policy: CachePolicy = DEFAULT_CACHE_POLICY,
    tool_cache_policy: ToolCachePolicy = DEFAULT_TOOL_CACHE_POLICY,
) -> Activate:
    """The ``Activate`` that runs ``agent`` the way ``RunAgent`` does with this configuration."""

    def activate(
        key: bytes,
        seq: int,
        state: KeyState,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> ActivationResult:
        return run_activation(
            agent,
            registry,
            provider,
            state,
            trigger,
            now_ms=now_ms,
            seq=seq,
            entity_key=key,
            hitl=hitl,
            cache_policy=cache_policy,
            tool_cache_policy=tool_cache_policy,
            decision=decision,
        )

    return activate


def deadline_of(state: KeyState) -> int | None:
    """Where a key in ``state`` has its HITL timer set: its suspension's deadline, or nowhere."""
    return None if state.continuation is None else state.continuation.deadline_ms


@dataclass(frozen=True)
class _DeadlineMark:
    """A HITL deadline that fired while the key held a trigger, in its place among the
    envelopes that waited behind the hold (the drain handles it there)."""

    fired_ms: int


@dataclass
class _KeyRun:
    """One key's state while one input is handled; written back once at the end."""

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
    """Where it must be set when the input is done (None: cleared)."""
    stored_hold: bytes
    """The ``hold`` cell as read."""
    hold: KeyHold | None
    """The trigger the key holds for a retry, as it will be written (None: nothing)."""
    retry_at: int | None
    """Where the retry timer is set now (None: not set)."""
    retry_target: int | None
    """Where it must be set when the input is done (None: cleared)."""
    emitted: list[tuple[Emit, Any]] = field(default_factory=list)
    activations: list[ActivationResult] = field(default_factory=list)
    retries: list[int] = field(default_factory=list)
    """The waits before another attempt, one per failed activation the key now holds."""
    clock: int = 0
    """The event time of the input being handled (an envelope's, a timer's firing): an
    envelope run from the inbox fails on its own clock, but the key reached it now."""
    started: int | None = None
    """The SEQ of the activation started (``STARTED``) during this input, if one was."""
    arrival_unset: bool = False
    """That activation's hold does not say yet where the inbox's later arrivals start."""


class KeyStep:
    """Handles one input of one key at a time (see the module docstring).

    ``activate`` runs each activation (``activation_runner(...)``; ``AgentDoFn`` passes
    its own, which also times it); ``inbox_limit`` bounds the envelopes a key holds
    waiting (``AgentConfig.inbox_limit``); ``retry`` decides what becomes of a failed
    activation's trigger (``AgentConfig.retry``).
    """

    __slots__ = ("_activate", "_agent_build", "_inbox_limit", "_memo", "_retry")

    def __init__(
        self,
        activate: Activate,
        *,
        inbox_limit: int,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        agent_build: AgentBuild | None = None,
    ) -> None:
        self._activate = activate
        self._inbox_limit = inbox_limit
        self._retry = retry
        self._agent_build = agent_build
        """The agent build stamped on each exported snapshot (``beam_agents.agent_build``)."""
        self._memo = CacheMemo()
        """The cache cells this step loaded or committed, by their bytes (``cache_memo``):
        the next load of the same bytes parses nothing. Keyed by bytes read from the store
        on every input, never by the key, so a rolled-back store (a retried bundle) loads
        what it holds."""

    def handle(
        self,
        key: bytes,
        item: bytes | HitlDeadline | RetryDue | ActivationDone,
        store: KeyStore,
    ) -> StepResult:
        """Handle ``item`` (envelope bytes, a HITL deadline or a retry firing, the result of
        an activation in flight) against ``store``."""
        if isinstance(item, HitlDeadline):
            return self.deadline(key, item.fired_ms, store)
        if isinstance(item, RetryDue):
            return self.retry_due(key, item.fired_ms, store)
        if isinstance(item, ActivationDone):
            return self.completed(key, item, store)
        return self.envelope(key, item, store)

    def envelope(self, key: bytes, raw: bytes, store: KeyStore) -> StepResult:
        """Handle one routed envelope of ``key``."""
        held = store.read_hold()
        if held and _in_flight(held):
            # Behind an activation in flight, everything waits, exports and bytes that do
            # not parse too: each is handled once the activation is committed, as it would
            # have been on arrival had the step waited (same bytes, same order).
            store.write_inbox([*store.read_inbox(), raw])
            return StepResult(queued=True)
        try:
            envelope = AgentEnvelope.FromString(raw)
        except DecodeError as exc:  # RunAgent routes only parsed envelopes; a hand-fed one
            return _refused(MALFORMED_ENVELOPE, f"bytes that do not parse ({exc})", key, raw)
        if envelope.WhichOneof("body") == "export_request":
            # Before loading the state: an export must work even when this binary cannot
            # load the key's blobs (that is when an operator needs the snapshot most), and
            # it only copies the cells. Nor does it wait behind a hold: it observes the
            # committed state, which a pending retry has not changed.
            waiting = _waiting_of(held, store)
            return StepResult(
                emitted=(
                    _export(
                        key,
                        raw,
                        envelope,
                        store.read_cells(),
                        store.read_seq(),
                        self._agent_build,
                        waiting,
                    ),
                )
            )
        run = _read(store, self._memo, timer_at_from_state=True, held=held)
        if isinstance(run, StateError):
            return _refused(STATE_UNREADABLE, str(run), key, raw, envelope.envelope_id)
        if run.hold is not None and trigger_name(envelope) is not Trigger.NONE:
            # Behind the held trigger, in arrival order, whatever it is.
            return self._enqueue(key, raw, envelope, store, run.hold)
        decision = classify_trigger(run.state, envelope)
        if decision.action is TriggerAction.REJECT:
            code = NO_BODY if trigger_name(envelope) is Trigger.NONE else REJECTED_TRIGGER
            return _refused(code, decision.reason, key, raw, envelope.envelope_id)
        if decision.action is TriggerAction.QUEUE:
            return self._enqueue(key, raw, envelope, store, None)
        was_suspended = run.state.continuation is not None
        run.clock = envelope.event_time_ms
        self._run(key, run, envelope, decision, now_ms=envelope.event_time_ms, raw=raw)
        if run.hold is None and was_suspended and run.state.continuation is None:
            self._drain(key, run, store)
        return _write(run, store)

    def deadline(self, key: bytes, fired_ms: int, store: KeyStore) -> StepResult:
        """Handle the HITL timer of ``key`` firing at ``fired_ms``."""
        run = _read(store, self._memo, timer_at_from_state=False)
        if isinstance(run, StateError):
            return _refused(STATE_UNREADABLE, f"HITL timer at {fired_ms}: {run}", key, b"")
        cont = run.state.continuation
        if cont is None or cont.deadline_ms != fired_ms:
            # A timer set for a suspension that has since ended or been replaced.
            return StepResult(stale_timer=True)
        hold = run.hold
        if hold is not None:
            # The timeout waits its turn behind the held trigger, after the envelopes
            # that were already waiting (the drain runs it there).
            if not hold.deferred_deadline_ms:
                hold.deferred_deadline_ms = fired_ms
                hold.deferred_after = len(store.read_inbox())
            return _write(run, store)._replace(deferred_deadline=True)
        trigger = hitl_timeout(cont, fired_ms)
        decision = classify_trigger(run.state, trigger)
        if decision.action is not TriggerAction.RESUME:
            return StepResult()
        run.clock = fired_ms
        self._run(key, run, trigger, decision, now_ms=fired_ms, raw=None)
        if run.hold is None and run.state.continuation is None:
            self._drain(key, run, store)
        return _write(run, store)

    def retry_due(self, key: bytes, fired_ms: int, store: KeyStore) -> StepResult:
        """Handle the retry timer of ``key`` firing at ``fired_ms``: run the held trigger again.

        It runs as a new activation with the next SEQ, on ``fired_ms`` (its due time) as
        its clock. Once it commits or is given up, the envelopes that waited behind it
        run (and a HITL deadline that passed meanwhile, in its place among them).
        """
        run = _read(store, self._memo, timer_at_from_state=True)
        if isinstance(run, StateError):
            return _unreadable_hold(
                key,
                f"retry at {fired_ms}",
                lambda hold: hold.HasField("retry") and hold.retry.due_ms == fired_ms,
                run,
                store,
            )
        hold = run.hold
        if hold is None or not hold.HasField("retry") or hold.retry.due_ms != fired_ms:
            return StepResult(stale_timer=True)
        run.retry_at = run.retry_target = None  # it fired: set nowhere now
        run.clock = fired_ms
        if hold.deferred_deadline_ms:
            run.timer_at = run.timer_target = None  # the HITL timer fired too, noted in the hold
        run.hold = None
        trigger, raw = _held_trigger(hold, run.state, fired_ms)
        decision = classify_trigger(run.state, trigger)
        if decision.kind is None:  # nothing has changed since it was held: it cannot happen
            run.emitted.append(
                _error(
                    REJECTED_TRIGGER,
                    f"held trigger refused on retry: {decision.reason or decision.action.value}",
                    key,
                    raw or b"",
                    trigger.envelope_id if isinstance(trigger, AgentEnvelope) else "",
                )
            )
        else:
            self._run(key, run, trigger, decision, now_ms=fired_ms, raw=raw, prior=hold)
        if run.hold is None:
            deferral = (
                (hold.deferred_after, _DeadlineMark(hold.deferred_deadline_ms))
                if hold.deferred_deadline_ms
                else None
            )
            self._drain(key, run, store, deferral)
        return _write(run, store)

    def completed(self, key: bytes, done: ActivationDone, store: KeyStore) -> StepResult:
        """Commit the result of the activation ``key`` holds in flight (or fail it).

        As ``_run`` would have right after the activation, had it waited for it; then the
        envelopes that waited behind it run (those that arrived meanwhile as on arrival),
        and a HITL deadline that passed meanwhile in its place among them. A result for
        another SEQ than the held one, or with no activation held, is stale.
        """
        run = _read(store, self._memo, timer_at_from_state=True)
        if isinstance(run, StateError):
            return _unreadable_hold(
                key,
                f"activation in flight at seq {done.seq}",
                lambda hold: hold.HasField("in_flight") and hold.in_flight.seq == done.seq,
                run,
                store,
            )
        hold = run.hold
        if hold is None or not hold.HasField("in_flight") or hold.in_flight.seq != done.seq:
            return StepResult(stale_timer=True)
        flight = hold.in_flight
        run.clock = flight.reached_ms
        if hold.deferred_deadline_ms:
            run.timer_at = run.timer_target = None  # the HITL timer fired, noted in the hold
        run.hold = None
        trigger, raw = _held_trigger(hold, run.state, flight.now_ms)
        self._finish(
            key, run, done.seq, done.result, trigger, now_ms=flight.now_ms, raw=raw, prior=hold
        )
        deferral = (
            (hold.deferred_after, _DeadlineMark(hold.deferred_deadline_ms))
            if hold.deferred_deadline_ms
            else None
        )
        # Also when it failed into a retry hold: what arrived meanwhile is handled as on
        # arrival behind that hold (exports answered, the rest waiting while there is room).
        self._drain(key, run, store, deferral, arrived_from=flight.arrived_from)
        return _write(run, store)

    @staticmethod
    def in_flight_seq(store: KeyStore) -> int | None:
        """The SEQ of the activation the key holds in flight (None: none, or unreadable)."""
        raw_hold = store.read_hold()
        if not raw_hold:
            return None
        try:
            hold = load_hold(raw_hold)[0]
        except StateError:
            return None
        return hold.in_flight.seq if hold is not None and hold.HasField("in_flight") else None

    def in_flight(self, key: bytes, store: KeyStore) -> InFlightRun | None:
        """The activation ``key`` holds in flight, to run (again): None if it holds none.

        Nothing of the key commits while it holds one, so the committed cells and the hold
        give the very activation that was started (the same SEQ, state, trigger, clock).
        """
        raw_hold = store.read_hold()
        if not raw_hold:
            return None
        hold = load_hold(raw_hold)[0]
        if hold is None or not hold.HasField("in_flight"):
            return None
        state = load_key_state(store.read_cells(), self._memo)
        trigger, _ = _held_trigger(hold, state, hold.in_flight.now_ms)
        return InFlightRun(
            seq=hold.in_flight.seq,
            state=state,
            trigger=trigger,
            decision=classify_trigger(state, trigger),
            now_ms=hold.in_flight.now_ms,
        )

    def _run(
        self,
        key: bytes,
        run: _KeyRun,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
        raw: bytes | None,
        prior: KeyHold | None = None,
    ) -> None:
        """One activation of ``trigger`` (``raw``: its bytes; None for a HITL timeout).

        ``prior`` is the hold it was retried from (its attempts so far), None for a
        first attempt. If the ``Activate`` started it without waiting, the key now holds
        it in flight (``completed`` finishes it).
        """
        seq = run.seq + 1
        result = self._activate(key, seq, run.state, trigger, decision, now_ms=now_ms)
        if isinstance(result, Started):
            hold = KeyHold(
                envelope=raw or b"",
                timeout=raw is None,
                in_flight=InFlight(
                    seq=seq, now_ms=now_ms, reached_ms=run.clock, attempts=_attempts_of(prior)
                ),
            )
            if prior is not None and prior.deferred_deadline_ms:
                hold.deferred_deadline_ms = prior.deferred_deadline_ms
                hold.deferred_after = prior.deferred_after
            run.hold = hold
            run.started = seq
            run.arrival_unset = True
            return
        self._finish(key, run, seq, result, trigger, now_ms=now_ms, raw=raw, prior=prior)

    def _finish(
        self,
        key: bytes,
        run: _KeyRun,
        seq: int,
        result: ActivationResult,
        trigger: AgentEnvelope | Timeout,
        *,
        now_ms: int,
        raw: bytes | None,
        prior: KeyHold | None,
    ) -> None:
        """What follows activation ``seq`` of ``trigger``: commit it, or hold or dead-letter
        its trigger."""
        run.activations.append(result)
        # Each activation takes its SEQ, failed or not (invariant 1 keeps only this and
        # the trace of a failure).
        run.seq = seq
        out = run.emitted
        out.append(
            (_TRACE_BATCHES, (key, tuple([serialize_trace_event(event) for event in result.trace])))
        )
        if not isinstance(result, ActivationCommit):
            self._failed(key, run, result, trigger, now_ms=now_ms, raw=raw, prior=prior)
            return
        run.cells = result.cells
        run.state = result.state
        # The commit's cache cells were dumped from its state's caches (run_activation):
        # those bytes load to these caches, so the key's next load need not parse them.
        self._memo.remember("llm_cache", result.cells.llm_cache, result.state.cache)
        self._memo.remember("tool_cache", result.cells.tool_cache, result.state.tool_cache)
        run.timer_target = result.timer_deadline_ms
        for payload in result.outputs:
            out.append((_OUTPUTS, (key, payload)))
        for intent in result.released_intents:
            out.append((_INTENTS, (key, intent.SerializeToString(deterministic=True))))
        for intent in result.approval_requests:
            out.append((_APPROVALS, (key, intent.SerializeToString(deterministic=True))))

    def _failed(
        self,
        key: bytes,
        run: _KeyRun,
        failure: ActivationFailure,
        trigger: AgentEnvelope | Timeout,
        *,
        now_ms: int,
        raw: bytes | None,
        prior: KeyHold | None,
    ) -> None:
        """Hold the failed trigger for another attempt, or dead-letter it (the policy says)."""
        error = failure.error
        previous = _attempts_of(prior)
        transient = is_transient(error)
        # The wait counts from when the key got to the trigger: an envelope that waited in
        # the inbox ran on its own (earlier) clock, but its retry must not be due already.
        due = self._retry.next_attempt_ms(
            error,
            failures=len(previous) + 1,
            now_ms=max(now_ms, run.clock),
            entity_key=key,
            seq=failure.seq,
        )
        attempt = FailedAttempt(
            seq=failure.seq,
            now_ms=now_ms,
            error_type=failure.error_type,
            error=_message(error, MAX_ATTEMPT_TEXT),
            transient=transient,
            wait_ms=0 if due is None else due - max(now_ms, run.clock),
        )
        attempts = [*previous, attempt]
        if due is not None:
            hold = KeyHold(
                envelope=raw or b"",
                timeout=raw is None,
                retry=RetryPending(due_ms=due, attempts=attempts),
            )
            if prior is not None and prior.deferred_deadline_ms:
                hold.deferred_deadline_ms = prior.deferred_deadline_ms
                hold.deferred_after = prior.deferred_after
            run.hold = hold
            run.retry_target = due
            run.retries.append(attempt.wait_ms)
            _LOG.info(
                "beam_agents: key %s: activation seq %d failed transiently (%s: %s); "
                "attempt %d of %d, retrying at event time %d (in %d ms)",
                key.hex(),
                failure.seq,
                failure.error_type,
                attempt.error,
                len(attempts),
                self._retry.max_attempts,
                due,
                attempt.wait_ms,
            )
            return
        envelope_id = trigger.envelope_id if isinstance(trigger, AgentEnvelope) else ""
        what = f"envelope {envelope_id!r}" if raw is not None else "the HITL timeout resume"
        cause = f"{failure.error_type}: {attempt.error}"
        if transient:
            code = RETRIES_EXHAUSTED
            reason = (
                f"{what} failed on every one of its {len(attempts)} attempts "
                f"(RetryPolicy.max_attempts={self._retry.max_attempts}), the last at seq "
                f"{failure.seq}: {cause}"
            )
        else:
            code = ACTIVATION_FAILED
            reason = (
                f"{what} failed at seq {failure.seq} (attempt {len(attempts)}), a failure a "
                f"retry cannot cure: {cause}"
            )
        if raw is None:
            reason += (
                "; the key stays suspended with its deadline passed (an awaited tool_result "
                "still resumes it)"
            )
        run.emitted.append(
            _logged(
                ErrorRecord(
                    code,
                    reason,
                    entity_key=key,
                    envelope_id=envelope_id,
                    raw=raw or b"",
                    seq=failure.seq,
                    error_type=failure.error_type,
                    error=_message(error, MAX_ERROR_TEXT),
                    attempts=tuple(
                        Attempt(a.seq, a.now_ms, a.error_type, a.error, a.transient, a.wait_ms)
                        for a in attempts
                    ),
                )
            )
        )

    def _drain(
        self,
        key: bytes,
        run: _KeyRun,
        store: KeyStore,
        deferral: tuple[int, _DeadlineMark] | None = None,
        *,
        arrived_from: int | None = None,
    ) -> None:
        """Run the envelopes waiting in the key's inbox, in arrival order, as far as they can.

        Called when the key stops being suspended or its hold is resolved. Each envelope
        is handled as a separate element would be (its own activation, SEQ and clock, from
        the committed bytes, exactly what replay loads from a snapshot taken between the
        two). Start events wait on while the key is suspended (tool results and approvals
        do not), and run once it is not; a trigger that fails transiently, or one started in
        flight, becomes the key's new hold and the rest wait behind it. ``deferral``: a HITL
        deadline that fired while the key held a trigger, and how many envelopes were
        waiting then. ``arrived_from``: where the envelopes that arrived while an activation
        was in flight start in the inbox (None: none did); each of those is handled as on
        arrival (``_arrive``).
        """
        inbox = store.read_inbox()
        if not inbox and deferral is None:
            return
        arrived = len(inbox) if arrived_from is None else min(arrived_from, len(inbox))
        # (item, whether it already had its arrival handling: it waits for a reason)
        queue: list[tuple[bytes | _DeadlineMark, bool]] = [
            (raw, position < arrived) for position, raw in enumerate(inbox)
        ]
        if deferral is not None:
            queue.insert(min(deferral[0], len(queue)), (deferral[1], True))
        kept: list[tuple[bytes | _DeadlineMark, bool]] = []  # start events behind the suspension
        at = 0
        while at < len(queue) and run.hold is None:
            item, waited = queue[at]
            at += 1
            was_suspended = run.state.continuation is not None
            if isinstance(item, _DeadlineMark):
                self._deferred_timeout(key, run, item.fired_ms)
            elif not waited:
                if self._arrive(key, run, item, len(kept)):
                    kept.append((item, True))
                    continue
            else:
                envelope = AgentEnvelope.FromString(item)  # only parsed envelopes wait
                if was_suspended and trigger_name(envelope) is Trigger.EVENT:
                    kept.append((item, True))
                    continue
                self._waited(key, run, item, envelope)
            if was_suspended and run.state.continuation is None and kept:
                queue[at:at] = kept  # they arrived before the rest: they run first
                kept = []
        remaining = [*kept, *queue[at:]]
        if run.hold is not None and run.hold.HasField("retry"):
            remaining = self._behind_retry(key, run, remaining)
        waiting: list[bytes] = []
        first_unhandled: int | None = None
        for item, waited in remaining:
            if isinstance(item, _DeadlineMark):
                # The drain stopped at a new hold before the deadline's turn: it moves there.
                assert run.hold is not None
                run.hold.deferred_deadline_ms = item.fired_ms
                run.hold.deferred_after = len(waiting)
                continue
            if not waited and first_unhandled is None:
                first_unhandled = len(waiting)
            waiting.append(item)
        if run.hold is not None and run.hold.HasField("in_flight"):
            run.hold.in_flight.arrived_from = (
                len(waiting) if first_unhandled is None else first_unhandled
            )
            run.arrival_unset = False
        if waiting != inbox:
            store.write_inbox(waiting)

    def _arrive(self, key: bytes, run: _KeyRun, raw: bytes, waiting: int) -> bool:
        """An envelope that arrived while an activation was in flight, handled now as
        ``envelope`` would have handled it on arrival (the key holds nothing now).

        ``waiting``: how many start events wait behind the key's suspension. True: it is
        one more of them (it waits, in the inbox).
        """
        try:
            envelope = AgentEnvelope.FromString(raw)
        except DecodeError as exc:
            run.emitted.append(
                _error(MALFORMED_ENVELOPE, f"bytes that do not parse ({exc})", key, raw)
            )
            return False
        if envelope.WhichOneof("body") == "export_request":
            # As on arrival: the key held nothing, its inbox the start events kept so far.
            run.emitted.append(
                _export(
                    key, raw, envelope, run.cells, run.seq, self._agent_build, _waiting(None, waiting)
                )
            )
            return False
        run.state = load_key_state(run.cells, self._memo)
        decision = classify_trigger(run.state, envelope)
        if decision.action is TriggerAction.REJECT:
            code = NO_BODY if trigger_name(envelope) is Trigger.NONE else REJECTED_TRIGGER
            run.emitted.append(_error(code, decision.reason, key, raw, envelope.envelope_id))
            return False
        if decision.action is TriggerAction.QUEUE:
            if waiting < self._inbox_limit:
                return True
            run.emitted.append(_overflow(key, raw, envelope, waiting, self._inbox_limit, None))
            return False
        run.clock = envelope.event_time_ms
        self._run(key, run, envelope, decision, now_ms=envelope.event_time_ms, raw=raw)
        return False

    def _behind_retry(
        self, key: bytes, run: _KeyRun, remaining: list[tuple[bytes | _DeadlineMark, bool]]
    ) -> list[tuple[bytes | _DeadlineMark, bool]]:
        """The drain stopped at a new retry hold: what arrived while an activation was in
        flight and has not been handled is handled now, as on arrival behind that hold
        (exports answered, bytes that do not parse refused, the rest queued while the inbox
        has room)."""
        assert run.hold is not None
        kept: list[tuple[bytes | _DeadlineMark, bool]] = []
        waiting = sum(1 for item, waited in remaining if waited and isinstance(item, bytes))
        for item, waited in remaining:
            if waited or isinstance(item, _DeadlineMark):
                kept.append((item, waited))
                continue
            try:
                envelope = AgentEnvelope.FromString(item)
            except DecodeError as exc:
                run.emitted.append(
                    _error(MALFORMED_ENVELOPE, f"bytes that do not parse ({exc})", key, item)
                )
                continue
            if envelope.WhichOneof("body") == "export_request":
                run.emitted.append(
                    _export(
                        key,
                        item,
                        envelope,
                        run.cells,
                        run.seq,
                        self._agent_build,
                        _waiting(run.hold, waiting),
                    )
                )
                continue
            if trigger_name(envelope) is Trigger.NONE:
                reason = classify_trigger(run.state, envelope).reason
                run.emitted.append(_error(NO_BODY, reason, key, item, envelope.envelope_id))
                continue
            if waiting >= self._inbox_limit:
                run.emitted.append(
                    _overflow(key, item, envelope, waiting, self._inbox_limit, run.hold)
                )
                continue
            waiting += 1
            kept.append((item, True))
        return kept

    def _waited(self, key: bytes, run: _KeyRun, raw: bytes, envelope: AgentEnvelope) -> None:
        """One envelope that waited in the inbox, handled now as it would have been then."""
        # As a separate element would: from the committed bytes, exactly what replay
        # loads from a snapshot taken between the two.
        run.state = load_key_state(run.cells, self._memo)
        decision = classify_trigger(run.state, envelope)
        if decision.kind is None:
            # A result or approval the state now refuses (its intent resolved meanwhile).
            run.emitted.append(
                _error(
                    REJECTED_TRIGGER,
                    f"queued {trigger_name(envelope).value} refused: "
                    f"{decision.reason or decision.action.value}",
                    key,
                    raw,
                    envelope.envelope_id,
                )
            )
            return
        self._run(key, run, envelope, decision, now_ms=envelope.event_time_ms, raw=raw)

    def _deferred_timeout(self, key: bytes, run: _KeyRun, fired_ms: int) -> None:
        """A HITL deadline that fired while the key held a trigger, handled in its turn."""
        cont = run.state.continuation
        if cont is None or cont.deadline_ms != fired_ms:
            return  # the suspension ended (or was replaced) meanwhile: stale, as a timer would be
        run.state = load_key_state(run.cells, self._memo)
        trigger = hitl_timeout(cont, fired_ms)
        decision = classify_trigger(run.state, trigger)
        if decision.action is TriggerAction.RESUME:
            self._run(key, run, trigger, decision, now_ms=fired_ms, raw=None)

    def _enqueue(
        self,
        key: bytes,
        raw: bytes,
        envelope: AgentEnvelope,
        store: KeyStore,
        hold: KeyHold | None,
    ) -> StepResult:
        inbox = store.read_inbox()
        if len(inbox) >= self._inbox_limit:
            return StepResult(
                emitted=(_overflow(key, raw, envelope, len(inbox), self._inbox_limit, hold),)
            )
        store.write_inbox([*inbox, raw])
        return StepResult(queued=True)


def _overflow(
    key: bytes, raw: bytes, envelope: AgentEnvelope, waiting: int, limit: int, hold: KeyHold | None
) -> tuple[Emit, ErrorRecord]:
    """The ``inbox_overflow`` record of an envelope that found ``waiting`` (the limit) before it."""
    if hold is None:
        reason = (
            f"key {key.hex()} is suspended and its inbox already holds {waiting} "
            f"start events (AgentConfig.inbox_limit={limit}); this event was not queued"
        )
    else:
        reason = (
            f"key {key.hex()} is waiting to retry {_held_name(hold)} and its inbox "
            f"already holds {waiting} envelopes (AgentConfig.inbox_limit={limit}); "
            "this envelope was not queued"
        )
    return _error(INBOX_OVERFLOW, reason, key, raw, envelope.envelope_id)


def _in_flight(held: bytes) -> bool:
    """Whether the ``hold`` cell's bytes hold an activation in flight (unreadable: no)."""
    try:
        hold = load_hold(held)[0]
    except StateError:
        return False
    return hold is not None and hold.HasField("in_flight")


def _attempts_of(hold: KeyHold | None) -> list[FailedAttempt]:
    """The failed attempts before the held trigger's next one (none for a first attempt)."""
    if hold is None:
        return []
    if hold.HasField("retry"):
        return list(hold.retry.attempts)
    if hold.HasField("in_flight"):
        return list(hold.in_flight.attempts)
    return []


def _held_trigger(
    hold: KeyHold, state: KeyState, now_ms: int
) -> tuple[AgentEnvelope | Timeout, bytes | None]:
    """The trigger ``hold`` holds, and its bytes (None: the HITL timeout resume at ``now_ms``)."""
    if hold.timeout:
        cont = state.continuation
        # Nothing commits while a key holds a trigger: it is still suspended.
        assert cont is not None, "a held HITL timeout of a key that is not suspended"
        return hitl_timeout(cont, now_ms), None
    return AgentEnvelope.FromString(hold.envelope), hold.envelope


def _held_name(hold: KeyHold) -> str:
    """The held trigger and its retry, in a few words (for refusals)."""
    what = (
        "its HITL timeout resume"
        if hold.timeout
        else f"envelope {AgentEnvelope.FromString(hold.envelope).envelope_id!r}"
    )
    failed = len(hold.retry.attempts)
    return (
        f"{what} ({failed} failed attempt{'s' if failed != 1 else ''}, next at {hold.retry.due_ms})"
    )


def _message(error: BaseException, limit: int) -> str:
    """The error's message for a record, at most ``limit`` characters (never raises)."""
    try:
        if isinstance(error, SystemExit):
            # str(SystemExit(3)) is just "3": say what it was.
            text = f"agent code raised SystemExit with exit status {error.code!r} (the worker did not exit)"
        else:
            text = str(error) or f"{type(error).__name__} without a message"
    except Exception:  # agent code's own __str__ can raise too
        text = f"<{type(error).__name__} whose str() raised>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _read(
    store: KeyStore, memo: CacheMemo, *, timer_at_from_state: bool, held: bytes | None = None
) -> _KeyRun | StateError:
    """The key's run as its cells hold it (``held``: the ``hold`` cell, if read already)."""
    cells = store.read_cells()
    stored_hold = store.read_hold() if held is None else held
    try:
        state = load_key_state(cells, memo)
        hold = load_hold(stored_hold)[0] if stored_hold else None
    except StateError as exc:
        return exc
    # While suspended the timer is set at the continuation's deadline (every commit
    # that suspends sets it); once it has fired it is set nowhere (also when it fired
    # while the key held a trigger: the hold notes it).
    timer_at = deadline_of(state) if timer_at_from_state else None
    retry_at: int | None = None
    if hold is not None:
        if hold.deferred_deadline_ms:
            timer_at = None
        retry_at = hold.retry.due_ms if hold.HasField("retry") else None
    return _KeyRun(
        seq=store.read_seq(),
        stored=cells,
        cells=cells,
        state=state,
        timer_at=timer_at,
        timer_target=timer_at,
        stored_hold=stored_hold,
        hold=hold,
        retry_at=retry_at,
        retry_target=retry_at,
    )


def _write(run: _KeyRun, store: KeyStore) -> StepResult:
    if run.arrival_unset and run.hold is not None and run.hold.HasField("in_flight"):
        # Started outside a drain: what waits in the inbox now waited before it started.
        # (Only a suspended key or one holding a trigger has an inbox: one read fewer.)
        waited = bool(run.stored.continuation or run.stored_hold)
        run.hold.in_flight.arrived_from = len(store.read_inbox()) if waited else 0
    store.write_seq(run.seq)
    store.write_changed(run.stored, run.cells)
    hold = b"" if run.hold is None else dump_hold(run.hold)
    if hold != run.stored_hold:
        store.write_hold(hold)
    return StepResult(
        emitted=tuple(run.emitted),
        activations=tuple(run.activations),
        timer=None if run.timer_target == run.timer_at else TimerTarget(run.timer_target),
        retry_timer=None if run.retry_target == run.retry_at else TimerTarget(run.retry_target),
        retries=tuple(run.retries),
        started=run.started,
    )


def _unreadable_hold(
    key: bytes,
    what: str,
    matches: Callable[[KeyHold], bool],
    error: StateError,
    store: KeyStore,
) -> StepResult:
    """The retry timer fired, or an activation in flight finished (``what``), but the key's
    state cannot be loaded by this binary.

    Nothing can run: the held envelope and every one waiting behind it go to ``.errors``
    (``state_unreadable``, each with its bytes, to re-send once a binary that reads the
    state runs), and the hold and inbox are cleared, so that nothing stays stuck behind
    a retry that cannot happen. The blob cells are left as they are. A readable hold the
    input does not ``match`` (another retry, another SEQ) makes it stale instead.
    """
    held = b""
    try:
        hold = load_hold(store.read_hold())[0]
    except StateError:
        hold = None
    if (
        hold is not None
        and (hold.HasField("retry") or hold.HasField("in_flight"))
        and not matches(hold)
    ):
        return StepResult(stale_timer=True)
    if hold is not None:
        held = hold.envelope
    emitted: list[tuple[Emit, Any]] = []
    for raw in [held, *store.read_inbox()] if held else store.read_inbox():
        try:
            envelope_id = AgentEnvelope.FromString(raw).envelope_id
        except DecodeError:
            envelope_id = ""
        emitted.append(_error(STATE_UNREADABLE, f"{what}: {error}", key, raw, envelope_id))
    store.write_hold(b"")
    store.write_inbox([])
    return StepResult(emitted=tuple(emitted))


def _waiting_of(held: bytes, store: KeyStore) -> KeyWaiting | None:
    """What a key with the ``hold`` cell ``held`` waits on (an unreadable hold: the inbox only)."""
    try:
        hold = load_hold(held)[0] if held else None
    except StateError:
        hold = None
    # Only a suspended key or one holding a trigger has an inbox: no read for the others.
    return _waiting(hold, len(store.read_inbox())) if held or store.read_cells().continuation else None


def _waiting(hold: KeyHold | None, inbox: int) -> KeyWaiting | None:
    """The snapshot's ``waiting``: the retry ``hold`` holds, and ``inbox`` envelopes (None: nothing)."""
    if hold is not None and hold.HasField("retry"):
        envelope_id = "" if hold.timeout else AgentEnvelope.FromString(hold.envelope).envelope_id
        return KeyWaiting(
            hold="retry",
            envelope_id=envelope_id,
            timeout=hold.timeout,
            due_ms=hold.retry.due_ms,
            attempts=hold.retry.attempts,
            inbox=inbox,
        )
    return KeyWaiting(inbox=inbox) if inbox else None


def _export(
    key: bytes,
    raw: bytes,
    envelope: AgentEnvelope,
    cells: StateCells,
    seq: int,
    build: AgentBuild | None,
    waiting: KeyWaiting | None = None,
) -> tuple[Emit, Any]:
    try:
        snapshot = make_snapshot(
            cells,
            entity_key=key,
            seq=seq,
            snapshot_at_ms=envelope.event_time_ms,
            request_id=envelope.export_request.request_id,
            agent_build=build,
        )
        if waiting is not None:
            snapshot.waiting.CopyFrom(waiting)
    except StateError as exc:
        return _error(
            STATE_UNREADABLE,
            f"export {envelope.export_request.request_id!r}: {exc}",
            key,
            raw,
            envelope.envelope_id,
        )
    return Emit.SNAPSHOTS, (key, snapshot.SerializeToString(deterministic=True))


def _error(
    code: ErrorCode, reason: str, key: bytes, raw: bytes, envelope_id: str = ""
) -> tuple[Emit, ErrorRecord]:
    return _logged(ErrorRecord(code, reason, entity_key=key, envelope_id=envelope_id, raw=raw))


def _logged(record: ErrorRecord) -> tuple[Emit, ErrorRecord]:
    """``record`` to emit on ``.errors``, logged at WARNING (``log_dead_letter``)."""
    log_dead_letter(record)
    return Emit.ERRORS, record


def _refused(
    code: ErrorCode, reason: str, key: bytes, raw: bytes, envelope_id: str = ""
) -> StepResult:
    return StepResult(emitted=(_error(code, reason, key, raw, envelope_id),))


__all__ = [
    "STARTED",
    "Activate",
    "ActivationDone",
    "Emit",
    "HitlDeadline",
    "InFlightRun",
    "KeyStep",
    "KeyStore",
    "MemoryKeyStore",
    "RetryDue",
    "Started",
    "StepResult",
    "TimerTarget",
    "activation_runner",
    "deadline_of",
]
