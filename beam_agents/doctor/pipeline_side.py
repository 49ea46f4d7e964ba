"""The pipeline's side: the sample inputs through the pipeline's own per-key step, watched.

Runs in a worker process of its own (``worker``), with PYTHONHASHSEED fixed and the
network open, as a pipeline worker runs: the watcher starts before agent code is
imported; each lane (a key; a bundle's key, from the state before its first
activation) is a ``beam_agents.testing.PipelineKey`` (SEQ, cells, inbox, hold, HITL
and retry timers: the state round trip as ``AgentDoFn`` does it, through
``beam_agents.key_step``), handed its steps in order. A key's timers fire when a later
input's event time passes them (the watermark), or when a script says ``timeout``.
After every input that ran an activation the key is exported (an export request
through the same step): the snapshot an operator would replay those activations
from. Around every input the module-state probe takes its digests; the watcher is
paused while the doctor's own bookkeeping runs.

What it writes into the run directory, for the replay processes: per activation its
snapshot, its pre-image memory (what the activation before it committed, also within
one input), its triggering envelope, and per lane the trace stream; and it returns
the run record as JSON.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from beam_agents._protos import AgentEnvelope, LlmRequest, LlmResponse, TraceEvent, Usage
from beam_agents._wire import frame
from beam_agents.activation import ActivationCommit, envelope_digest
from beam_agents.agent import Agent
from beam_agents.cache_key import compute_cache_key
from beam_agents.config import AgentConfig
from beam_agents.dead_letter import ACTIVATION_FAILED, RETRIES_EXHAUSTED
from beam_agents.doctor.module_state import StateProbe, changed, where_written
from beam_agents.doctor.refusal import (
    DoctorInput,
    DoctorNaming,
    DoctorUsageError,
    naming_of,
    replay_naming,
)
from beam_agents.doctor.samples import Samples, Step
from beam_agents.doctor.watch import IN_PROVIDER, Watcher
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.key_state import StateCells
from beam_agents.key_step import Emit
from beam_agents.provider import Provider
from beam_agents.replay.naming import Input
from beam_agents.replay.refusal import ReplayRefused
from beam_agents.testing import (
    PipelineKey,
    approval_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.tools import ToolRegistry
from beam_agents.trace_view import ActivationStart, LlmCall

__all__ = ["STAND_IN_PROVIDER", "StandInProvider", "run_pipeline_side"]

_FAILURES = frozenset({ACTIVATION_FAILED, RETRIES_EXHAUSTED})
"""The dead letters of failed activations (each is in the report's activations already)."""

STAND_IN_PROVIDER = "doctor-stand-in"
"""The name of the model the doctor answers with when it is given none."""


class StandInProvider:
    """Answers every request with a line naming its cache key: deterministic and offline."""

    name = STAND_IN_PROVIDER

    def complete(self, request: LlmRequest) -> LlmResponse:
        key = compute_cache_key(request, provider=self.name)
        return LlmResponse(
            text=f"(doctor stand-in reply {key[:12]})",
            stop_reason="end_turn",
            model=request.model,
            usage=Usage(input_tokens=1, output_tokens=1),
        )


class _WatchedProvider:
    """The provider, marked so the watcher leaves what it does while answering alone, and
    counted. ``name``: the provider name the requests are keyed under (a bundle's recorded
    one, so the answers its snapshot cached are found again; default the provider's own)."""

    def __init__(self, inner: Provider, name: str = "") -> None:
        self.inner = inner
        self.name = name or inner.name
        self.calls = 0

    def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        token = IN_PROVIDER.set(True)
        try:
            return self.inner.complete(request)
        finally:
            IN_PROVIDER.reset(token)


@dataclass
class _Key:
    """One lane: a key of the pipeline's run, and the envelopes handed to it by id."""

    pipeline: PipelineKey
    number: int
    """The lane's number (its trace stream is ``t{number}.traces``)."""
    sent: dict[tuple[str, str], bytes]


def import_code(
    plan: dict[str, Any], watcher: Watcher, naming: DoctorNaming
) -> tuple[Agent, ToolRegistry, HitlPolicy, Any]:
    """The agent, registry, HITL policy and provider of ``plan``, imported under the watcher."""
    from beam_agents.replay.inputs.agent_code import import_object

    words = replay_naming(naming)
    try:
        with watcher.importing():
            agent = import_object(plan["agent"], Input.AGENT, Agent, words)
            registry = import_object(plan["registry"], Input.REGISTRY, ToolRegistry, words)
            hitl = (
                import_object(plan["hitl"], Input.HITL, HitlPolicy, words)
                if plan.get("hitl")
                else HitlPolicy(**plan["hitl_settings"])
                if plan.get("hitl_settings")
                else DEFAULT_HITL_POLICY
            )
            provider = _provider(plan.get("provider"), naming) if "provider" in plan else None
    except ReplayRefused as refused:
        raise DoctorUsageError(refused.message) from None
    return agent, registry, hitl, provider


def _provider(path: str | None, naming: DoctorNaming) -> Provider:
    if not path:
        return StandInProvider()
    import importlib

    module_name, _, attr = path.partition(":")
    shown = naming.given(DoctorInput.PROVIDER, path)
    if not module_name or not attr:
        raise DoctorUsageError(f"{shown} is not of the form module:ATTR")
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except Exception as exc:
        raise DoctorUsageError(
            f"{shown}: importing it failed with {type(exc).__name__}: {exc}"
        ) from None
    if not (hasattr(value, "complete") and hasattr(value, "name")) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise DoctorUsageError(
                f"{shown}: calling the provider factory failed with {type(exc).__name__}: {exc}"
            ) from None
    if not (callable(getattr(value, "complete", None)) and isinstance(getattr(value, "name", None), str)):
        raise DoctorUsageError(
            f"{shown} is a {type(value).__name__}, neither a provider (a name and a "
            "complete(request) method) nor a function returning one",
            "point it at AgentConfig's provider_factory, or at a provider",
        )
    return value  # type: ignore[no-any-return]


def _answer(step: Step, key: PipelineKey) -> bytes | str:
    """The envelope a script's answer makes, or why it cannot be made."""
    answer = step.answer
    assert answer is not None
    state = key.state
    intent = answer.get("intent")
    if answer["kind"] == "approval":
        if intent is None:
            waiting = [i.intent_id for i in state.pending if i.requires_approval]
            if not waiting:
                return "no intent of the key awaits an approval"
            intent = waiting[0]
        return approval_envelope(
            key.entity_key,
            intent,
            approved=answer["approved"],
            approver=answer["approver"],
            reason=answer["reason"],
            time_ms=answer["time_ms"],
            envelope_id=answer.get("id"),
        ).SerializeToString()
    if intent is None:
        pending = {i.intent_id for i in state.pending}
        cont = state.continuation
        awaited = [i for i in (cont.awaiting_intent_ids if cont else ()) if i not in pending]
        if not awaited:
            return "the key awaits no released intent's result"
        intent = awaited[0]
    return tool_result_envelope(
        key.entity_key,
        intent,
        status=answer["status"],
        payload=bytes.fromhex(answer["payload"]),
        error=answer["error"],
        time_ms=answer["time_ms"],
        envelope_id=answer.get("id"),
    ).SerializeToString()


def run_pipeline_side(
    plan: dict[str, Any], watcher: Watcher, out: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Run the plan's samples; write the run directory; return the run record (JSON data).
    ``progress`` is told each input before it runs (where it comes from, its key)."""
    naming = naming_of(plan)
    agent, registry, hitl, provider = import_code(plan, watcher, naming)
    watcher.recorded = lambda tool: tool in registry and registry.get(tool).recorded
    samples = Samples.from_document(plan["samples"])
    labels = {p.rpartition(":")[2]: obj for p, obj in ((plan["agent"], agent), (plan["registry"], registry))}
    probe = StateProbe(watcher.files, labels)
    import_observations = watcher.take()
    model = _WatchedProvider(provider, samples.provider)
    config = AgentConfig(provider_factory=lambda: model, hitl=hitl)
    keys: dict[str, _Key] = {}
    activations: list[dict[str, Any]] = []
    notes: list[str] = list(samples.notes)
    carried: list[dict[str, Any]] = []
    traces: dict[int, list[bytes]] = {}
    observations = [o.document() for o in import_observations]
    calls = {"model": 0, "cached": 0}
    with watcher.paused():
        digests = probe.digests()

    def key_of(step: Step) -> _Key:
        held = keys.get(step.lane_name)
        if held is None:
            pipeline = PipelineKey(agent, registry, config, entity_key=step.key)
            start = samples.lanes.get(step.lane_name)
            if start is not None:
                pipeline.store.seq = start.seq
                if start.cells is not None:
                    pipeline.store.cells = StateCells(
                        **{name: bytes.fromhex(data) for name, data in start.cells.items()}
                    )
                pipeline.timer_ms = start.timer_ms
            held = keys[step.lane_name] = _Key(pipeline, len(keys), {})
        return held

    def run(held: _Key, what: str, send: Any) -> None:
        nonlocal digests
        before_memory = held.pipeline.cells.memory
        with watcher.paused():
            # Said before it runs: should agent code end this process or never return, the
            # report names the input (and each input gets the time limit afresh).
            progress(what if _label(held.pipeline.entity_key) in what
                     else f"{what} ({_label(held.pipeline.entity_key)})")  # fmt: skip
        result = send()
        with watcher.paused():  # the doctor's own bookkeeping, unwatched
            after = probe.digests()
            moved = changed(digests, after)
            digests = after
            seen = watcher.take()
            for record in result.errors:
                if record.code not in _FAILURES:  # a failed activation: the report says so
                    notes.append(f"{what}: the pipeline refused it ({record.code}: {record.reason})")
            first_id = len(activations)
            if result.activations:
                _record(held, what, result, before_memory, moved)
            # Each call made in an activation, numbered with it (a key and seq can run twice:
            # on two bundles' lanes).
            ran = {(a["key"], a["seq"]): a["id"] for a in activations[first_id:]}
            observations.extend(
                replace(o, activation=ran.get((o.entity_key, o.seq), -1)).document()
                if o.phase == "activation"
                else o.document()
                for o in seen
            )

    def _record(held: _Key, what: str, result: Any, before_memory: bytes, moved: list[Any]) -> None:
        entity_key = held.pipeline.entity_key
        [snapshot] = held.pipeline.send(
            export_request_envelope(entity_key, f"doctor-{len(activations)}", time_ms=0)
        ).snapshots
        batches = [batch for _, batch in result.of(Emit.TRACE_BATCHES)]
        first_id = len(activations)
        # One input can run several activations (a resume, then the events that waited in
        # the inbox): each starts from the memory the one before it committed.
        memory = before_memory
        for activation, batch in zip(result.activations, batches, strict=True):
            ident = len(activations)
            traces.setdefault(held.number, []).extend(batch)
            start = ActivationStart.of(activation.trace[0])
            envelope = b""
            if not start.is_timeout:
                envelope = held.sent.get(start.envelope, b"")
            (out / f"a{ident}.snapshot").write_bytes(snapshot)
            (out / f"a{ident}.envelope").write_bytes(envelope)
            (out / f"a{ident}.pre-memory").write_bytes(memory)
            committed = isinstance(activation, ActivationCommit)
            if committed:
                memory = activation.cells.memory
            for event in activation.trace:
                if event.kind == TraceEvent.LLM_CALL:
                    calls["model"] += 1
                    calls["cached"] += bool(LlmCall.of(event).cache_hit)
            activations.append(
                {
                    "id": ident,
                    "key": entity_key.hex(),
                    "traces": f"t{held.number}.traces",
                    "seq": activation.seq,
                    "kind": str(activation.kind),
                    "trigger": str(start.trigger),
                    "committed": committed,
                    "error_type": "" if committed else activation.error_type,
                    "events": len(activation.trace),
                    "where": what,
                    "first_of_step": first_id,
                }
            )
        if moved:
            carried.append(
                {
                    "activations": list(range(first_id, len(activations))),
                    "values": [_written(module, name) for module, name in moved],
                }
            )

    def fire_due(when: int) -> None:
        """Every timer set at or before ``when`` fires, earliest first, as the watermark
        passing it fires it: HITL deadlines, and the retries of triggers a key holds."""
        while True:
            due = [
                (at, order, number, held, fire)
                for number, held in enumerate(keys.values())
                for at, order, fire in (
                    (held.pipeline.retry_timer_ms, 0, held.pipeline.fire_retry),
                    (held.pipeline.timer_ms, 1, held.pipeline.fire_timer),
                )
                if at is not None and at <= when
            ]
            if not due:
                return
            at, order, _, held, fire = min(due, key=lambda d: d[:3])
            which = "retry timer" if order == 0 else "HITL timer"
            run(held, f"the {which} of {_label(held.pipeline.entity_key)} at {at}", fire)

    for step in samples.steps:
        held = key_of(step)
        when = _time_of(step)
        if when is not None:
            fire_due(when)
        if step.timeout:
            if held.pipeline.timer_ms is None:
                notes.append(f"{step.where}: {_label(step.key)} has no HITL timer set; skipped")
                continue
            run(held, step.where, held.pipeline.fire_timer)
            continue
        raw = step.envelope
        if step.answer is not None:
            made = _answer(step, held.pipeline)
            if isinstance(made, str):
                notes.append(f"{step.where}: {made} ({_label(step.key)}); skipped")
                continue
            raw = made
        envelope = AgentEnvelope.FromString(raw)
        held.sent[(envelope.envelope_id, envelope_digest(envelope))] = raw
        run(held, step.where, functools.partial(held.pipeline.send, raw))
    with watcher.paused():
        for held in keys.values():
            if held.pipeline.store.hold:
                notes.append(
                    f"{_label(held.pipeline.entity_key)} still holds a failed trigger for a retry "
                    "after the last sample (no later input passed its retry time)"
                )
        for number, batch in traces.items():
            (out / f"t{number}.traces").write_bytes(b"".join(frame(b) for b in batch))
    return {
        "activations": activations,
        "observations": observations,
        "carried": carried,
        "notes": notes,
        "provider": provider.name if provider is not None else "",
        "model_name": model.name,
        "model_calls": calls["model"],
        "cache_hits": calls["cached"],
        "provider_calls": model.calls,
        "watch_errors": [f"{type(e).__name__}: {e}" for e in watcher.errors],
    }


def _time_of(step: Step) -> int | None:
    if step.answer is not None:
        return int(step.answer["time_ms"])
    if step.envelope:
        return AgentEnvelope.FromString(step.envelope).event_time_ms
    return None


def _label(key: bytes) -> str:
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return key.hex()
    return text if text.isprintable() else key.hex()



def _written(module: str, name: str) -> dict[str, Any]:
    """A carried value and the statement that writes it (for the report)."""
    write = where_written(module, name)
    return {
        "module": module,
        "name": name,
        "file": write.file if write else "",
        "line": write.line if write else 0,
        "defined": write.defined if write else 0,
    }
