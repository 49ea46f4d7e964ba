"""State cell bytes <-> typed values: the versioned blob envelope and one loader/dumper per kind.

A state cell holds the bytes of a ``VersionedBlob{kind, schema_version, body}``;
``b""`` is an empty cell. Loaders check the kind, refuse a newer version, run
the migrations in memory (``beam_agents.migrations``) and parse the body at the
current layout; they return the applied migration steps so the DoFn's and
replay's reports can say what was migrated. Dumpers always write the current
version with deterministic bytes, so the same state gives the same cell bytes
on every machine.

Every loader raises ``CorruptBlobError`` for bytes that are not what they claim
to be (never a parser's own exception), ``BlobTooNewError`` and
``MigrationGapError`` for versions it cannot read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from beam_agents import canonical_json
from beam_agents._protos import (
    Continuation,
    KeyHold,
    LlmCacheBody,
    PendingIntents,
    ResumeHistory,
    ResumeRecord,
    ToolCacheBody,
    ToolIntent,
    VersionedBlob,
)
from beam_agents._wire import read_varint, varint
from beam_agents.errors import CorruptBlobError, MemoryValueError, StateError
from beam_agents.llm_cache import ReplayCache
from beam_agents.memory_writes import MAX_TOMBSTONES, MemoryProvenance
from beam_agents.migrations import (
    CURRENT_VERSIONS,
    MessageT,
    migrate,
    parse_json_object,
    parse_proto,
)
from beam_agents.tool_cache import ToolCache

MAX_RESUME_RECORDS = 8
"""How many consumed continuations the resume history keeps (newest last)."""

# A new key's memory (empty, nothing written yet, every write recorded from the start),
# as a body at the current version: the v3 layout, {"memory", "provenance"}.
_EMPTY_MEMORY_BODY = b'{"memory":{},"provenance":{"deleted":{},"since":0,"written":{}}}'

# What an empty cell means, as a body at the current version of its kind.
_EMPTY_BODIES: Mapping[str, bytes] = {
    "memory": _EMPTY_MEMORY_BODY,
    "llm_cache": b"",
    "continuation": b"",
    "pending": b"",
    "resume_history": b"",
    "tool_cache": b"",
    "hold": b"",
}


def _current_version(kind: str) -> int:
    version = CURRENT_VERSIONS.get(kind)
    if version is None:
        raise StateError(
            f"unknown blob kind {kind!r} (kinds: {', '.join(sorted(CURRENT_VERSIONS))})"
        )
    return version


def encode_blob(kind: str, body: bytes) -> bytes:
    """Wrap ``body`` (a ``kind`` body at the current version) in a ``VersionedBlob``.

    Returns:
        Deterministic bytes: the same body always gives the same blob.
    """
    head = _HEADS.get(kind)
    if head is None:
        head = _HEADS[kind] = VersionedBlob(
            kind=kind, schema_version=_current_version(kind)
        ).SerializeToString(deterministic=True)
    if not body:
        return head
    # Field 3 (body) comes last in deterministic order, so these are the bytes of the
    # whole message, without copying a large body into a message and out again.
    return b"".join((head, _BODY_TAG, varint(len(body)), body))


_HEADS: dict[str, bytes] = {}
"""Each kind's ``VersionedBlob(kind, current schema_version)`` bytes, serialized once (the
same bytes every time: a commit wraps each of its blobs)."""


_BODY_TAG = bytes([(3 << 3) | 2])  # VersionedBlob.body: field 3, length-delimited


# The cells an empty value is dumped to (what dump_memory({}), dump_pending([]) and
# dump_resume_history([]) return). Most keys have no pending intents and no resume
# history, so these are recognized on load without parsing and written without encoding.
_EMPTY_MEMORY_CELL = encode_blob("memory", _EMPTY_MEMORY_BODY)
_EMPTY_PENDING_CELL = encode_blob("pending", b"")
_EMPTY_RESUME_HISTORY_CELL = encode_blob("resume_history", b"")


def unwrap_blob(kind: str, raw: bytes) -> tuple[int, bytes]:
    """The stamped version and the body of a non-empty cell, as stored (nothing migrated).

    Raises:
        CorruptBlobError: ``raw`` is not a ``VersionedBlob`` of ``kind``.
    """
    _current_version(kind)
    blob = parse_proto(VersionedBlob, kind, raw)
    if blob.kind != kind:
        raise CorruptBlobError(kind, f"the cell holds a blob of kind {blob.kind!r}")
    return blob.schema_version, blob.body


# --- large cells: the body as a view of the cell, not a copy (issue 14) -------------------

LARGE_CELL_BYTES = 1 << 16
"""From this size on, the cache loaders parse the body out of the cell's bytes in place
(``split_fields``) instead of copying it twice (into a parsed ``VersionedBlob``, then out
of it as ``bytes``): a 64 MB cache is then held once while it loads, not three times.
Smaller cells take the plain path, which is faster for them."""

Buffer = bytes | bytearray | memoryview


_MAX_TAG = 0xFFFF_FFFF
_MAX_LENGTH = 0x7FFF_FFFF  # upb refuses a length from INT32_MAX on

MAX_SPLIT_FIELDS = 1 << 16
"""The most top-level fields ``split_fields`` walks before giving up (the caller then parses
the message whole, with upb, which gives the same result). Walking costs about half a
microsecond a field in Python (measured: 0.5 s for a million): a snapshot at the 256 MiB
cap made of two-byte unknown fields would take about a minute, where upb takes about a
second. A snapshot or blob has a few dozen."""


class _WireField(NamedTuple):
    """One top-level field of a serialized message, as positions in it."""

    start: int
    """Where its tag begins."""
    number: int
    value_start: int | None
    """Where a length-delimited field's value begins (None for another wire type)."""
    end: int
    """Where the field ends."""


