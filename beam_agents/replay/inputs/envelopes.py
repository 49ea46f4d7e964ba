"""The triggering envelope: one file (``--event``), or picked out of topic dumps (``--events``).

``load_event_source`` reads one serialized ``AgentEnvelope`` (refusing one with no
body). ``--events`` finds it in a dump instead. A consumer dump of the events, results and approvals topics becomes a
*envelope stream*: frames of ``varint(len) + AgentEnvelope bytes``, the framing
trace streams use. ``--events`` takes such a stream, or a directory whose
``*.pb`` files are each either a stream or one serialized envelope (what
``make demo`` writes: ``events/<envelope_id>.pb``). The flag may be repeated.

The traced ``ACTIVATION_START`` names the triggering envelope by id and by the
sha256 of its deterministic serialization (``envelope_digest``), so picking it
out of a dump is exact: the id finds the candidates, the digest proves one of
them is the traced bytes. An id that is absent, or present only with other
bytes, is refused (exit 2) naming the id: replaying a look-alike would judge
another input.

Only the wanted key's envelopes are kept (a dump may hold every key of the
topic), as raw bytes; an exact duplicate (at-least-once delivery) is kept once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from beam_agents._protos import AgentEnvelope
from beam_agents._wire import BinaryWriter, write_frames
from beam_agents.activation import envelope_digest
from beam_agents.errors import TraceStreamError
from beam_agents.replay.inputs.sources import STDIN, describe_source, read_source
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import InputError
from beam_agents.trace_stream import iter_frames

__all__ = [
    "MAX_COPIES_PER_ID",
    "EnvelopeIndex",
    "load_envelopes",
    "load_event_message",
    "load_event_source",
    "read_envelope_file",
    "write_envelope_stream",
]


MAX_COPIES_PER_ID = 1000
"""Different contents one envelope id may have in the ``--events`` sources (exact repeats of
one, at-least-once delivery, are one)."""


def _advice(naming: Naming) -> str:
    return (
        f"{naming.name(Input.EVENTS)} takes a varint-delimited stream of AgentEnvelopes (a "
        "consumer dump of the events, results or approvals topic), or a directory of *.pb "
        "files each holding such a stream or one serialized envelope"
    )


@dataclass
class EnvelopeIndex:
    """The envelopes of one key found in the ``--events`` sources, by envelope id."""

    entity_key: bytes | None
    """The key kept (None: every key)."""
    by_id: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """Envelope id -> its distinct copies found, ``sha256 hex -> raw bytes``, in reading order
    (a dict: a dump of many copies of one id is read in time linear in its size)."""
    sources: list[str] = field(default_factory=list)
    """The files read, for messages."""
    naming: Naming = REPLAYER
    """How the caller named the inputs, for messages."""

    def add(self, raw: bytes, envelope: AgentEnvelope) -> None:
        """Keep ``envelope`` (its raw bytes) if it is of the index's key."""
        if self.entity_key is not None and envelope.entity_key != self.entity_key:
            return
        digest = envelope_digest(envelope)
        found = self.by_id.setdefault(envelope.envelope_id, {})
        if digest not in found:
            if len(found) >= MAX_COPIES_PER_ID:
                raise InputError(
                    f"{self.naming.about(Input.EVENTS)} envelope_id {envelope.envelope_id[:80]!r} "
                    f"is in the dump with more than {MAX_COPIES_PER_ID} different contents",
                    "a topic carries one envelope per id (at-least-once delivery repeats the "
                    "same bytes); dump the topic the pipeline read, not one where something "
                    "rewrote it",
                )
            found[digest] = raw

    def find(self, envelope_id: str, sha256: str, *, seq: int) -> bytes:
        """The raw bytes of the envelope ``envelope_id`` whose digest is ``sha256``.

        Raises:
            InputError: No envelope has that id, or none under it has the traced digest.
        """
        found = self.by_id.get(envelope_id)
        naming = self.naming
        where = _some(self.sources, "file") or f"the {naming.name(Input.EVENTS)} sources"
        if not found:
            raise InputError(
                f"{naming.about(Input.EVENTS)} the activation at seq {seq} was triggered by "
                f"envelope_id {envelope_id!r}, which is not in {where}",
                "dump the topic the envelope was published to (events, results or approvals) "
                f"over the activation's time, or pass the envelope itself with "
                f"{naming.name(Input.EVENT)}",
            )
        raw = found.get(sha256)
        if raw is not None:
            return raw
        shown = _some(list(found), "copy")
        raise InputError(
            f"{naming.about(Input.EVENTS)} envelope_id {envelope_id!r} (seq {seq}) is in {where}, but with other "
            f"bytes: sha256 {shown}, the traced one is {sha256}",
            "the dump holds an edited or re-encoded copy, or another pipeline's envelope under "
            "the same id; replay only the bytes that were on the topic",
        )

    def envelopes(self) -> Iterator[tuple[str, bytes]]:
        """Every ``(envelope id, raw bytes)`` kept."""
        for envelope_id, found in self.by_id.items():
            for raw in found.values():
                yield envelope_id, raw


