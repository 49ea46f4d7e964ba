"""The doctor's sample inputs: topic dumps, incident bundles, a script, or envelopes.

Every source becomes ``Step``s, one input of one key each, in the order the
pipeline's per-key step is handed them:

- ``--events DUMP|DIR`` (as replay reads it: an envelope stream, one envelope, or a
  directory of ``*.pb``): every envelope of every key, in event-time order (ties in
  reading order); export requests are left out (they run nothing). The HITL answers
  (``tool_result``, ``approval``) are in the dump of the results and approvals topics,
  as ``bundle`` takes them, and find their intents by id.
- ``--bundle FILE|DIR``: each bundle's envelopes in the order of its traced
  activations (a traced HITL timeout is the key's timer firing), on a lane of its own
  (``Lane``): the key starts from the state ``beam-agents-replay`` reconstructs for the
  bundle's first activation (its seq, memory, caches, continuation, pending intents), so
  intent ids (derived from key, seq and ordinal) are the ones its answers name, a bundle
  that starts at a resume resumes, and the model answers the pipeline recorded (the
  snapshot's cache) answer the same requests again. A bundle identical to one read
  already (the same key, activations, snapshot and envelopes: ``refund-v2`` beside
  ``refund-v1``) is read once.
- ``--script FILE``: a JSON document of steps written by hand (``parse_script``).
- ``envelopes=`` (Python): ``AgentEnvelope`` messages or their bytes, in order.

``Samples`` holds the steps and, per lane, where its key starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._protos import AgentEnvelope, ToolResult
from beam_agents._wire import frame
from beam_agents.doctor.refusal import DoctorInput, DoctorNaming, DoctorUsageError, replay_naming
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.replay.refusal import ReplayRefused

__all__ = [
    "DEFAULT_START_MS",
    "SCRIPT_STEP_MS",
    "Lane",
    "Samples",
    "Step",
    "load_samples",
    "parse_script",
    "policy_document",
]

DEFAULT_START_MS = 1_734_000_000_000
"""A script's first step's event time when it names none (2024-12-12 10:40 UTC)."""
SCRIPT_STEP_MS = 60_000
"""How much later a script step is than the one before when it says neither ``at_ms`` nor
``after_ms``."""

_STATUSES = {"OK": ToolResult.OK, "ERROR": ToolResult.ERROR, "REJECTED": ToolResult.REJECTED,
             "EXPIRED": ToolResult.EXPIRED}  # fmt: skip


@dataclass(frozen=True)
class Lane:
    """Where one lane's key starts: a key of its own in the pipeline's run (a bundle's lane
    starts from the state replay reconstructs for its first activation)."""

    key: bytes
    seq: int = 0
    """The SEQ cell: the last activation's seq before the lane's first (0: a new key)."""
    cells: dict[str, str] | None = None
    """The state cells (``StateCells`` field -> hex bytes); None: a new key's."""
    timer_ms: int | None = None
    """Where the key's HITL timer is set at the start (a suspended key's deadline)."""
    provider: str = ""
    """The model provider the lane's traces name (a bundle's), empty when unknown."""

    def document(self) -> dict[str, Any]:
        return {"key": self.key.hex(), "seq": self.seq, "cells": self.cells,
                "timer_ms": self.timer_ms, "provider": self.provider}  # fmt: skip

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Lane:
        return cls(bytes.fromhex(doc["key"]), doc["seq"], doc["cells"], doc["timer_ms"],
                   doc["provider"])  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One input of one key: an envelope, the key's HITL timer firing, or a script's answer
    to an intent the key has staged (its envelope is made when that intent is known)."""

    key: bytes
    lane: str = ""
    """The lane it runs on (empty: the key's own, its hex)."""
    envelope: bytes = b""
    """A serialized ``AgentEnvelope`` (empty for a timer firing or an answer)."""
    timeout: bool = False
    """Fire the key's HITL timer (a traced timeout, or a script's ``timeout``)."""
    answer: dict[str, Any] | None = None
    """A script's ``approval``/``tool_result`` without its intent id: ``kind``, ``time_ms``,
    the fields, and ``intent`` when the script named it."""
    where: str = ""
    """Where it comes from, for notes (``samples.json step 3``, ``dump.pb``)."""

    @property
    def lane_name(self) -> str:
        return self.lane or self.key.hex()

    def document(self) -> dict[str, Any]:
        return {
            "key": self.key.hex(),
            "lane": self.lane,
            "envelope": self.envelope.hex(),
            "timeout": self.timeout,
            "answer": self.answer,
            "where": self.where,
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Step:
        return cls(
            key=bytes.fromhex(doc["key"]),
            lane=doc["lane"],
            envelope=bytes.fromhex(doc["envelope"]),
            timeout=bool(doc["timeout"]),
            answer=doc["answer"],
            where=doc["where"],
        )


@dataclass(frozen=True)
class Samples:
    steps: tuple[Step, ...]
    lanes: dict[str, Lane] = field(default_factory=dict)
    """Lane name -> where its key starts (a lane not listed: a new key, its own lane)."""
    sources: tuple[str, ...] = ()
    """What was read, for the report's header."""
    hitl: dict[str, Any] | None = None
    """The HITL policy the bundles recorded (``HitlPolicy`` fields), when they agree on one
    that is not the default; None: none recorded (or they disagree: ``notes`` says so)."""
    notes: tuple[str, ...] = ()
    """What the report should say about the samples (bundles read once, skipped...)."""

    @property
    def provider(self) -> str:
        """The model provider the bundles' traces name (empty: no bundle names one)."""
        return next((lane.provider for lane in self.lanes.values() if lane.provider), "")

    def document(self) -> dict[str, Any]:
        return {
            "steps": [s.document() for s in self.steps],
            "lanes": {name: lane.document() for name, lane in self.lanes.items()},
            "sources": list(self.sources),
            "hitl": self.hitl,
            "notes": list(self.notes),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Samples:
        return cls(
            steps=tuple(Step.from_document(s) for s in doc["steps"]),
            lanes={name: Lane.from_document(lane) for name, lane in doc["lanes"].items()},
            sources=tuple(doc["sources"]),
            hitl=doc["hitl"],
            notes=tuple(doc["notes"]),
        )


def _from_dumps(sources: Sequence[str], naming: DoctorNaming) -> list[Step]:
    from beam_agents.replay.inputs.envelopes import load_envelopes

    try:
        index = load_envelopes(list(sources), None, replay_naming(naming))
    except ReplayRefused as refused:
        raise DoctorUsageError(refused.message) from None
    found: list[tuple[int, int, bytes, bytes]] = []
    for order, (_, raw) in enumerate(index.envelopes()):
        envelope = AgentEnvelope.FromString(raw)
        if envelope.WhichOneof("body") == "export_request":
            continue
        found.append((envelope.event_time_ms, order, envelope.entity_key, raw))
    found.sort(key=lambda item: (item[0], item[1]))
    where = ", ".join(sources)
    return [Step(key=key, envelope=raw, where=where) for _, _, key, raw in found]


def _bundle_files(sources: Sequence[str], naming: DoctorNaming) -> list[str]:
    files: list[str] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(str(p) for p in path.glob("*.bundle") if p.is_file())
            if not found:
                raise DoctorUsageError(
                    f"{naming.given(DoctorInput.BUNDLE, source)} is a directory with no *.bundle "
                    "file; pass bundle files (beam-agents-replay bundle writes them)"
                )
            files.extend(found)
        elif not path.exists():
            raise DoctorUsageError(
                f"{naming.given(DoctorInput.BUNDLE, source)}: no such file or directory"
            )
        else:
            files.append(str(path))
    return files


@dataclass
class _FromBundles:
    steps: list[Step] = field(default_factory=list)
    lanes: dict[str, Lane] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)


def _from_bundles(sources: Sequence[str], naming: DoctorNaming) -> _FromBundles:
    from beam_agents._protos import TraceEvent
    from beam_agents.activation import envelope_digest
    from beam_agents.key_state import dump_key_state
    from beam_agents.replay.incidents.bundle import load_bundle
    from beam_agents.replay.inputs.traces import scan_traces
    from beam_agents.replay.reconstruct.plan import plan_replay
    from beam_agents.trace_view import ActivationStart

    found = _FromBundles()
    seen: dict[tuple[bytes, ...], str] = {}
    words = replay_naming(naming)
    for path in _bundle_files(sources, naming):
        try:
            bundle = load_bundle(path)
        except ReplayRefused as refused:
            raise DoctorUsageError(refused.message) from None
        message = bundle.message
        identity = (message.entity_key, repr(tuple(message.seqs)).encode(), message.snapshot,
                    *message.envelopes)  # fmt: skip
        if identity in seen:
            found.notes.append(
                f"bundle {path} holds the same activations, snapshot and envelopes as "
                f"{seen[identity]}: read once"
            )
            continue
        seen[identity] = path
        envelopes: dict[tuple[str, str], bytes] = {}
        for raw in message.envelopes:
            envelope = AgentEnvelope.FromString(raw)
            envelopes[(envelope.envelope_id, envelope_digest(envelope))] = raw
        first: dict[int, TraceEvent] = {}
        for data in message.trace_events:
            event = TraceEvent.FromString(data)
            if event.index == 0:
                first[event.seq] = event
        key = bundle.entity_key
        seqs = bundle.seqs
        starts = {seq: ActivationStart.of(first[seq]) for seq in seqs}
        opening = starts[seqs[0]]
        # The key as replay reconstructs it just before the bundle's first activation.
        assert bundle.loaded_snapshot is not None  # load_bundle loads it to check it
        snapshot, state, _ = bundle.loaded_snapshot
        traces = b"".join(frame(data) for data in message.trace_events)
        try:
            traced = scan_traces((traces,), key, seq=seqs[0], naming=words)
            trigger = (
                None
                if opening.is_timeout
                else AgentEnvelope.FromString(envelopes[opening.envelope])
            )
            plan = plan_replay(snapshot, state, traced, trigger, seqs[0], words)
            cells = dump_key_state(plan.state)
        except ReplayRefused as refused:
            found.notes.append(
                f"bundle {path} left out: the state before its first activation (seq "
                f"{seqs[0]}) cannot be rebuilt ({refused.message})"
            )
            continue
        lane = f"{key.hex()}@{path}"
        cont = plan.state.continuation
        found.lanes[lane] = Lane(
            key=key,
            seq=seqs[0] - 1,
            cells={name: getattr(cells, name).hex() for name in _CELL_NAMES},
            timer_ms=cont.deadline_ms if cont is not None else None,
            provider=traced.provider,
        )
        policy = policy_document(bundle.hitl)
        found.policies[repr(sorted(policy.items()))] = policy
        for seq in seqs:
            start = starts[seq]
            where = f"{path} seq {seq}"
            if start.is_timeout:
                found.steps.append(Step(key=key, lane=lane, timeout=True, where=where))
            else:
                found.steps.append(
                    Step(key=key, lane=lane, envelope=envelopes[start.envelope], where=where)
                )
    return found


_CELL_NAMES = ("memory", "llm_cache", "continuation", "pending", "resume_history", "tool_cache")
"""The ``StateCells`` a lane's start carries."""


def _refuse_step(name: str, number: int, what: str) -> DoctorUsageError:
    return DoctorUsageError(
        f"{name} step {number}: {what}",
        "each step names a key and one of event, approval, tool_result or timeout "
        "(docs/doctor.md, \"A script of envelopes\")",
    )


def _payload(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def parse_script(document: Any, name: str = "the script") -> list[Step]:
    """The steps of a script (see docs/doctor.md, "A script of envelopes").

    Raises:
        DoctorUsageError: Not a script, naming the step and what is wrong with it.
    """
    from beam_agents.testing import event_envelope

    if isinstance(document, list):
        document = {"steps": document}
    if not isinstance(document, dict) or not isinstance(document.get("steps"), list):
        raise DoctorUsageError(
            f"{name} is not a doctor script: it must be a JSON object with a \"steps\" list "
            "(or the list itself)",
            "see docs/doctor.md, \"A script of envelopes\"",
        )
    start = document.get("start_ms", DEFAULT_START_MS)
    if not isinstance(start, int) or isinstance(start, bool):
        raise DoctorUsageError(f"{name}: start_ms must be an integer (ms since the epoch)")
    now = start - SCRIPT_STEP_MS
    steps: list[Step] = []
    kinds = ("event", "approval", "tool_result", "timeout")
    for number, item in enumerate(document["steps"], start=1):
        if not isinstance(item, dict):
            raise _refuse_step(name, number, f"is a {type(item).__name__}, not an object")
        unknown = sorted(
            set(item) - {*kinds, "key", "key_hex", "payload", "attributes", "at_ms", "after_ms",
                         "id", "approver", "reason", "error", "intent"}
        )  # fmt: skip
        if unknown:
            raise _refuse_step(name, number, f"has unknown field(s) {', '.join(unknown)}")
        if "key_hex" in item:
            try:
                key = bytes.fromhex(str(item["key_hex"]))
            except ValueError:
                raise _refuse_step(name, number, "key_hex is not hex") from None
        elif isinstance(item.get("key"), str) and item["key"]:
            key = item["key"].encode("utf-8")
        else:
            raise _refuse_step(name, number, "names no key (\"key\": \"customer-1\")")
        given = [k for k in kinds if k in item]
        if len(given) != 1:
            raise _refuse_step(
                name, number, f"must have exactly one of {', '.join(kinds)} (it has {len(given)})"
            )
        kind = given[0]
        for field_name in ("at_ms", "after_ms"):
            value = item.get(field_name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise _refuse_step(name, number, f"{field_name} must be an integer")
        if "at_ms" in item:
            now = item["at_ms"]
        else:
            now += item.get("after_ms", SCRIPT_STEP_MS)
        where = f"{name} step {number}"
        envelope_id = item.get("id")
        if envelope_id is not None and not isinstance(envelope_id, str):
            raise _refuse_step(name, number, "id must be a string")
        if kind == "timeout":
            if item["timeout"] is not True:
                raise _refuse_step(name, number, "timeout must be true")
            steps.append(Step(key=key, timeout=True, where=where))
            continue
        if kind == "event":
            if not isinstance(item["event"], str) or not item["event"]:
                raise _refuse_step(name, number, "event must be the event's type, a string")
            attributes = item.get("attributes") or {}
            if not isinstance(attributes, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
            ):
                raise _refuse_step(name, number, "attributes must map strings to strings")
            envelope = event_envelope(
                key,
                item["event"],
                _payload(item.get("payload")),
                time_ms=now,
                envelope_id=envelope_id,
                attributes=attributes,
            )
            steps.append(Step(key=key, envelope=envelope.SerializeToString(), where=where))
            continue
        answer: dict[str, Any] = {"kind": kind, "time_ms": now, "id": envelope_id}
        intent = item.get("intent")
        if intent is not None and not isinstance(intent, str):
            raise _refuse_step(name, number, "intent must be an intent id (a string)")
        answer["intent"] = intent
        if kind == "approval":
            if not isinstance(item["approval"], bool):
                raise _refuse_step(name, number, "approval must be true or false")
            answer.update(
                approved=item["approval"],
                approver=str(item.get("approver", "")),
                reason=str(item.get("reason", "")),
            )
        else:
            status = item["tool_result"]
            if status not in _STATUSES:
                raise _refuse_step(
                    name, number, f"tool_result must be one of {', '.join(_STATUSES)}"
                )
            answer.update(
                status=_STATUSES[status],
                payload=_payload(item.get("payload")).hex(),
                error=str(item.get("error", "")),
            )
        steps.append(Step(key=key, answer=answer, where=where))
    if not steps:
        raise DoctorUsageError(f"{name} has no steps", "a script needs at least one event")
    return steps


def _from_script(source: str | os.PathLike[str] | dict[str, Any] | list[Any], naming: DoctorNaming) -> list[Step]:
    if isinstance(source, (dict, list)):
        return parse_script(source, naming.name(DoctorInput.SCRIPT))
    path = Path(source)
    shown = naming.given(DoctorInput.SCRIPT, source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DoctorUsageError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise DoctorUsageError(f"{shown} is not UTF-8 text (a doctor script is JSON)") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise DoctorUsageError(f"{shown} is not JSON: {exc}", "a doctor script is a JSON document (docs/doctor.md)") from None
    return parse_script(document, str(source))


def _from_envelopes(envelopes: Iterable[Any], naming: DoctorNaming) -> list[Step]:
    steps: list[Step] = []
    for number, item in enumerate(envelopes, start=1):
        if isinstance(item, AgentEnvelope):
            raw = item.SerializeToString()
        elif isinstance(item, (bytes, bytearray)):
            raw = bytes(item)
        else:
            raise DoctorUsageError(
                f"{naming.name(DoctorInput.ENVELOPES)} item {number} is a {type(item).__name__}, "
                "not an AgentEnvelope or its bytes"
            )
        try:
            envelope = AgentEnvelope.FromString(raw)
        except DecodeError:
            raise DoctorUsageError(
                f"{naming.name(DoctorInput.ENVELOPES)} item {number} does not parse as an "
                "AgentEnvelope"
            ) from None
        if not envelope.entity_key or envelope.WhichOneof("body") is None:
            raise DoctorUsageError(
                f"{naming.name(DoctorInput.ENVELOPES)} item {number} has no entity_key or no body"
            )
        if envelope.WhichOneof("body") == "export_request":
            continue
        steps.append(Step(key=envelope.entity_key, envelope=raw, where=f"envelope {number}"))
    return steps


def load_samples(
    *,
    events: Sequence[str] = (),
    bundles: Sequence[str] = (),
    script: Any = None,
    envelopes: Iterable[Any] = (),
    naming: DoctorNaming,
) -> Samples:
    """Every sample input as steps (see the module docstring).

    Raises:
        DoctorUsageError: A source that is missing or not what it should be, or no sample.
    """
    steps: list[Step] = []
    lanes: dict[str, Lane] = {}
    notes: list[str] = []
    hitl: dict[str, Any] | None = None
    sources: list[str] = []
    if events:
        steps += _from_dumps(events, naming)
        sources += [naming.given(DoctorInput.EVENTS, e) for e in events]
    if bundles:
        from_bundles = _from_bundles(bundles, naming)
        steps += from_bundles.steps
        lanes.update(from_bundles.lanes)
        notes += from_bundles.notes
        sources += [naming.given(DoctorInput.BUNDLE, b) for b in bundles]
        policies = list(from_bundles.policies.values())
        if len(policies) > 1:
            notes.append(
                "the bundles recorded different HITL policies; the samples run on "
                f"{naming.name(DoctorInput.HITL)}'s (default: HitlPolicy())"
            )
        elif policies and policies[0] != policy_document(DEFAULT_HITL_POLICY):
            hitl = policies[0]
    if script is not None:
        steps += _from_script(script, naming)
        sources.append(
            naming.given(DoctorInput.SCRIPT, script if isinstance(script, (str, os.PathLike)) else "<given>")
        )
    given = list(envelopes)
    if given:
        steps += _from_envelopes(given, naming)
        sources.append(f"{len(given)} envelope(s)")
    if not steps:
        raise DoctorUsageError(
            "no sample input: nothing to run the agent on"
            + (" (the sources hold only export requests)" if sources else ""),
            f"pass {naming.name(DoctorInput.EVENTS)} with a dump of the events topic, "
            f"{naming.name(DoctorInput.BUNDLE)} with incident bundles, or "
            f"{naming.name(DoctorInput.SCRIPT)} with a script of envelopes",
        )
    return Samples(
        steps=tuple(steps), lanes=lanes, sources=tuple(sources), hitl=hitl, notes=tuple(notes)
    )


def policy_document(policy: HitlPolicy) -> dict[str, Any]:
    """A ``HitlPolicy`` as JSON data (``HitlPolicy(**document)`` makes it again)."""
    return {
        "intent_ttl_ms": policy.intent_ttl_ms,
        "hitl_timeout_ms": policy.hitl_timeout_ms,
        "approval_channel": policy.approval_channel,
        "approval_required_tools": sorted(policy.approval_required_tools),
    }