def _top_level_fields(view: memoryview) -> list[_WireField] | None:
    """The top-level fields of ``view`` in order; None when it is not well-formed wire
    format there (or uses groups, or has more than ``MAX_SPLIT_FIELDS`` fields)."""
    found: list[_WireField] = []
    size = len(view)
    at = 0
    while at < size:
        if len(found) >= MAX_SPLIT_FIELDS:
            return None
        field_start = at
        # The protobuf parser (upb) refuses a tag longer than 5 bytes or over 32 bits
        # (even a padded encoding of a valid tag): so does this, or a taken field's
        # malformed tag would vanish from what the parser is given (issue 14 hostile pass).
        tag = read_varint(view, at, limit=5)
        if tag is None or tag[0] > _MAX_TAG:
            return None
        key, at = tag
        number, wire_type = key >> 3, key & 7
        if number == 0:
            return None
        value_start = None
        if wire_type == 0:
            scalar = read_varint(view, at)
            if scalar is None:
                return None
            at = scalar[1]
        elif wire_type == 1:
            at += 8
        elif wire_type == 5:
            at += 4
        elif wire_type == 2:
            length = read_varint(view, at)
            if length is None or length[0] >= _MAX_LENGTH:
                return None
            value_start = length[1]
            at = value_start + length[0]
        else:
            return None
        if at > size:
            return None
        found.append(_WireField(field_start, number, value_start, at))
    return found


def split_fields(
    data: Buffer, numbers: frozenset[int]
) -> tuple[bytes, dict[int, memoryview]] | None:
    """Take the length-delimited fields numbered ``numbers`` out of serialized message ``data``.

    Returns:
        ``(data without those fields, {number: the last such field's value})``, each
        value a view of ``data`` (parsed as the message, ``data`` holds that value for a
        ``bytes`` field: the last occurrence wins); or None when ``data`` is not
        well-formed wire format at its top level (or uses groups, or has more than
        ``MAX_SPLIT_FIELDS`` fields there). Then parse it whole:
        the parser's error says what is wrong, and an occurrence of such a field with
        another wire type is left in place, where the parser finds it as it would.
    """
    view = memoryview(data)
    fields = _top_level_fields(view)
    if fields is None:
        return None
    kept: list[memoryview] = []
    taken: dict[int, memoryview] = {}
    start = 0
    for field in fields:
        if field.value_start is not None and field.number in numbers:
            taken[field.number] = view[field.value_start : field.end]
            kept.append(view[start : field.start])
            start = field.end
    kept.append(view[start:])
    return b"".join(kept), taken