def _some(items: Sequence[str], noun: str, limit: int = 3) -> str:
    """The first ``limit`` items and a count of the rest: a message stays one paragraph."""
    shown = ", ".join(items[:limit])
    rest = len(items) - limit
    plural = {"copy": "copies"}.get(noun, noun + "s") if rest > 1 else noun
    return f"{shown} and {rest} more {plural}" if rest > 0 else shown


def _files(source: Source, naming: Naming) -> list[tuple[str, Source]]:
    if isinstance(source, bytes):
        return [(describe_source(source), source)]
    if os.fspath(source) == STDIN:
        raise InputError(
            f"{naming.name(Input.EVENTS)} cannot be - (standard input): it reads topic dumps "
            "from files",
            "save the dump to a file and name that, or give the one triggering envelope as "
            f"{naming.given(Input.EVENT, '-')} instead",
        )
    path = Path(os.fspath(source))
    if path.is_dir():
        files = sorted((f for f in path.glob("*.pb") if f.is_file()), key=lambda f: f.name)
        if not files:
            raise InputError(
                f"{naming.given(Input.EVENTS, path)} is a directory with no *.pb files",
                _advice(naming),
            )
        return [(str(f), f) for f in files]
    if not path.exists():
        raise InputError(
            f"{naming.given(Input.EVENTS, path)}: no such file or directory", _advice(naming)
        )
    if not path.is_file():
        raise InputError(
            f"{naming.given(Input.EVENTS, path)} is not a regular file", _advice(naming)
        )
    return [(str(path), path)]


def _parse_envelope(data: bytes) -> AgentEnvelope | None:
    envelope = AgentEnvelope()
    try:
        envelope.ParseFromString(data)
    except DecodeError:
        return None
    if envelope.WhichOneof("body") is None:
        return None
    return envelope


_MAX_SINGLE_ENVELOPE_BYTES = 64 * 1024 * 1024


def read_envelope_file(
    name: str, source: Path | bytes, naming: Naming = REPLAYER
) -> Iterator[tuple[bytes, AgentEnvelope]]:
    """The envelopes of one file of the events dump: a stream of frames, else one envelope.

    A file is a stream when it splits into frames end to end and every frame is
    an envelope with a body; otherwise it must be one such envelope. (One
    serialized envelope almost never splits that way: its first frame would start
    inside the key bytes.) A stream is read in chunks, so a large dump is never
    held in memory; only the kept envelopes are.

    Raises:
        InputError: Neither, naming the file and where the stream reading failed.
    """
    stream_error = ""
    count = 0
    try:
        for offset, frame in iter_frames(source):
            envelope = _parse_envelope(frame)
            if envelope is None:
                stream_error = (
                    f"the frame at byte offset {offset} ({len(frame)} bytes) is not an "
                    "AgentEnvelope with a body"
                )
                break
            if count == 0:
                first = (frame, envelope)
            elif count == 1:
                yield first
                yield frame, envelope
            else:
                yield frame, envelope
            count += 1
    except TraceStreamError as exc:
        stream_error = str(exc).removeprefix(f"{exc.source}: ")
    if not stream_error:
        if count == 0:
            raise InputError(f"{naming.given(Input.EVENTS, name)} is empty", _advice(naming))
        if count == 1:
            yield first
        return
    if count > 1:
        raise InputError(
            f"{naming.given(Input.EVENTS, name)} is an envelope stream that breaks after {count} "
            f"envelopes: {stream_error}",
            _advice(naming),
        )
    data = source if isinstance(source, bytes) else _read_small(name, source, naming)
    single = _parse_envelope(data)
    if single is not None:
        yield data, single
        return
    raise InputError(
        f"{naming.given(Input.EVENTS, name)} ({len(data)} bytes) is neither an envelope stream "
        f"({stream_error}) nor one serialized AgentEnvelope",
        _advice(naming),
    )


