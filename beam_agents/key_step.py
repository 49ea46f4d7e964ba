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

Triggers are classified by ``classify_trigger``; the activation itself is the
``Activate`` callable the step is built with (``run_activation`` with the
pipeline's configuration, see ``activation_runner``). ``AgentDoFn`` is an adapter
from Beam's state cells and timer to this step, on its serial path and in its
concurrent lanes alike; ``beam_agents.testing.PipelineKey`` drives it on a
``MemoryKeyStore`` for tests.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

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
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import KeyState, StateCells, load_key_state, make_snapshot
from beam_agents.llm_cache import DEFAULT_CACHE_POLICY, CachePolicy
from beam_agents.provider import Provider
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
    """The envelope was appended to the key's inbox."""
    stale_timer: bool = False
    """The deadline was for a suspension that has since ended or been replaced."""

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
        """Raw envelopes of start events waiting for the key to stop being suspended."""
        ...

    def write_inbox(self, inbox: list[bytes]) -> None: ...


class MemoryKeyStore:
    """A ``KeyStore`` held in memory (a new key's by default)."""

    __slots__ = ("cells", "inbox", "seq")

    def __init__(
        self, seq: int = 0, cells: StateCells | None = None, inbox: list[bytes] | None = None
    ) -> None:
        self.seq = seq
        self.cells = StateCells() if cells is None else cells
        self.inbox = [] if inbox is None else inbox

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
    ) -> ActivationResult: ...


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
    emitted: list[tuple[Emit, Any]] = field(default_factory=list)
    activations: list[ActivationResult] = field(default_factory=list)


class KeyStep:
    """Handles one input of one key at a time (see the module docstring).

    ``activate`` runs each activation (``activation_runner(...)``; ``AgentDoFn`` passes
    its own, which also times it); ``inbox_limit`` bounds the start events a suspended
    key holds (``AgentConfig.inbox_limit``).
    """

    __slots__ = ("_activate", "_inbox_limit")

    def __init__(self, activate: Activate, *, inbox_limit: int) -> None:
        self._activate = activate
        self._inbox_limit = inbox_limit

    def handle(self, key: bytes, item: bytes | HitlDeadline, store: KeyStore) -> StepResult:
        """Handle ``item`` (envelope bytes or a deadline firing) of ``key`` against ``store``."""
        if isinstance(item, HitlDeadline):
            return self.deadline(key, item.fired_ms, store)
        return self.envelope(key, item, store)

    def envelope(self, key: bytes, raw: bytes, store: KeyStore) -> StepResult:
        """Handle one routed envelope of ``key``."""
        try:
            envelope = AgentEnvelope.FromString(raw)
        except DecodeError as exc:  # RunAgent routes only parsed envelopes; a hand-fed one
            return _refused(MALFORMED_ENVELOPE, f"bytes that do not parse ({exc})", key, raw)
        if envelope.WhichOneof("body") == "export_request":
            # Before loading the state: an export must work even when this binary cannot
            # load the key's blobs (that is when an operator needs the snapshot most), and
            # it only copies the cells.
            return StepResult(emitted=(_export(key, raw, envelope, store),))
        run = _read(store, timer_at_from_state=True)
        if isinstance(run, StateError):
            return _refused(STATE_UNREADABLE, str(run), key, raw, envelope.envelope_id)
        decision = classify_trigger(run.state, envelope)
        if decision.action is TriggerAction.REJECT:
            code = NO_BODY if trigger_name(envelope) is Trigger.NONE else REJECTED_TRIGGER
            return _refused(code, decision.reason, key, raw, envelope.envelope_id)
        if decision.action is TriggerAction.QUEUE:
            return self._enqueue(key, raw, envelope, store)
        was_suspended = run.state.continuation is not None
        self._run(key, run, envelope, decision, now_ms=envelope.event_time_ms)
        if was_suspended and run.state.continuation is None:
            self._drain_inbox(key, run, store)
        return _write(run, store)

    def deadline(self, key: bytes, fired_ms: int, store: KeyStore) -> StepResult:
        """Handle the HITL timer of ``key`` firing at ``fired_ms``."""
        run = _read(store, timer_at_from_state=False)
        if isinstance(run, StateError):
            return _refused(STATE_UNREADABLE, f"HITL timer at {fired_ms}: {run}", key, b"")
        cont = run.state.continuation
        if cont is None or cont.deadline_ms != fired_ms:
            # A timer set for a suspension that has since ended or been replaced.
            return StepResult(stale_timer=True)
        trigger = hitl_timeout(cont, fired_ms)
        decision = classify_trigger(run.state, trigger)
        if decision.action is not TriggerAction.RESUME:
            return StepResult()
        self._run(key, run, trigger, decision, now_ms=fired_ms)
        if run.state.continuation is None:
            self._drain_inbox(key, run, store)
        return _write(run, store)

    def _run(
        self,
        key: bytes,
        run: _KeyRun,
        trigger: AgentEnvelope | Timeout,
        decision: TriggerDecision,
        *,
        now_ms: int,
    ) -> None:
        seq = run.seq + 1
        result = self._activate(key, seq, run.state, trigger, decision, now_ms=now_ms)
        run.activations.append(result)
        # Each activation takes its SEQ, failed or not (invariant 1 keeps only this and
        # the trace of a failure).
        run.seq = seq
        out = run.emitted
        out.append(
            (_TRACE_BATCHES, (key, tuple([serialize_trace_event(event) for event in result.trace])))
        )
        if not isinstance(result, ActivationCommit):
            return
        run.cells = result.cells
        run.state = result.state
        run.timer_target = result.timer_deadline_ms
        for payload in result.outputs:
            out.append((_OUTPUTS, (key, payload)))
        for intent in result.released_intents:
            out.append((_INTENTS, (key, intent.SerializeToString(deterministic=True))))
        for intent in result.approval_requests:
            out.append((_APPROVALS, (key, intent.SerializeToString(deterministic=True))))

    def _drain_inbox(self, key: bytes, run: _KeyRun, store: KeyStore) -> None:
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
                run.emitted.append(
                    _error(
                        REJECTED_TRIGGER,
                        f"queued event refused: {decision.reason or decision.action.value}",
                        key,
                        raw,
                        envelope.envelope_id,
                    )
                )
                continue
            self._run(key, run, envelope, decision, now_ms=envelope.event_time_ms)
        store.write_inbox(inbox[done:])

    def _enqueue(
        self, key: bytes, raw: bytes, envelope: AgentEnvelope, store: KeyStore
    ) -> StepResult:
        inbox = store.read_inbox()
        limit = self._inbox_limit
        if len(inbox) >= limit:
            return _refused(
                INBOX_OVERFLOW,
                f"key {key.hex()} is suspended and its inbox already holds {len(inbox)} "
                f"start events (AgentConfig.inbox_limit={limit}); this event was not queued",
                key,
                raw,
                envelope.envelope_id,
            )
        store.write_inbox([*inbox, raw])
        return StepResult(queued=True)