PIECE_BYTES = 1 << 20
"""``parse_in_pieces`` hands the parser pieces of about this size."""


def _piece_ends(view: memoryview) -> list[int] | None:
    """Where ``view``'s pieces of whole top-level fields end, each piece about
    ``PIECE_BYTES`` (a field is never cut: a larger one is a piece of its own); None when
    ``view`` is not well-formed wire format at its top level (as ``split_fields``)."""
    fields = _top_level_fields(view)
    if fields is None:
        return None
    ends: list[int] = []
    piece_start = 0
    for field in fields:
        if field.end - piece_start >= PIECE_BYTES:
            ends.append(field.end)
            piece_start = field.end
    if not ends or ends[-1] != len(view):
        ends.append(len(view))
    return ends


def parse_in_pieces(message_type: type[MessageT], kind: str, data: Buffer) -> MessageT:
    """``parse_proto`` of a large buffer that is not ``bytes``, without a copy of all of it.

    upb parses only ``bytes`` in place: it copies any other buffer into a temporary
    ``bytes`` first, which for a view of a 64 MB cache body is 64 MB more while it
    parses (issue 14). So the buffer is parsed in pieces of whole top-level fields,
    each merged into the message: parsing a concatenation of messages is merging
    them, so the result is the whole parse's. Bytes that do not walk or merge cleanly
    are parsed whole, so a corrupt body fails with ``parse_proto``'s error, word for word.
    """
    if isinstance(data, bytes) or len(data) < LARGE_CELL_BYTES:
        return parse_proto(message_type, kind, data)
    view = memoryview(data)
    ends = _piece_ends(view)
    if ends is None:
        return parse_proto(message_type, kind, data)
    message = message_type()
    start = 0
    try:
        for end in ends:
            message.MergeFromString(view[start:end])  # type: ignore[arg-type]  # any buffer parses
            start = end
    except DecodeError:
        return parse_proto(message_type, kind, data)
    return message


def _current(kind: str, version: int, body: Buffer) -> Buffer:
    """``body``, as ``bytes`` when a migration step will read it (steps take ``bytes``)."""
    return bytes(body) if version < CURRENT_VERSIONS[kind] else body


_BODY_FIELD_NUMBER: int = VersionedBlob.DESCRIPTOR.fields_by_name["body"].number
_BODY_FIELD = frozenset({_BODY_FIELD_NUMBER})


def unwrap_in_place(kind: str, raw: Buffer) -> tuple[int, Buffer] | None:
    """``unwrap_blob`` whose body is a view of ``raw`` (no copy), for a well-formed blob.

    Returns:
        ``(stamped version, body)``, or None when ``raw`` is not a well-formed
        ``VersionedBlob`` of ``kind`` (``unwrap_blob`` then says what is wrong).

    Raises:
        StateError: ``kind`` is not a blob kind.
    """
    _current_version(kind)
    split = split_fields(raw, _BODY_FIELD)
    if split is None:
        return None
    head, fields = split
    try:
        blob = VersionedBlob.FromString(head)
    except DecodeError:
        return None
    if blob.kind != kind:
        return None
    return blob.schema_version, fields.get(_BODY_FIELD_NUMBER, b"")


def _unwrap_large(kind: str, raw: Buffer) -> tuple[int, Buffer]:
    """``unwrap_blob`` whose body is a view of ``raw`` (no copy) when ``raw`` is well-formed.

    Anything else goes to ``unwrap_blob``, whose error names what is wrong.
    """
    unwrapped = unwrap_in_place(kind, raw)
    return unwrapped if unwrapped is not None else unwrap_blob(kind, bytes(raw))


def blob_version(kind: str, raw: Buffer) -> int:
    """The version a non-empty ``kind`` cell is stamped with, without copying its body.

    Raises:
        CorruptBlobError: ``raw`` is not a ``VersionedBlob`` of ``kind``.
    """
    return _unwrap_large(kind, raw)[0]


