"""State blob versions and the migrations between them: one implementation, two call sites.

Every state cell holds a ``VersionedBlob{kind, schema_version, body}``. When a
blob's layout changes, its kind's current version goes up by one and a
migration ``body at vN -> body at vN+1`` is registered here. The DoFn runs these
lazily on read (and writes the current version on its next commit); replay runs
the very same functions on a snapshot's blobs and writes nothing back
(invariant 5). A blob newer than this package is refused, never guessed forward;
a version with no path to the current one is a gap, never guessed either.

Layouts, by kind (``body`` of the ``VersionedBlob``):

- ``memory`` v1: JSON text of an object, any formatting (old writers used
  ``json.dumps`` defaults). v2: canonical JSON (``beam_agents.canonical_json``).
  v3: canonical JSON of ``{"memory": <the v2 object>, "provenance": {"deleted":
  {key: seq}, "since": seq | null, "written": {key: seq}}}``: which seq last wrote
  each key (``beam_agents.memory_writes.MemoryProvenance``); from v2, ``since`` is
  null (unknown: nothing recorded who wrote what).
- ``llm_cache`` v1: ``LlmCacheBody`` whose entries lack ``fingerprint``,
  ``inserted_seq``, ``ttl_ms`` and ``last_used_tick``. v2: all of them set.
- ``continuation`` v1: ``Continuation`` with ``schema_version = 1``.
- ``pending`` v1: ``PendingIntents``.
- ``resume_history`` v1: ``ResumeHistory`` (each record's continuation carries
  its own ``schema_version``; its pending intents are at ``pending`` v1).
- ``tool_cache`` v1: ``ToolCacheBody`` (recorded tool results; its own chain,
  starting here).
- ``hold`` v1: ``KeyHold`` (the trigger a key holds while a retry is pending; a
  pipeline cell like the inbox, never part of a snapshot).

A migration is a frozen historical fact: it encodes what an old writer did, so
it never reads a constant that a later release might change.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, Message

from beam_agents import canonical_json
from beam_agents._protos import LlmCacheBody
from beam_agents.canonical_json import MAX_JSON_DEPTH
from beam_agents.errors import BlobTooNewError, CorruptBlobError, MigrationGapError, StateError

STATE_SCHEMA_VERSION = 2
"""The package's state schema version, carried by ``StateSnapshot.state_schema_version``."""

Migration = Callable[[bytes], bytes]
"""A migration: the body at version N in, the body at version N+1 out."""

MessageT = TypeVar("MessageT", bound=Message)


def parse_proto(
    message_type: type[MessageT], kind: str, data: bytes | bytearray | memoryview
) -> MessageT:
    """Parse ``data`` as ``message_type``, or raise ``CorruptBlobError(kind, ...)``."""
    try:
        return message_type.FromString(data)  # type: ignore[arg-type]  # any buffer parses
    except DecodeError as exc:
        raise CorruptBlobError(
            kind, f"{len(data)} bytes do not parse as {message_type.DESCRIPTOR.name} ({exc})"
        ) from exc


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


# json.loads(text, parse_constant=...) builds a decoder on every call; this is the same
# decoder, built once (decoders hold no state between calls).
def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]}{'…' if len(text) > 40 else ''} is out of range")
    return value


