"""The doctor's sample inputs: topic dumps, incident bundles, a script, or envelopes.

Every source becomes ``Step``s, one input of one key each, in the order the
pipeline's per-key step is handed them:

- ``--events DUMP|DIR`` (as replay reads it: an envelope stream, one envelope, or a
  directory of ``*.pb``): every envelope of every key, in event-time order (ties in
  reading order); export requests are left out (they run nothing). The HITL answers
  (``tool_result``, ``approval``) are in the dump of the results and approvals topics,
  as ``bundle`` takes them, and find their intents by id.
- ``--bundle FILE|DIR``: each bundle's envelopes in the order of its traced
  activations (a traced HITL timeout is the key's timer firing); its key starts at
  the bundle's first seq, so intent ids (derived from key, seq and ordinal) are the
  ones its answers name.
- ``--script FILE``: a JSON document of steps written by hand (``parse_script``).
- ``envelopes=`` (Python): ``AgentEnvelope`` messages or their bytes, in order.

``Samples`` holds the steps and where each key's SEQ starts.
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
from beam_agents.doctor.refusal import DoctorInput, DoctorNaming, DoctorUsageError, replay_naming
from beam_agents.replay.refusal import ReplayRefused

__all__ = [
    "DEFAULT_START_MS",
    "SCRIPT_STEP_MS",
    "Samples",
    "Step",
    "load_samples",
    "parse_script",
]

DEFAULT_START_MS = 1_734_000_000_000
"""A script's first step's event time when it names none (2024-12-12 10:40 UTC)."""
SCRIPT_STEP_MS = 60_000
"""How much later a script step is than the one before when it says neither ``at_ms`` nor
``after_ms``."""

_STATUSES = {"OK": ToolResult.OK, "ERROR": ToolResult.ERROR, "REJECTED": ToolResult.REJECTED,
             "EXPIRED": ToolResult.EXPIRED}  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One input of one key: an envelope, the key's HITL timer firing, or a script's answer
    to an intent the key has staged (its envelope is made when that intent is known)."""

    key: bytes
    envelope: bytes = b""
    """A serialized ``AgentEnvelope`` (empty for a timer firing or an answer)."""
    timeout: bool = False
    """Fire the key's HITL timer (a traced timeout, or a script's ``timeout``)."""
    answer: dict[str, Any] | None = None
    """A script's ``approval``/``tool_result`` without its intent id: ``kind``, ``time_ms``,
    the fields, and ``intent`` when the script named it."""
    where: str = ""
    """Where it comes from, for notes (``samples.json step 3``, ``dump.pb``)."""

    def document(self) -> dict[str, Any]:
        return {
            "key": self.key.hex(),
            "envelope": self.envelope.hex(),
            "timeout": self.timeout,
            "answer": self.answer,
            "where": self.where,
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Step:
        return cls(
            key=bytes.fromhex(doc["key"]),
            envelope=bytes.fromhex(doc["envelope"]),
            timeout=bool(doc["timeout"]),
            answer=doc["answer"],
            where=doc["where"],
        )


@dataclass(frozen=True)
class Samples:
    steps: tuple[Step, ...]
    start_seqs: dict[str, int] = field(default_factory=dict)
    """Key (hex) -> the SEQ its key starts at (0: a new key; a bundle's first seq - 1)."""
    sources: tuple[str, ...] = ()
    """What was read, for the report's header."""

    def document(self) -> dict[str, Any]:
        return {
            "steps": [s.document() for s in self.steps],
            "start_seqs": self.start_seqs,
            "sources": list(self.sources),
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Samples:
        return cls(
            steps=tuple(Step.from_document(s) for s in doc["steps"]),
            start_seqs={k: int(v) for k, v in doc["start_seqs"].items()},
            sources=tuple(doc["sources"]),
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


def _from_bundles(sources: Sequence[str], naming: DoctorNaming) -> tuple[list[Step], dict[str, int]]:
    from beam_agents._protos import TraceEvent
    from beam_agents.activation import envelope_digest
    from beam_agents.replay.incidents.bundle import load_bundle
    from beam_agents.trace_view import ActivationStart

    steps: list[Step] = []
    starts: dict[str, int] = {}
    for path in _bundle_files(sources, naming):
        try:
            bundle = load_bundle(path)
        except ReplayRefused as refused:
            raise DoctorUsageError(refused.message) from None
        message = bundle.message
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
        starts.setdefault(key.hex(), max(0, bundle.seqs[0] - 1))
        for seq in bundle.seqs:
            start = ActivationStart.of(first[seq])
            where = f"{path} seq {seq}"
            if start.is_timeout:
                steps.append(Step(key=key, timeout=True, where=where))
            else:
                steps.append(Step(key=key, envelope=envelopes[start.envelope], where=where))
    return steps, starts


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
    starts: dict[str, int] = {}
    sources: list[str] = []
    if events:
        steps += _from_dumps(events, naming)
        sources += [naming.given(DoctorInput.EVENTS, e) for e in events]
    if bundles:
        from_bundles, starts = _from_bundles(bundles, naming)
        steps += from_bundles
        sources += [naming.given(DoctorInput.BUNDLE, b) for b in bundles]
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
    return Samples(steps=tuple(steps), start_seqs=starts, sources=tuple(sources))