def _decode_large(kind: str, raw: Buffer) -> tuple[Buffer, list[str]]:
    """``decode_blob`` for a large cache cell (``LARGE_CELL_BYTES``): at the current
    version, the body is a view of ``raw``."""
    version, body = _unwrap_large(kind, raw)
    if version != CURRENT_VERSIONS.get(kind):
        body = bytes(body)  # migration steps take and give bytes
    return migrate(kind, version, body)  # type: ignore[arg-type]  # a view passes through


def decode_blob(kind: str, raw: bytes) -> tuple[bytes, list[str]]:
    """The body of a ``kind`` cell at the current version, migrated in memory.

    Args:
        kind: The blob kind the cell holds.
        raw: The cell's bytes; ``b""`` is an empty cell.

    Returns:
        ``(body, applied migration steps)``; an empty cell gives the kind's empty body.

    Raises:
        CorruptBlobError: Not a ``VersionedBlob`` of this kind.
        BlobTooNewError: Stamped newer than this package.
        MigrationGapError: No migration path to the current version.
    """
    if raw == b"":
        _current_version(kind)
        return _EMPTY_BODIES[kind], []
    version, body = unwrap_blob(kind, raw)
    return migrate(kind, version, body)


# --- memory ------------------------------------------------------------------------------


class LoadedMemory(NamedTuple):
    """A ``memory`` cell, loaded: the memory, who wrote each key, and the migrations run."""

    memory: dict[str, Any]
    provenance: MemoryProvenance
    steps: list[str]


def load_memory_cell(raw: bytes) -> LoadedMemory:
    """Working memory and its provenance from a ``memory`` cell (empty cell: a new key's).

    A cell older than provenance (v1, v2) loads with ``UNKNOWN_PROVENANCE``.

    Raises:
        CorruptBlobError: The cell or its body is not a memory blob of its version.
        BlobTooNewError: Stamped newer than this package.
        MigrationGapError: No migration path to the current version.
    """
    if raw == _EMPTY_MEMORY_CELL or raw == b"":
        return LoadedMemory({}, MemoryProvenance(), [])
    body, steps = decode_blob("memory", raw)
    memory, provenance = parse_memory_body(body)
    return LoadedMemory(memory, provenance, steps)


def load_memory(raw: bytes) -> tuple[dict[str, Any], list[str]]:
    """Working memory from a ``memory`` cell (empty cell: ``{}``), without its provenance.

    Returns:
        ``(memory, applied migration steps)``.
    """
    loaded = load_memory_cell(raw)
    return loaded.memory, loaded.steps


def _seq_map(kind: str, value: Any, what: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 for seq in value.values()
    ):
        raise CorruptBlobError(kind, f"the provenance's {what!r} is not an object of seqs")
    return value


def parse_memory_body(body: bytes) -> tuple[dict[str, Any], MemoryProvenance]:
    """The memory and its provenance from a ``memory`` body at the current version (v3).

    v3 is canonical JSON of ``{"memory": {...}, "provenance": {"deleted": {key: seq},
    "since": seq | null, "written": {key: seq}}}`` (``memory_writes.MemoryProvenance``).

    Raises:
        CorruptBlobError: It is not that, or its provenance contradicts its memory (an
            entry in ``written`` for a key not in it, one in ``deleted`` for a key in it):
            no writer produces either.
    """
    # The memory may nest as deep as the writer allows; its wrapper is one level more.
    value = parse_json_object("memory", body, envelope=True)
    if set(value) != {"memory", "provenance"}:
        raise CorruptBlobError(
            "memory", f"the v3 body has keys {sorted(value)}, not ['memory', 'provenance']"
        )
    memory, provenance = value["memory"], value["provenance"]
    if not isinstance(memory, dict):
        raise CorruptBlobError("memory", f"its memory is JSON {type(memory).__name__}, not an object")
    if not isinstance(provenance, dict) or set(provenance) != {"deleted", "since", "written"}:
        raise CorruptBlobError(
            "memory", "its provenance is not an object of 'deleted', 'since' and 'written'"
        )
    written = _seq_map("memory", provenance["written"], "written")
    deleted = _seq_map("memory", provenance["deleted"], "deleted")
    since = provenance["since"]
    if since is not None and (not isinstance(since, int) or isinstance(since, bool) or since < 0):
        raise CorruptBlobError("memory", f"the provenance's 'since' is {since!r}, not a seq or null")
    stray = next((key for key in written if key not in memory), None)
    if stray is not None:
        raise CorruptBlobError(
            "memory", f"its provenance says who wrote key {stray[:40]!r}, which it does not hold"
        )
    stray = next((key for key in deleted if key in memory), None)
    if stray is not None:
        raise CorruptBlobError(
            "memory", f"its provenance says key {stray[:40]!r} was deleted, but it holds it"
        )
    if len(deleted) > MAX_TOMBSTONES:
        raise CorruptBlobError(
            "memory",
            f"its provenance remembers {len(deleted)} deleted keys, over the {MAX_TOMBSTONES} "
            "any writer keeps",
        )
    return memory, MemoryProvenance(written=written, deleted=deleted, since=since)