def _read(store: KeyStore, *, timer_at_from_state: bool) -> _KeyRun | StateError:
    cells = store.read_cells()
    try:
        state = load_key_state(cells)
    except StateError as exc:
        return exc
    # While suspended the timer is set at the continuation's deadline (every commit
    # that suspends sets it); once it has fired it is set nowhere.
    timer_at = deadline_of(state) if timer_at_from_state else None
    return _KeyRun(
        seq=store.read_seq(),
        stored=cells,
        cells=cells,
        state=state,
        timer_at=timer_at,
        timer_target=timer_at,
    )


def _write(run: _KeyRun, store: KeyStore) -> StepResult:
    store.write_seq(run.seq)
    store.write_changed(run.stored, run.cells)
    return StepResult(
        emitted=tuple(run.emitted),
        activations=tuple(run.activations),
        timer=None if run.timer_target == run.timer_at else TimerTarget(run.timer_target),
    )


def _export(key: bytes, raw: bytes, envelope: AgentEnvelope, store: KeyStore) -> tuple[Emit, Any]:
    try:
        snapshot = make_snapshot(
            store.read_cells(),
            entity_key=key,
            seq=store.read_seq(),
            snapshot_at_ms=envelope.event_time_ms,
            request_id=envelope.export_request.request_id,
        )
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
    return Emit.ERRORS, ErrorRecord(code, reason, entity_key=key, envelope_id=envelope_id, raw=raw)


def _refused(
    code: ErrorCode, reason: str, key: bytes, raw: bytes, envelope_id: str = ""
) -> StepResult:
    return StepResult(emitted=(_error(code, reason, key, raw, envelope_id),))


__all__ = [
    "Activate",
    "Emit",
    "HitlDeadline",
    "KeyStep",
    "KeyStore",
    "MemoryKeyStore",
    "StepResult",
    "TimerTarget",
    "activation_runner",
    "deadline_of",
]
