"""A key's state in its three forms: the DoFn's cells, the in-memory state, and a snapshot.

This is the one conversion between them, used by the DoFn and by replay alike
(docs/index.md, "How the code is laid out", rule 1): ``load_key_state`` for an activation's pre-state,
``dump_key_state`` for its commit, ``make_snapshot`` for an export request,
``load_snapshot`` for replay. Loading version-checks and migrates every blob in
memory; nothing is ever written back by a load (invariant 5). An export copies
the committed blobs exactly as the cells hold them, old versions included, and
replay migrates them with the same code the DoFn would (invariant 2: exports are
read-only and re-encode nothing).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._protos import (
    AgentBuild,
    Continuation,
    PendingIntents,
    ResumeHistory,
    ResumeRecord,
    StateSnapshot,
    ToolIntent,
)
from beam_agents.blobs import (
    LARGE_CELL_BYTES,
    Buffer,
    blob_version,
    dump_continuation,
    dump_llm_cache,
    dump_pending,
    dump_resume_history,
    dump_tool_cache,
    encode_memory,
    load_continuation,
    load_continuation_at,
    load_llm_cache,
    load_llm_cache_at,
    load_memory_cell,
    load_pending,
    load_pending_at,
    load_resume_history,
    load_resume_history_at,
    load_tool_cache,
    load_tool_cache_at,
    split_fields,
    unwrap_blob,
    unwrap_in_place,
)
from beam_agents.cache_memo import CacheMemo
from beam_agents.errors import BlobTooNewError, CorruptBlobError
from beam_agents.llm_cache import ReplayCache
from beam_agents.memory_writes import MemoryProvenance
from beam_agents.migrations import CURRENT_VERSIONS, STATE_SCHEMA_VERSION, parse_proto
from beam_agents.tool_cache import ToolCache


@dataclass(kw_only=True)
class KeyState:
    """The state of one key, in memory, at the current layout of every blob."""

    memory: dict[str, Any] = field(default_factory=dict)
    """Working memory: a JSON object."""
    memory_provenance: MemoryProvenance = field(default_factory=MemoryProvenance)
    """Which seq last wrote each memory key (kept in the memory blob; a new key's: none yet)."""
    cache: ReplayCache = field(default_factory=ReplayCache.empty)
    """The replay cache."""
    continuation: Continuation | None = None
    """What a suspended key needs to resume; None when not suspended."""
    pending: list[ToolIntent] = field(default_factory=list)
    """Pending intents, in order."""
    resume_history: list[ResumeRecord] = field(default_factory=list)
    """Continuations consumed by the latest resumes, newest last, at most 8."""
    tool_cache: ToolCache = field(default_factory=ToolCache.empty)
    """Recorded tool results (``@tool(recorded=True)``)."""
    migrations_applied: list[str] = field(default_factory=list)
    """Migration steps run while loading, e.g. ``["llm_cache v1→v2"]``, for reports."""


@dataclass(frozen=True, kw_only=True)
class StateCells:
    """The raw bytes of the DoFn's state cells (``b""`` is an empty cell)."""

    memory: bytes = b""
    """The ``memory`` blob."""
    llm_cache: bytes = b""
    """The ``llm_cache`` blob."""
    continuation: bytes = b""
    """The ``continuation`` blob; empty when the key is not suspended."""
    pending: bytes = b""
    """The ``pending`` blob."""
    resume_history: bytes = b""
    """The ``resume_history`` blob."""
    tool_cache: bytes = b""
    """The ``tool_cache`` blob; empty when the key has recorded no tool result."""


def load_key_state(cells: StateCells, memo: CacheMemo | None = None) -> KeyState:
    """The in-memory state of a key's cells: every blob version-checked and migrated in memory.

    ``memo``: the two cache cells come through it (``beam_agents.cache_memo``): bytes it
    remembers are not parsed again, and load to the same cache.

    Raises:
        CorruptBlobError: A cell does not hold what it claims to.
        BlobTooNewError: A cell is newer than this package.
        MigrationGapError: A cell has no migration path to the current version.
    """
    memory, provenance, memory_steps = load_memory_cell(cells.memory)
    # In this order (the first unreadable cell is the one an error names), memo or not.
    if memo is None:
        cache, cache_steps = load_llm_cache(cells.llm_cache)
    else:
        cache, cache_steps = memo.load("llm_cache", cells.llm_cache, load_llm_cache)
    continuation, continuation_steps = load_continuation(cells.continuation)
    pending, pending_steps = load_pending(cells.pending)
    history, history_steps = load_resume_history(cells.resume_history)
    if memo is None:
        tools, tool_steps = load_tool_cache(cells.tool_cache)
    else:
        tools, tool_steps = memo.load("tool_cache", cells.tool_cache, load_tool_cache)
    return KeyState(
        memory=memory,
        memory_provenance=provenance,
        cache=cache,
        continuation=continuation,
        pending=pending,
        resume_history=history,
        tool_cache=tools,
        migrations_applied=[
            *memory_steps,
            *cache_steps,
            *continuation_steps,
            *pending_steps,
            *history_steps,
            *tool_steps,
        ],
    )


def dump_key_state(
    state: KeyState, *, caches: bool = True, memory_cell: bytes | None = None
) -> StateCells:
    """The cells holding ``state``: every blob at its current version, deterministic bytes.

    Args:
        state: The state to dump.
        caches: False leaves the ``llm_cache`` and ``tool_cache`` cells empty instead
            of encoding the caches (for replay, which reads only the other cells).
        memory_cell: ``encode_memory(state.memory, state.memory_provenance).cell`` when
            the caller has it already (``run_activation`` digests the memory's JSON).

    Raises:
        MemoryValueError: ``state.memory`` holds a value that is not JSON.
    """
    if memory_cell is None:
        memory_cell = encode_memory(state.memory, state.memory_provenance).cell
    return StateCells(
        memory=memory_cell,
        llm_cache=dump_llm_cache(state.cache) if caches else b"",
        continuation=dump_continuation(state.continuation),
        pending=dump_pending(state.pending),
        resume_history=dump_resume_history(state.resume_history),
        tool_cache=dump_tool_cache(state.tool_cache) if caches else b"",
    )


def make_snapshot(
    cells: StateCells,
    *,
    entity_key: bytes,
    seq: int,
    snapshot_at_ms: int,
    request_id: str,
    agent_build: AgentBuild | None = None,
) -> StateSnapshot:
    """The ``StateSnapshot`` an export request answers with; reads the cells, changes nothing.

    ``memory``, ``llm_cache`` and ``tool_cache`` are the cells' bytes exactly. The continuation and
    the pending intents are parsed out of their blobs as stored, with their
    stamped versions (``continuation.schema_version``, ``pending_schema_version``);
    nothing is migrated, so an old-version cell is exported old and replay
    migrates it.

    Args:
        cells: The key's committed cells.
        entity_key: The key.
        seq: The key's SEQ counter at export.
        snapshot_at_ms: The export request envelope's ``event_time_ms``.
        request_id: Echoed from the export request.
        agent_build: The pipeline's agent build (``beam_agents.agent_build``), so replay can
            name skew; None leaves it unset.

    Raises:
        CorruptBlobError: The continuation, pending or resume-history cell does not
            parse, or a continuation's own version disagrees with its stamp.
        BlobTooNewError: The resume-history cell is newer than this package (a
            snapshot cannot stamp its version).
    """
    snapshot = StateSnapshot(
        state_schema_version=STATE_SCHEMA_VERSION,
        entity_key=entity_key,
        seq=seq,
        snapshot_at_ms=snapshot_at_ms,
        memory=cells.memory,
        llm_cache=cells.llm_cache,
        tool_cache=cells.tool_cache,
        request_id=request_id,
        pending_schema_version=CURRENT_VERSIONS["pending"],
    )
    if agent_build is not None:
        snapshot.agent_build.CopyFrom(agent_build)
    if cells.continuation:
        version, body = unwrap_blob("continuation", cells.continuation)
        continuation = parse_proto(Continuation, "continuation", body)
        if continuation.schema_version != version:
            raise CorruptBlobError(
                "continuation",
                f"its body says schema_version {continuation.schema_version}, "
                f"but it is stamped version {version}",
            )
        snapshot.continuation.CopyFrom(continuation)
    if cells.pending:
        version, body = unwrap_blob("pending", cells.pending)
        snapshot.pending.extend(parse_proto(PendingIntents, "pending", body).intents)
        snapshot.pending_schema_version = version
    if cells.resume_history:
        # Copied at the cell's own version, like every blob: an export rewrites nothing.
        version, body = unwrap_blob("resume_history", cells.resume_history)
        if version > CURRENT_VERSIONS["resume_history"]:
            raise BlobTooNewError("resume_history", version, CURRENT_VERSIONS["resume_history"])
        snapshot.resumed_from.extend(parse_proto(ResumeHistory, "resume_history", body).records)
        snapshot.resumed_from_schema_version = version
    return snapshot


def load_snapshot(data: bytes) -> tuple[StateSnapshot, KeyState]:
    """Parse a serialized ``StateSnapshot``, version-check it and migrate its blobs in memory.

    Args:
        data: The snapshot bytes (a snapshot sink's message value).

    Returns:
        ``(snapshot as parsed, the key's state at the current layouts)``.

    Raises:
        CorruptBlobError: ``data`` (kind ``"snapshot"``) or an embedded blob does not
            parse as what it claims to be.
        BlobTooNewError: The snapshot (kind ``"snapshot"``) or an embedded blob (its
            own kind) is newer than this package.
        MigrationGapError: An embedded blob has no migration path to the current version.
    """
    snapshot = parse_proto(StateSnapshot, "snapshot", data)
    return snapshot, _state_of(snapshot, len(data))


_CACHE_FIELD_NUMBERS: dict[str, int] = {
    kind: StateSnapshot.DESCRIPTOR.fields_by_name[kind].number
    for kind in ("llm_cache", "tool_cache")
}
_CACHE_FIELDS = frozenset(_CACHE_FIELD_NUMBERS.values())


def load_snapshot_for_replay(
    data: bytes | bytearray,
) -> tuple[StateSnapshot, KeyState, dict[str, int]]:
    """``load_snapshot`` for replay, holding a large cache as few times as it can (issue 14).

    The ``llm_cache`` and ``tool_cache`` blobs are taken apart in place
    (``blobs.split_fields``) and each body is parsed from a view of ``data``, in pieces
    (``blobs.parse_in_pieces``): no body is copied whole, neither as a ``bytes`` field
    of a parsed snapshot, nor out of a parsed ``VersionedBlob``, nor by the parser. So
    the load holds ``data`` and the parsed caches, plus a piece of about a MiB,
    whether ``data`` is the caller's ``bytes`` (which it cannot free) or a ``bytearray``.
    Errors are those of ``load_snapshot``: bytes that are not well-formed are loaded
    by it.

    Args:
        data: The snapshot's bytes. A large ``bytearray`` is emptied once the caches
            are parsed out of it, so the snapshot's bytes are not held alongside its
            parsed cache afterwards: pass one you have no further use for.

    Returns:
        ``(snapshot, the key's state at the current layouts, the version each blob was
        stored at)``. The snapshot is the parsed one without its ``llm_cache`` and
        ``tool_cache`` fields: the state holds them migrated and parsed.

    Raises:
        As ``load_snapshot``.
    """
    size = len(data)
    parts = _cache_parts(data) if size >= LARGE_CELL_BYTES else None
    if parts is None:
        snapshot, state = load_snapshot(bytes(data))
        cells = {kind: getattr(snapshot, kind) for kind in _CACHE_FIELD_NUMBERS}
        snapshot.ClearField("llm_cache")
        snapshot.ClearField("tool_cache")
        versions = {kind: blob_version(kind, raw) for kind, raw in cells.items() if raw}
        return snapshot, state, _stored_versions(snapshot, versions)
    snapshot, bodies = parts
    del parts
    versions = {kind: version for kind, (version, _) in bodies.items()}
    state = _state_of(snapshot, size, bodies)  # takes the bodies (views of data) out
    if isinstance(data, bytearray):
        # The caches are parsed: nothing here refers into data any more. Something else
        # holding a view of it (a debugger, a sampling profiler's frame) only keeps
        # its memory from being freed now.
        with contextlib.suppress(BufferError):
            del data[:]
    return snapshot, state, _stored_versions(snapshot, versions)


def load_snapshot_message(snapshot: StateSnapshot) -> tuple[KeyState, dict[str, int]]:
    """``load_snapshot`` of an already parsed ``StateSnapshot``: its state and the version
    each blob was stored at, nothing serialized to be parsed again (``snapshot`` is only
    read).

    Raises:
        As ``load_snapshot``.
    """
    state = _state_of(snapshot, snapshot.ByteSize())
    versions = {
        kind: blob_version(kind, raw)
        for kind in _CACHE_FIELD_NUMBERS
        if (raw := getattr(snapshot, kind))
    }
    return state, _stored_versions(snapshot, versions)


def _cache_parts(
    data: bytes | bytearray,
) -> tuple[StateSnapshot, dict[str, tuple[int, Buffer]]] | None:
    """The snapshot without its cache fields, and each non-empty cache blob's (version,
    body), the body a view of ``data``; None when ``data`` cannot be taken apart cleanly."""
    split = split_fields(data, _CACHE_FIELDS)
    if split is None:
        return None
    rest, views = split
    try:
        snapshot = StateSnapshot.FromString(rest)
    except DecodeError:
        return None
    bodies: dict[str, tuple[int, Buffer]] = {}
    for kind, number in _CACHE_FIELD_NUMBERS.items():
        view = views.get(number)
        if view is None or not len(view):
            continue  # an empty cell, as load_snapshot reads it
        unwrapped = unwrap_in_place(kind, view)
        if unwrapped is None:
            return None
        version, body = unwrapped
        bodies[kind] = (version, body)
    return snapshot, bodies


def _stored_versions(snapshot: StateSnapshot, caches: dict[str, int]) -> dict[str, int]:
    """The schema version each blob of the snapshot was stored at (before migration),
    the caches' as ``caches`` gives them (a missing kind: an empty cell)."""
    versions: dict[str, int] = {"snapshot": snapshot.state_schema_version}
    if snapshot.memory:
        versions["memory"] = unwrap_blob("memory", snapshot.memory)[0]
    for kind in ("llm_cache", "tool_cache"):
        if kind in caches:
            versions[kind] = caches[kind]
    if snapshot.HasField("continuation"):
        versions["continuation"] = snapshot.continuation.schema_version
    if snapshot.pending or snapshot.pending_schema_version:
        versions["pending"] = snapshot.pending_schema_version
    if snapshot.resumed_from or snapshot.resumed_from_schema_version:
        versions["resume_history"] = snapshot.resumed_from_schema_version
    return versions


def _state_of(
    snapshot: StateSnapshot, size: int, caches: dict[str, tuple[int, Buffer]] | None = None
) -> KeyState:
    """The state a parsed snapshot of ``size`` bytes holds.

    ``caches`` (taken out of it as they are loaded): the ``(version, body)`` of each
    non-empty cache blob, read from the snapshot's fields when None.
    """
    found = snapshot.state_schema_version
    if found > STATE_SCHEMA_VERSION:
        raise BlobTooNewError("snapshot", found, STATE_SCHEMA_VERSION)
    if found < 1:
        raise CorruptBlobError(
            "snapshot", f"{size} bytes with no state_schema_version: not a StateSnapshot"
        )

    memory, provenance, memory_steps = load_memory_cell(snapshot.memory)
    if caches is None:
        cache, cache_steps = load_llm_cache(snapshot.llm_cache)
    elif "llm_cache" in caches:
        cache, cache_steps = load_llm_cache_at(*caches.pop("llm_cache"))
    else:
        cache, cache_steps = load_llm_cache(b"")
    continuation: Continuation | None = None
    continuation_steps: list[str] = []
    if snapshot.HasField("continuation"):
        embedded = snapshot.continuation
        continuation, continuation_steps = load_continuation_at(
            embedded.schema_version, embedded.SerializeToString(deterministic=True)
        )
    pending: list[ToolIntent] = []
    pending_steps: list[str] = []
    # An unstamped empty list is empty at every version; anything else is checked.
    if snapshot.pending or snapshot.pending_schema_version != 0:
        pending, pending_steps = load_pending_at(
            snapshot.pending_schema_version,
            PendingIntents(intents=snapshot.pending).SerializeToString(deterministic=True),
        )
    history: list[ResumeRecord] = []
    history_steps: list[str] = []
    # Like pending: an unstamped empty list is empty at every version.
    if snapshot.resumed_from or snapshot.resumed_from_schema_version != 0:
        history, history_steps = load_resume_history_at(
            snapshot.resumed_from_schema_version,
            ResumeHistory(records=snapshot.resumed_from).SerializeToString(deterministic=True),
        )
    if caches is None:
        tools, tool_steps = load_tool_cache(snapshot.tool_cache)
    elif "tool_cache" in caches:
        tools, tool_steps = load_tool_cache_at(*caches.pop("tool_cache"))
    else:
        tools, tool_steps = ToolCache(), []
    state = KeyState(
        memory=memory,
        memory_provenance=provenance,
        cache=cache,
        continuation=continuation,
        pending=pending,
        resume_history=history,
        tool_cache=tools,
        migrations_applied=[
            *memory_steps,
            *cache_steps,
            *continuation_steps,
            *pending_steps,
            *history_steps,
            *tool_steps,
        ],
    )
    return state


def waiting_text(snapshot: StateSnapshot) -> str:
    """What the key waited on when ``snapshot`` was exported, in a few words (``""``: nothing).

    A retry hold and the inbox are not committed state (replay ignores them), but they are
    why a key is quiet during an outage.
    """
    if not snapshot.HasField("waiting"):
        return ""
    waiting = snapshot.waiting
    parts: list[str] = []
    if waiting.hold == "retry":
        what = "its HITL timeout resume" if waiting.timeout else f"envelope {waiting.envelope_id!r}"
        failed = len(waiting.attempts)
        last = f", the last {waiting.attempts[-1].error_type}" if waiting.attempts else ""
        parts.append(
            f"a retry of {what} ({failed} failed attempt{'s' if failed != 1 else ''}{last}; "
            f"next at event time {waiting.due_ms})"
        )
    if waiting.inbox:
        parts.append(f"{waiting.inbox} envelope{'s' if waiting.inbox != 1 else ''} in its inbox")
    return ", ".join(parts)