def _non_json_path(value: object, path: str) -> tuple[str, str] | None:
    """Where in ``value`` the first non-JSON value sits, and why; None if it is all JSON."""
    why = canonical_json.check_json_value(value)
    if why is None:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return path, why
            found = _non_json_path(item, f"{path}[{key!r}]")
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _non_json_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return path, why


class EncodedMemory(NamedTuple):
    """A ``memory`` cell, and the canonical JSON of the memory it holds (what is digested)."""

    cell: bytes
    memory_json: bytes


def encode_memory(memory: Mapping[str, Any], provenance: MemoryProvenance) -> EncodedMemory:
    """A ``memory`` cell holding ``memory`` as canonical JSON, with ``provenance`` (v3).

    ``provenance`` is kept to what it can say of ``memory``: writers of keys it holds,
    deletions of keys it does not.

    Raises:
        MemoryValueError: ``memory`` holds a value that is not JSON (the error names
            its path, e.g. ``['order']['items'][2]``).
    """
    if not isinstance(memory, Mapping):
        raise MemoryValueError("", f"memory is a {type(memory).__name__}, not a JSON object")
    if type(memory) is dict and not memory and provenance == _NEW_KEY:
        return EncodedMemory(_EMPTY_MEMORY_CELL, b"{}")
    found = _non_json_path(memory, "")
    if found is not None:
        raise MemoryValueError(*found)
    try:
        memory_json = canonical_json.dumps(dict(memory))
    except ValueError as exc:  # e.g. an int too long to print
        raise MemoryValueError("", str(exc)) from exc
    written, deleted = provenance.written, provenance.deleted
    keys = memory.keys()
    # Rebuilt only when they say more than the memory can carry (they never do when they
    # come from MemoryProvenance.after on this memory's own writes).
    if not written.keys() <= keys:
        written = {k: s for k, s in written.items() if k in memory}
    if not deleted.keys().isdisjoint(keys):
        deleted = {k: s for k, s in deleted.items() if k not in memory}
    kept = {
        "deleted": deleted if type(deleted) is dict else dict(deleted),
        "since": provenance.since,
        "written": written if type(written) is dict else dict(written),
    }
    # Canonical JSON of {"memory": ..., "provenance": ...} (keys in that order), built
    # around the memory's own canonical JSON instead of encoding it twice.
    body = b'{"memory":' + memory_json + b',"provenance":' + canonical_json.dumps(kept) + b"}"
    return EncodedMemory(encode_blob("memory", body), memory_json)


_NEW_KEY = MemoryProvenance()


def dump_memory(memory: Mapping[str, Any], provenance: MemoryProvenance = _NEW_KEY) -> bytes:
    """A ``memory`` cell holding ``memory`` (canonical JSON) and ``provenance`` (default:
    nothing recorded yet, as for a new key; ``encode_memory``).

    Raises:
        MemoryValueError: ``memory`` holds a value that is not JSON (the error names
            its path, e.g. ``['order']['items'][2]``).
    """
    return encode_memory(memory, provenance).cell


# --- llm_cache ---------------------------------------------------------------------------


