"""The snapshot: read, parsed, version-checked and migrated in memory (never written back).

Every failure is an ``InputError`` (exit 2: unreadable, not a snapshot, a corrupt
blob, newer than this package) or a ``CannotReproduce`` (exit 3: a blob with no
migration path), naming the snapshot as the caller's ``Naming`` names it.

Memory follows the snapshot's size, not the number of things it holds: a parsed
element costs hundreds of bytes however few it takes on the wire (two bytes for an
empty pending intent: a 4 MB snapshot of them took 1.29 GB, a 40 MB one crashed the
parser). So before anything is parsed the wire is counted (``COUNT_CAPS``: pending
intents, resume records, cache and tool-cache entries), and a snapshot over a cap is
refused naming it. Pending intents must have distinct, non-empty ids (the pipeline
derives each one from the key, the seq and an ordinal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from beam_agents._protos import StateSnapshot
from beam_agents._wire import message_fields
from beam_agents.errors import (
    BlobTooNewError,
    CorruptBlobError,
    MigrationGapError,
    StateError,
)
from beam_agents.key_state import KeyState, load_snapshot_for_replay
from beam_agents.key_state import load_snapshot_message as load_snapshot_message_state
from beam_agents.replay.inputs.sources import describe_source, read_source_mutable
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.tool_cache import MAX_TOOL_CACHE_ENTRIES

__all__ = ["COUNT_CAPS", "LoadedSnapshot", "load_snapshot_message", "load_snapshot_source"]

COUNT_CAPS: dict[str, int] = {
    "pending intents": 10_000,
    "resume records": 1_000,
    "replay-cache entries": 10_000,
    "tool-cache entries": 2 * MAX_TOOL_CACHE_ENTRIES,
}
"""The most of each a snapshot may hold (checked on the wire, before parsing). A pipeline
keeps 8 resume records, 64 cache entries by default and at most 10,000 tool-cache
entries (twice that passes the wire count, so the tool cache's own check names the
policy's bound); a key with thousands of pending intents is a runaway agent, not an incident
to replay."""

_FIELD = {"pending": 8, "resumed_from": 10, "llm_cache": 6, "tool_cache": 13}
_RESUME_PENDING = 3  # ResumeRecord.pending
_BLOB_BODY = 3  # VersionedBlob.body
_BODY_ENTRIES = 1  # LlmCacheBody.entries, ToolCacheBody.entries


def _over_caps(data: bytes | bytearray) -> tuple[str, int] | None:
    """The first count of ``COUNT_CAPS`` the snapshot's wire exceeds, and its count so far.

    Every count stops at its cap, so the walk itself is bounded by the caps, not by how
    many elements the wire holds. Pending intents count those of the resume records too
    (each holds the intents it left pending)."""
    with memoryview(data) as view:
        return _count_over_caps(view)


def _fields(data: memoryview) -> Iterator[tuple[int, int, int]]:
    """``(number, start, end)`` of each length-delimited field of ``data`` (the messages
    counted: a scalar under one of their numbers fails the parse anyway)."""
    for number, wire_type, start, end in message_fields(data):
        if wire_type == 2:
            yield number, start, end


def _count_over_caps(view: memoryview) -> tuple[str, int] | None:
    counts = dict.fromkeys(COUNT_CAPS, 0)

    def add(what: str, n: int = 1) -> bool:
        counts[what] += n
        return counts[what] > COUNT_CAPS[what]

    for number, start, end in _fields(view):
        if number == _FIELD["pending"]:
            if add("pending intents"):
                return "pending intents", counts["pending intents"]
        elif number == _FIELD["resumed_from"]:
            if add("resume records"):
                return "resume records", counts["resume records"]
            for inner, _, _ in _fields(view[start:end]):
                if inner == _RESUME_PENDING and add("pending intents"):
                    return "pending intents", counts["pending intents"]
        elif number in (_FIELD["llm_cache"], _FIELD["tool_cache"]):
            what = "replay-cache entries" if number == _FIELD["llm_cache"] else "tool-cache entries"
            blob = view[start:end]
            for inner, body_start, body_end in _fields(blob):
                if inner != _BLOB_BODY:
                    continue
                for entry, _, _ in _fields(blob[body_start:body_end]):
                    if entry == _BODY_ENTRIES and add(what):
                        return what, counts[what]
    return None


LoadedSnapshot = tuple[StateSnapshot, KeyState, dict[str, int]]
"""``(snapshot, key state at the current layouts, stored version of each blob)``."""


def load_snapshot_source(source: Source, naming: Naming = REPLAYER) -> LoadedSnapshot:
    """Read, parse, version-check and migrate (in memory) the snapshot file (or bytes).

    Raises:
        InputError: Unreadable, not a snapshot, a corrupt blob, or newer than this package.
        CannotReproduce: A blob has no migration path to the current version.
    """
    given = naming.given(Input.SNAPSHOT, describe_source(source))
    # A bytearray, which the loader empties once it has copied the cache bodies out:
    # the file's bytes are not held alongside the parsed cache (issue 14: memory).
    data = read_source_mutable(source, Input.SNAPSHOT, naming)
    _refuse_over_caps(data, given)
    # The snapshot comes without its two cache blobs: the state holds them parsed, and
    # nothing reads the stored bytes again (issue 14: memory ~ the snapshot's size).
    return _checked(given, lambda: load_snapshot_for_replay(data))


def _refuse_over_caps(data: bytes | bytearray, given: str) -> None:
    over = _over_caps(data)
    if over is not None:
        what, _count = over
        raise InputError(
            f"{given} holds more than {COUNT_CAPS[what]} {what} (counted on the wire): it was "
            "refused before anything was parsed",
            "a pipeline's snapshot holds far fewer; pass the snapshot sink's message value, "
            "byte for byte",
        )


def load_snapshot_message(snapshot: StateSnapshot, naming: Naming = REPLAYER) -> LoadedSnapshot:
    """``load_snapshot_source`` of a parsed snapshot (``Replayer``'s): its blobs
    version-checked and migrated in memory, the message itself only read, never
    serialized to be parsed again.

    Raises:
        As ``load_snapshot_source``.
    """
    given = naming.given(Input.SNAPSHOT, f"<{snapshot.ByteSize()} bytes>")

    def load() -> LoadedSnapshot:
        state, versions = load_snapshot_message_state(snapshot)
        return snapshot, state, versions

    return _checked(given, load)


def _check_pending_ids(given: str, state: KeyState) -> None:
    """Pending intents with distinct, non-empty ids, as the pipeline derives them."""
    seen: set[str] = set()
    for intent in state.pending:
        if not intent.intent_id:
            raise InputError(
                f"{given} holds a pending intent with an empty intent_id (tool "
                f"{intent.tool[:80]!r})",
                "the pipeline derives every intent id from the key, the seq and an ordinal; pass "
                "the snapshot sink's message value, byte for byte",
            )
        if intent.intent_id in seen:
            raise InputError(
                f"{given} holds two pending intents with intent_id {intent.intent_id[:80]!r}",
                "an intent id is unique (the key, the seq and an ordinal); pass the snapshot "
                "sink's message value, byte for byte",
            )
        seen.add(intent.intent_id)


def _check_provenance(snapshot_seq: int, state: KeyState) -> None:
    """Refuse a memory provenance naming a seq after the snapshot's own: no activation after
    the export had run when the key was exported, so no writer records one. Trusting it,
    replay would name that seq as the one that rewrote a key (and judge a read by it).

    Raises:
        CorruptBlobError: That seq, the key and what it says of it.
    """
    provenance = state.memory_provenance
    if provenance.since is not None and provenance.since > snapshot_seq:
        raise CorruptBlobError(
            "memory",
            f"its provenance records writes from seq {provenance.since} on, after the "
            f"snapshot's seq {snapshot_seq}: no writer records a seq its key has not reached",
        )
    for what, seqs in (("wrote", provenance.written), ("deleted", provenance.deleted)):
        late = [(seq, key) for key, seq in seqs.items() if seq > snapshot_seq]
        if late:
            seq, key = max(late)
            more = f" (and {len(late) - 1} more key(s) like it)" if len(late) > 1 else ""
            raise CorruptBlobError(
                "memory",
                f"its provenance says seq {seq} last {what} {key[:60]!r}, after the snapshot's "
                f"seq {snapshot_seq}{more}: no writer records a seq its key has not reached",
            )


def _checked(given: str, load: Callable[[], LoadedSnapshot]) -> LoadedSnapshot:
    """``load()``, its errors refused naming the snapshot as ``given``."""
    try:
        snapshot, state, versions = load()
        state.tool_cache.check_keys()
        _check_pending_ids(given, state)
        _check_provenance(snapshot.seq, state)
    except BlobTooNewError as exc:
        raise InputError(f"{given}: {exc}") from None
    except MigrationGapError as exc:
        raise CannotReproduce(
            f"{given}: migration gap: {exc}",
            "replay migrates old blobs with the same migrations the pipeline uses, and this "
            "version has none for that step",
        ) from None
    except CorruptBlobError as exc:
        what = (
            "is not a serialized StateSnapshot"
            if exc.kind == "snapshot"
            else f"holds a corrupt {exc.kind} blob"
        )
        raise InputError(
            f"{given} {what}: {exc.detail}",
            "pass the snapshot sink's message value (one StateSnapshot), byte for byte",
        ) from None
    except StateError as exc:
        raise InputError(f"{given} cannot be used: {exc}") from None
    return snapshot, state, versions