_JSON_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
# A \uD800-\uDFFF escape in the text: only then can the value hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_value_problem(
    value: Any, *, surrogates: bool = True, envelope: bool = False
) -> str | None:
    """Why a parsed JSON value cannot be used, or None: too deep, or a lone surrogate.

    Iterative (no recursion, whatever the depth). A lone surrogate (``"\\ud800"``)
    is valid JSON text but not a string any UTF-8 writer can write back. ``envelope``:
    ``value`` is an object wrapping the values that count (the memory blob v3's
    ``{"memory": ..., "provenance": ...}``): its own level is not counted.
    """
    # Each entry: the value, its depth, and the top-level key it sits under (for messages).
    stack: list[tuple[Any, int, str]] = [(value, -1 if envelope else 0, "the value")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if surrogates and _LONE_SURROGATE.search(item):
                return f"{where} holds a string with a lone surrogate (not encodable as UTF-8)"
            continue
        if isinstance(item, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                return f"{where} is nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if surrogates and _LONE_SURROGATE.search(key):
                        return f"{where} holds a key with a lone surrogate"
                    under = f"the value under key {key[:40]!r}" if depth in (-1, 0) else where
                    stack.append((child, depth + 1, under))
            else:
                stack.extend((child, depth + 1, where) for child in item)
    return None


def parse_json_object(kind: str, body: bytes, *, envelope: bool = False) -> dict[str, Any]:
    """Parse ``body`` as JSON text of an object (any formatting), or raise ``CorruptBlobError``.

    NaN and infinities (also a number such as ``1e999`` that overflows to one), lone
    surrogates and nesting deeper than ``MAX_JSON_DEPTH`` are refused: no canonical
    JSON writer produces them. ``envelope``: the object wraps the values whose nesting
    counts (``json_value_problem``), so its own level is not counted.
    """
    try:
        text = body.decode("utf-8")
        if text.startswith("\ufeff"):  # json.loads refuses a BOM with its own message
            value = json.loads(text, parse_constant=_refuse_constant)
        else:
            value = _JSON_DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptBlobError(kind, f"the body is not JSON text ({exc})") from exc
    if not isinstance(value, dict):
        raise CorruptBlobError(kind, f"the body is JSON {type(value).__name__}, not an object")
    # Walk the value only when the text could hold what the walk looks for.
    surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    if surrogates or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        problem = json_value_problem(value, surrogates=surrogates, envelope=envelope)
        if problem is not None:
            raise CorruptBlobError(kind, f"the body's JSON {problem}")
    return value


def step_name(kind: str, from_version: int) -> str:
    """How an applied migration step is reported, e.g. ``"llm_cache v1→v2"``."""
    return f"{kind} v{from_version}→v{from_version + 1}"


class MigrationRegistry:
    """The current version of each blob kind, and the migration steps that lead to it."""

    def __init__(self, current_versions: Mapping[str, int]) -> None:
        """A registry with no steps yet.

        Args:
            current_versions: The current layout version of each kind (at least 1).
        """
        self.current_versions: Mapping[str, int] = MappingProxyType(dict(current_versions))
        self.steps: dict[tuple[str, int], Migration] = {}

    def register(self, kind: str, from_version: int) -> Callable[[Migration], Migration]:
        """Decorator registering the migration of ``kind`` from ``from_version`` to the next.

        Raises:
            ValueError: A programming error: unknown kind, a version outside
                ``1 .. current-1``, or a step registered twice.
        """
        current = self.current_versions.get(kind)
        if current is None:
            raise ValueError(f"no blob kind {kind!r} (kinds: {sorted(self.current_versions)})")
        if not 1 <= from_version < current:
            raise ValueError(
                f"a {kind} migration from v{from_version} cannot exist: current is v{current}"
            )
        if (kind, from_version) in self.steps:
            raise ValueError(f"migration {step_name(kind, from_version)} registered twice")

        def add(function: Migration) -> Migration:
            self.steps[(kind, from_version)] = function
            return function

        return add

    def migrate(self, kind: str, version: int, body: bytes) -> tuple[bytes, list[str]]:
        """Bring ``body``, a ``kind`` body at ``version``, to the current version, in memory.

        Args:
            kind: The blob kind.
            version: The version the body is stamped with.
            body: The body at that version.

        Returns:
            ``(body at the current version, applied steps)``, e.g.
            ``(b"...", ["llm_cache v1→v2"])``; no steps when already current.

        Raises:
            StateError: ``kind`` is not a blob kind.
            BlobTooNewError: ``version`` is newer than this package supports.
            MigrationGapError: No step leads from some version on the way (a version
                of 0 or below is a gap too).
            CorruptBlobError: A step found the body does not parse at its version.
        """
        current = self.current_versions.get(kind)
        if current is None:
            raise StateError(
                f"unknown blob kind {kind!r} (kinds: {', '.join(sorted(self.current_versions))})"
            )
        if version > current:
            raise BlobTooNewError(kind, version, current)
        if version < 1:
            raise MigrationGapError(kind, version, current, version)
        applied: list[str] = []
        for step in range(version, current):
            function = self.steps.get((kind, step))
            if function is None:
                raise MigrationGapError(kind, version, current, step)
            body = function(body)
            applied.append(step_name(kind, step))
        return body, applied


REGISTRY = MigrationRegistry(
    {
        "memory": 3,
        "llm_cache": 2,
        "continuation": 1,
        "pending": 1,
        "resume_history": 1,
        "tool_cache": 1,
        "hold": 1,
    }
)
"""The package's registry: every state cell's kind, its current version and its steps."""

CURRENT_VERSIONS: Mapping[str, int] = REGISTRY.current_versions
"""The current layout version of each blob kind (read-only)."""

migration = REGISTRY.register


def migrate(kind: str, version: int, body: bytes) -> tuple[bytes, list[str]]:
    """Bring a ``kind`` body at ``version`` to the current version (see ``MigrationRegistry``)."""
    return REGISTRY.migrate(kind, version, body)


# ---------------------------------------------------------------------------------------
# The steps. Each one raises CorruptBlobError (never another error) on a body that
# does not parse at its from-version.


@migration("memory", 1)
def _memory_v1_to_v2(body: bytes) -> bytes:
    """v1 writers used ``json.dumps`` defaults; v2 is canonical JSON of the same object."""
    value = parse_json_object("memory", body)
    try:
        return canonical_json.dumps(value)
    except (ValueError, RecursionError) as exc:
        raise CorruptBlobError("memory", f"the v1 body cannot be canonicalized ({exc})") from exc


@migration("memory", 2)
def _memory_v2_to_v3(body: bytes) -> bytes:
    """v3 keeps, beside the memory, the seq that last wrote each key; a v2 blob recorded
    none, so its provenance is unknown (``since`` null) until an activation commits it."""
    value = parse_json_object("memory", body)
    try:
        return canonical_json.dumps(
            {"memory": value, "provenance": {"deleted": {}, "since": None, "written": {}}}
        )
    except (ValueError, RecursionError) as exc:
        raise CorruptBlobError("memory", f"the v2 body cannot be canonicalized ({exc})") from exc


# Every v1 writer applied this TTL; written out here so a later change of the
# default can never change what a v1 entry meant.
_LLM_CACHE_V1_TTL_MS = 6 * 3600 * 1000
_UNKNOWN_SEQ = -1


@migration("llm_cache", 1)
def _llm_cache_v1_to_v2(body: bytes) -> bytes:
    """Give v1 entries the fields v2 added.

    ``ttl_ms`` is the v1 TTL; ``inserted_seq`` is unknown (-1, visible to replay);
    the fingerprint stays empty (a miss then says it is unavailable rather than
    inventing one); recency ticks follow ``last_used_ms``, ties by cache key.
    """
    parsed = parse_proto(LlmCacheBody, "llm_cache", body)
    by_recency = sorted(parsed.entries, key=lambda entry: (entry.last_used_ms, entry.cache_key))
    for tick, entry in enumerate(by_recency, start=1):
        entry.ttl_ms = _LLM_CACHE_V1_TTL_MS
        entry.inserted_seq = _UNKNOWN_SEQ
        entry.ClearField("fingerprint")
        entry.last_used_tick = tick
    parsed.tick = len(by_recency)
    return parsed.SerializeToString(deterministic=True)