def load_llm_cache(raw: bytes) -> tuple[ReplayCache, list[str]]:
    """The replay cache from an ``llm_cache`` cell (empty cell: an empty cache).

    Returns:
        ``(cache, applied migration steps)``.
    """
    decode = decode_blob if len(raw) < LARGE_CELL_BYTES else _decode_large
    body, steps = decode("llm_cache", raw)
    parsed = parse_proto(LlmCacheBody, "llm_cache", body)
    return ReplayCache.from_body(parsed, copy=False), steps


def load_llm_cache_at(version: int, body: Buffer) -> tuple[ReplayCache, list[str]]:
    """The replay cache from the body of an ``llm_cache`` cell stamped ``version``.

    ``body`` may be a view of the snapshot's bytes: it is parsed in pieces
    (``parse_in_pieces``), and nothing of the cache refers into it afterwards.

    Returns:
        ``(cache, applied migration steps)``.
    """
    current, steps = migrate("llm_cache", version, _current("llm_cache", version, body))  # type: ignore[arg-type]
    parsed = parse_in_pieces(LlmCacheBody, "llm_cache", current)
    return ReplayCache.from_body(parsed, copy=False), steps


def dump_llm_cache(cache: ReplayCache) -> bytes:
    """An ``llm_cache`` cell holding ``cache`` (entries in cache-key order)."""
    return encode_blob("llm_cache", cache.body_bytes())


# --- tool_cache --------------------------------------------------------------------------


def load_tool_cache(raw: bytes) -> tuple[ToolCache, list[str]]:
    """The recorded tool results from a ``tool_cache`` cell (empty cell: an empty cache).

    Returns:
        ``(cache, applied migration steps)``.
    """
    if not len(raw):
        return ToolCache(), []
    decode = decode_blob if len(raw) < LARGE_CELL_BYTES else _decode_large
    body, steps = decode("tool_cache", raw)
    parsed = parse_proto(ToolCacheBody, "tool_cache", body)
    return ToolCache.from_body(parsed, copy=False), steps


def load_tool_cache_at(version: int, body: Buffer) -> tuple[ToolCache, list[str]]:
    """The recorded tool results from the body of a ``tool_cache`` cell stamped ``version``.

    Returns:
        ``(cache, applied migration steps)``.
    """
    current, steps = migrate("tool_cache", version, _current("tool_cache", version, body))  # type: ignore[arg-type]
    parsed = parse_in_pieces(ToolCacheBody, "tool_cache", current)
    return ToolCache.from_body(parsed, copy=False), steps


def dump_tool_cache(cache: ToolCache) -> bytes:
    """A ``tool_cache`` cell holding ``cache``; an empty cache is the empty cell ``b""``.

    Most keys record no tool: their cell (and their snapshot's field) stays empty.
    """
    if not len(cache):
        return b""
    return encode_blob("tool_cache", cache.body_bytes())


# --- continuation ------------------------------------------------------------------------


def load_continuation_at(version: int, body: bytes) -> tuple[Continuation, list[str]]:
    """A continuation from its body stamped ``version`` (how a snapshot carries it).

    Returns:
        ``(continuation at the current layout, applied migration steps)``.

    Raises:
        CorruptBlobError: The body does not parse, or its own ``schema_version``
            disagrees with the version it is stamped with.
    """
    current_body, steps = migrate("continuation", version, body)
    continuation = parse_proto(Continuation, "continuation", current_body)
    current = CURRENT_VERSIONS["continuation"]
    if continuation.schema_version != current:
        raise CorruptBlobError(
            "continuation",
            f"its body says schema_version {continuation.schema_version}, "
            f"but it is stamped (or migrated to) version {current}",
        )
    return continuation, steps


def load_continuation(raw: bytes) -> tuple[Continuation | None, list[str]]:
    """The continuation of a suspended key from its cell (empty cell: None, not suspended).

    Returns:
        ``(continuation or None, applied migration steps)``.
    """
    if raw == b"":
        return None, []
    version, body = unwrap_blob("continuation", raw)
    return load_continuation_at(version, body)


def _stamped(continuation: Continuation) -> Continuation:
    # A Continuation object in memory is the current layout (the generated class is
    # the current layout), whatever its schema_version field says.
    copy = Continuation()
    copy.CopyFrom(continuation)
    copy.schema_version = CURRENT_VERSIONS["continuation"]
    return copy