def _read_small(name: str, path: Path, naming: Naming) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_SINGLE_ENVELOPE_BYTES + 1)
    except OSError as exc:
        raise InputError(
            f"cannot read {naming.given(Input.EVENTS, name)}: {exc.strerror or exc}",
            _advice(naming),
        ) from None
    if len(data) > _MAX_SINGLE_ENVELOPE_BYTES:
        raise InputError(
            f"{naming.given(Input.EVENTS, name)} is not an envelope stream and too large to be "
            "one envelope",
            _advice(naming),
        )
    return data


def load_envelopes(
    sources: Sequence[Source], entity_key: bytes | None, naming: Naming = REPLAYER
) -> EnvelopeIndex:
    """Index the envelopes of ``entity_key`` in the events dump's sources.

    Args:
        sources: Files, directories, or stream bytes.
        entity_key: Keep this key's envelopes only (None: all).
        naming: How the caller named the inputs (for the messages).

    Raises:
        InputError: A source is missing, unreadable, or not envelopes.
    """
    index = EnvelopeIndex(entity_key=entity_key, naming=naming)
    for source in sources:
        for name, item in _files(source, naming):
            index.sources.append(name)
            data: Path | bytes = item if isinstance(item, bytes) else Path(os.fspath(item))
            for raw, envelope in read_envelope_file(name, data, naming):
                index.add(raw, envelope)
    return index


def write_envelope_stream(out: BinaryWriter, envelopes: Iterable[bytes]) -> None:
    """Write serialized envelopes as an envelope stream (``varint(len) + bytes`` frames)."""
    write_frames(out, envelopes)


def load_event_source(source: Source, naming: Naming = REPLAYER) -> AgentEnvelope:
    """Read and parse the event file (one serialized ``AgentEnvelope``, or its bytes).

    Raises:
        InputError: Unreadable, not an envelope, or an envelope with no body.
    """
    given = naming.given(Input.EVENT, describe_source(source))
    data = read_source(source, Input.EVENT, naming)
    try:
        envelope = AgentEnvelope.FromString(data)
    except DecodeError as exc:
        raise InputError(
            f"{given} is not a serialized AgentEnvelope ({len(data)} bytes: {exc})",
            "pass the envelope's bytes exactly as they were on the events topic",
        ) from None
    return _with_body(envelope, given, len(data))


def load_event_message(envelope: AgentEnvelope, naming: Naming = REPLAYER) -> AgentEnvelope:
    """``load_event_source`` of a parsed envelope (``Replayer``'s): a copy of it (agent code
    gets the event, and must not change the caller's), never serialized to be parsed again.

    Raises:
        InputError: An envelope with no body.
    """
    size = envelope.ByteSize()
    copy = AgentEnvelope()
    copy.CopyFrom(envelope)
    return _with_body(copy, naming.given(Input.EVENT, f"<{size} bytes>"), size)


def _with_body(envelope: AgentEnvelope, given: str, size: int) -> AgentEnvelope:
    if envelope.WhichOneof("body") is None:
        raise InputError(
            f"{given} holds an AgentEnvelope with no body ({size} bytes)",
            "it must carry the event, tool_result or approval that triggered the activation",
        )
    return envelope
