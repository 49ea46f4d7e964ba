"""AgentDoFn subclasses that watch or break activations (importable by Beam's workers).

Both hook ``AgentDoFn._activate``, the ``Activate`` the DoFn hands its ``KeyStep``: it runs
one activation of one key at the SEQ the step gives it.
``OverlapTrackingDoFn`` records how many activations run at once, in all and per key.
``CrashOnceDoFn`` fails its bundle once, right after one chosen activation ran (its model
calls made, its commit not yet written), as a worker dying mid-bundle would.
Both only work on in-process runners (the records are module globals or files).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from beam_agents._protos import AgentEnvelope
from beam_agents.activation import ActivationResult, TriggerDecision
from beam_agents.agent import Timeout
from beam_agents.key_state import KeyState
from beam_agents.pipeline.agent_dofn import AgentDoFn

_LOCK = threading.Lock()
RUNNING: dict[bytes, int] = {}
IN_FLIGHT: set[tuple[bytes, int]] = set()
"""``(key, seq)`` of the activations ``CrashOnceDoFn`` is running now."""
PEAK: dict[str, int] = {"all": 0, "per_key": 0}


def reset_overlap() -> None:
    with _LOCK:
        RUNNING.clear()
        PEAK.update(all=0, per_key=0)


class OverlapTrackingDoFn(AgentDoFn):
    """Records the peak number of activations in flight: in all, and of one key."""

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
        with _LOCK:
            RUNNING[key] = RUNNING.get(key, 0) + 1
            PEAK["all"] = max(PEAK["all"], sum(RUNNING.values()))
            PEAK["per_key"] = max(PEAK["per_key"], RUNNING[key])
        try:
            return super()._activate(key, seq, state, trigger, decision, now_ms=now_ms)
        finally:
            with _LOCK:
                RUNNING[key] -= 1


class SimulatedWorkerCrash(Exception):
    """The bundle dies here; the runner retries it."""


class CrashOnceDoFn(AgentDoFn):
    """Fails the bundle once, after activation ``(crash_key, crash_seq)`` ran.

    Every activation attempt is appended to ``attempts_file`` as ``key-hex:seq`` when it
    has run. With ``max_in_flight > 1`` the crash waits (up to 10 s) until another key's
    activation is in flight and writes those to ``in_flight_file``: the crash kills them
    mid-activation. The ``marker`` file makes the crash happen once across retries and
    DoFn instances.
    """

    def __init__(
        self,
        *args: Any,
        crash_key: bytes,
        crash_seq: int,
        attempts_file: str,
        in_flight_file: str,
        marker: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._crash_key = crash_key
        self._crash_seq = crash_seq
        self._attempts_file = attempts_file
        self._in_flight_file = in_flight_file
        self._marker = marker

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
        with _LOCK:
            IN_FLIGHT.add((key, seq))
        try:
            result = super()._activate(key, seq, state, trigger, decision, now_ms=now_ms)
        finally:
            with _LOCK:
                IN_FLIGHT.discard((key, seq))
        with _LOCK, open(self._attempts_file, "a") as attempts:
            attempts.write(f"{key.hex()}:{seq}\n")
        if (key, seq) != (self._crash_key, self._crash_seq) or Path(self._marker).exists():
            return result
        Path(self._marker).write_text("crashed")
        if self._config.max_in_flight > 1:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with _LOCK:
                    others = sorted(IN_FLIGHT)
                if others:
                    Path(self._in_flight_file).write_text(
                        "\n".join(f"{k.hex()}:{n}" for k, n in others)
                    )
                    break
                time.sleep(0.001)
        raise SimulatedWorkerCrash(f"worker lost while {key!r} seq {seq} was in flight")


class FaultsInFlightDoFn(AgentDoFn):
    """Breaks things while activations are in flight across bundle boundaries.

    Every activation attempt is appended to ``attempts_file`` (``key-hex:seq``). Faults,
    each once per ``(key, seq)`` across retries (marker files under ``marker_dir``):

    - ``fail_start``: the bundle that started activation ``(key, seq)`` fails after it
      started (its hold never committed): the retried bundle starts the same one again.
    - ``fail_commit``: the bundle committing ``(key, seq)`` fails after the step ran (state
      written, outputs made, all discarded by the runner): retried, it runs again.
    - ``kill_at``: when ``(key, seq)`` is committed, the worker "dies" first: every
      activation in flight in this process is forgotten, as a new worker process would
      have none of them; their keys' timers start them again from the committed cells.
    """

    def __init__(
        self,
        *args: Any,
        attempts_file: str,
        marker_dir: str,
        fail_start: frozenset[tuple[bytes, int]],
        fail_commit: frozenset[tuple[bytes, int]],
        kill_at: frozenset[tuple[bytes, int]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._attempts_file = attempts_file
        self._marker_dir = marker_dir
        self._fail_start = fail_start
        self._fail_commit = fail_commit
        self._kill_at = kill_at

    def _once(self, what: str, key: bytes, seq: int) -> bool:
        marker = Path(self._marker_dir) / f"{what}-{key.hex()}-{seq}"
        with _LOCK:
            if marker.exists():
                return False
            marker.write_text(what)
            return True

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
        result = super()._activate(key, seq, state, trigger, decision, now_ms=now_ms)
        with _LOCK, open(self._attempts_file, "a") as attempts:
            attempts.write(f"{key.hex()}:{seq}\n")
        return result

    def _apply(self, key: bytes, item: Any, store: Any, timers: Any, timestamp: Any) -> Any:
        from beam_agents.key_step import ActivationDone

        killing = isinstance(item, ActivationDone) and (key, item.seq) in self._kill_at
        if killing and self._once("kill", key, item.seq):
            assert self._flights is not None
            self._flights.forget_all()
            Path(self._marker_dir, f"killed-with-{len(IN_FLIGHT)}").touch()
            raise SimulatedWorkerCrash(f"worker died committing {key!r} seq {item.seq}")
        emitted = super()._apply(key, item, store, timers, timestamp)
        if isinstance(item, ActivationDone):
            if (key, item.seq) in self._fail_commit and self._once("commit", key, item.seq):
                raise SimulatedWorkerCrash(f"bundle lost committing {key!r} seq {item.seq}")
        else:
            started = self._stepper().in_flight_seq(store)
            failing = started is not None and (key, started) in self._fail_start
            if failing and self._once("start", key, started):
                raise SimulatedWorkerCrash(f"bundle lost after starting {key!r} seq {started}")
        return emitted