def dump_continuation(continuation: Continuation | None) -> bytes:
    """A ``continuation`` cell; None (not suspended) is the empty cell ``b""``.

    The stored copy's ``schema_version`` is set to the current version; the
    argument is not changed.
    """
    if continuation is None:
        return b""
    body = _stamped(continuation).SerializeToString(deterministic=True)
    return encode_blob("continuation", body)


# --- pending -----------------------------------------------------------------------------


def load_pending_at(version: int, body: bytes) -> tuple[list[ToolIntent], list[str]]:
    """Pending intents from a ``PendingIntents`` body stamped ``version``."""
    current_body, steps = migrate("pending", version, body)
    return list(parse_proto(PendingIntents, "pending", current_body).intents), steps


def load_pending(raw: bytes) -> tuple[list[ToolIntent], list[str]]:
    """The pending intents from a ``pending`` cell (empty cell: none).

    Returns:
        ``(intents in stored order, applied migration steps)``.
    """
    if raw == b"" or raw == _EMPTY_PENDING_CELL:
        return [], []
    version, body = unwrap_blob("pending", raw)
    return load_pending_at(version, body)


def dump_pending(intents: Iterable[ToolIntent]) -> bytes:
    """A ``pending`` cell holding ``intents`` in the given order."""
    if type(intents) is list and not intents:
        return _EMPTY_PENDING_CELL
    body = PendingIntents(intents=list(intents)).SerializeToString(deterministic=True)
    return encode_blob("pending", body)


# --- resume_history ----------------------------------------------------------------------


def load_resume_history_at(version: int, body: bytes) -> tuple[list[ResumeRecord], list[str]]:
    """Resume records from a ``ResumeHistory`` body stamped ``version``.

    Each record's continuation is migrated by its own ``schema_version``.
    """
    current_body, steps = migrate("resume_history", version, body)
    records = list(parse_proto(ResumeHistory, "resume_history", current_body).records)
    for record in records:
        if record.HasField("continuation"):
            stored = record.continuation
            continuation, continuation_steps = load_continuation_at(
                stored.schema_version, stored.SerializeToString(deterministic=True)
            )
            record.continuation.CopyFrom(continuation)
            steps.extend(step for step in continuation_steps if step not in steps)
    return records, steps


def load_resume_history(raw: bytes) -> tuple[list[ResumeRecord], list[str]]:
    """The consumed continuations of the key's latest resumes (newest last; empty cell: none).

    Returns:
        ``(records, applied migration steps)``.
    """
    if raw == b"" or raw == _EMPTY_RESUME_HISTORY_CELL:
        return [], []
    version, body = unwrap_blob("resume_history", raw)
    return load_resume_history_at(version, body)


def dump_resume_history(records: Sequence[ResumeRecord]) -> bytes:
    """A ``resume_history`` cell keeping the newest ``MAX_RESUME_RECORDS`` of ``records``.

    Args:
        records: Oldest first, newest last.
    """
    if not records:
        return _EMPTY_RESUME_HISTORY_CELL
    kept: list[ResumeRecord] = []
    for record in records[-MAX_RESUME_RECORDS:]:
        copy = ResumeRecord()
        copy.CopyFrom(record)
        if record.HasField("continuation"):
            copy.continuation.CopyFrom(_stamped(record.continuation))
        kept.append(copy)
    body = ResumeHistory(records=kept).SerializeToString(deterministic=True)
    return encode_blob("resume_history", body)


# --- hold --------------------------------------------------------------------------------


def load_hold(raw: bytes) -> tuple[KeyHold | None, list[str]]:
    """The trigger a key holds (a retry pending) from its ``hold`` cell (empty cell: None).

    Returns:
        ``(hold or None, applied migration steps)``.
    """
    if raw == b"":
        return None, []
    version, body = unwrap_blob("hold", raw)
    current_body, steps = migrate("hold", version, body)
    return parse_proto(KeyHold, "hold", current_body), steps


def dump_hold(hold: KeyHold | None) -> bytes:
    """A ``hold`` cell; None (the key holds nothing) is the empty cell ``b""``."""
    if hold is None:
        return b""
    return encode_blob("hold", hold.SerializeToString(deterministic=True))
