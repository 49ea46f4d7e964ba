"""The tool cache: a key's recorded tool results, so replay can serve what a service answered.

A read-only tool declared ``@tool(recorded=True)`` runs for real in the pipeline,
every time (its service is the truth there, never a cached answer), and its result
is kept in the key's ``tool_cache`` blob (``ToolCacheBody``) under
``(tool name, canonical-args digest)``. Replay serves it from the snapshot and
never runs the tool. ``ToolCache`` is that body in memory; it shares its LRU,
TTL and copy-on-write machinery with the replay cache (``EntryCache``).

Which result an entry holds, and for which activations it is the truth: an entry
keeps the *first* seq from which every recording of its call returned the same
result (``inserted_seq``) and the latest one (``recorded_seq``). A later
activation recording the same result only moves ``recorded_seq`` and the TTL
clock; a different result replaces the entry and starts it again at its seq. So
replay of activation ``seq`` may serve an entry with ``inserted_seq <= seq``: if
``seq`` made that call, its answer was this result. An activation that got two
different results for one call leaves an ``ambiguous`` entry, which replay refuses
rather than guess which answer each call got.

Bounds (``ToolCachePolicy``): entries (LRU), total stored result bytes (LRU),
TTL on the activation clock, and a per-result size limit that fails the
activation (a recorded result replay could not serve would make every replay of
it irreproducible; the error says so at the source instead). With
``retain_payloads=False`` every entry is digest-only: the trace still verifies a
result, but replay cannot serve it (exit 3).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from beam_agents import canonical_json
from beam_agents._protos import ToolCacheBody, ToolCacheEntry
from beam_agents.entry_cache import EntryCache, LookupStatus, entry_status
from beam_agents.errors import ConfigError, CorruptBlobError, RecordedResultError

DEFAULT_TOOL_CACHE_MAX_ENTRIES = 64
DEFAULT_TOOL_CACHE_TTL_MS = 6 * 3600 * 1000
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
DEFAULT_MAX_TOTAL_BYTES = 1 << 20
# The most any ToolCachePolicy may allow per key. Replay refuses a tool cache beyond them
# (no pipeline writes one), before serving from it or listing it.
MAX_TOOL_CACHE_ENTRIES = 10_000
MAX_TOOL_CACHE_TOTAL_BYTES = 32 << 20

_KEY_DOMAIN = b"beam-agents/tool-cache/v1\x00"
_ARG_DOMAIN = b"beam-agents/tool-cache/arg\x00"
_ARG_DIGEST_BYTES = 16


@dataclass(frozen=True, kw_only=True)
class ToolCachePolicy:
    """How the tool cache keeps recorded results (``AgentConfig(tool_cache=...)``)."""

    retain_payloads: bool = True
    """False: every result is stored digest-only (replay cannot serve it, and says so)."""
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    """A recorded result larger than this (canonical JSON or bytes) fails the activation."""
    max_entries: int = DEFAULT_TOOL_CACHE_MAX_ENTRIES
    """Entries beyond this are evicted, least recently used first."""
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    """Stored results beyond this many bytes in all are evicted, least recently used first."""
    ttl_ms: int = DEFAULT_TOOL_CACHE_TTL_MS
    """An entry expires this long after its latest recording (activation clock)."""

    def __post_init__(self) -> None:
        for name in ("max_result_bytes", "max_entries", "max_total_bytes", "ttl_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"ToolCachePolicy.{name} must be a positive int, got {value!r}")
        if not isinstance(self.retain_payloads, bool):
            raise ConfigError(
                f"ToolCachePolicy.retain_payloads must be a bool, got {self.retain_payloads!r}"
            )
        for name, most in (
            ("max_entries", MAX_TOOL_CACHE_ENTRIES),
            ("max_total_bytes", MAX_TOOL_CACHE_TOTAL_BYTES),
        ):
            if getattr(self, name) > most:
                raise ConfigError(
                    f"ToolCachePolicy.{name} is {getattr(self, name)}, over the most any "
                    f"policy may allow ({most}): a key's tool cache lives in its state and "
                    "in every snapshot; record reads, not bulk downloads"
                )
        if self.max_result_bytes > self.max_total_bytes:
            raise ConfigError(
                f"ToolCachePolicy.max_result_bytes ({self.max_result_bytes}) is over "
                f"max_total_bytes ({self.max_total_bytes}): such a result could never be kept"
            )


DEFAULT_TOOL_CACHE_POLICY = ToolCachePolicy()


def tool_cache_key(tool: str, args_sha256: str) -> str:
    """The tool cache key of a call: sha256 hex over the tool name and the args digest."""
    material = _KEY_DOMAIN + tool.encode("utf-8") + b"\x00" + args_sha256.encode("ascii")
    return hashlib.sha256(material).hexdigest()


def arg_digests(args: Mapping[str, Any]) -> dict[str, bytes]:
    """One short digest per argument (JSON values), to name the differing argument of a miss."""
    return {
        name: hashlib.sha256(
            _ARG_DOMAIN + name.encode("utf-8") + b"\x00" + canonical_json.dumps(value)
        ).digest()[:_ARG_DIGEST_BYTES]
        for name, value in args.items()
    }


def encode_result(tool: str, result: Any, policy: ToolCachePolicy) -> tuple[bytes, bool]:
    """The stored bytes of a recorded result and whether it is raw bytes.

    Raises:
        RecordedResultError: The result is neither a JSON value nor bytes, or its
            encoding is over ``policy.max_result_bytes``.
    """
    if isinstance(result, (bytes, bytearray, memoryview)):
        data, is_bytes = bytes(result), True
    else:
        why = canonical_json.check_json_value(result)
        if why is not None:
            raise RecordedResultError(tool, why)
        try:
            data, is_bytes = canonical_json.dumps(result), False
        except ValueError as exc:  # e.g. an int too long to print
            raise RecordedResultError(tool, str(exc)) from exc
    if len(data) > policy.max_result_bytes:
        raise RecordedResultError(
            tool,
            f"its result is {len(data)} bytes, over ToolCachePolicy.max_result_bytes "
            f"({policy.max_result_bytes}); return less (only what the agent uses), or raise "
            "the limit in AgentConfig(tool_cache=ToolCachePolicy(...))",
        )
    return data, is_bytes


def decode_result(entry: ToolCacheEntry) -> Any:
    """The value a served entry holds: bytes, or the decoded JSON value."""
    if entry.result_is_bytes:
        return bytes(entry.result)
    return canonical_json.loads(entry.result)


@dataclass(frozen=True)
class ToolLookup:
    """What ``ToolCache.lookup`` found."""

    status: LookupStatus
    entry: ToolCacheEntry | None = None
    """The entry under the key, whatever its status (None when ABSENT)."""


def _arg_differences(recorded: Mapping[str, bytes], wanted: Mapping[str, bytes]) -> list[str]:
    differences = [
        f"argument {name!r} differs"
        for name in sorted(set(recorded) & set(wanted))
        if recorded[name] != wanted[name]
    ]
    differences += [
        f"argument {name!r} only in the recorded call"
        for name in sorted(set(recorded) - set(wanted))
    ]
    differences += [
        f"argument {name!r} not in the recorded call"
        for name in sorted(set(wanted) - set(recorded))
    ]
    return differences


def _ambiguous(entry: ToolCacheEntry, visible_through_seq: int | None) -> bool:
    return (
        entry.ambiguous
        and (visible_through_seq is None or entry.inserted_seq <= visible_through_seq)
        and not entry.digest_only
    )


def tool_entry_status(
    entry: ToolCacheEntry, *, now_ms: int, visible_through_seq: int | None
) -> LookupStatus:
    """What ``ToolCache.lookup`` finds in ``entry`` at ``now_ms``, without using it.

    ``AMBIGUOUS`` (checked first), then as ``entry_status``. Replay's tool-cache table
    shows this, so it never disagrees with the lookup that served or missed the call.
    """
    if _ambiguous(entry, visible_through_seq):
        return LookupStatus.AMBIGUOUS
    return entry_status(entry, now_ms=now_ms, visible_through_seq=visible_through_seq)


class ToolCache(EntryCache[ToolCacheEntry]):
    """A key's recorded tool results, in memory: a ``ToolCacheBody`` (see ``EntryCache``)."""

    __slots__ = ()

    BODY = ToolCacheBody
    KIND = "tool_cache"

    def lookup(self, cache_key: str, *, now_ms: int, visible_through_seq: int | None) -> ToolLookup:
        """Replay's lookup of a recorded call (the pipeline never looks up: it runs the tool).

        Statuses as ``ReplayCache.lookup``, plus ``AMBIGUOUS`` for an entry whose
        recording activation got two different results for this call.
        """
        entry = self._entries.get(cache_key)
        if entry is not None and _ambiguous(entry, visible_through_seq):
            return ToolLookup(LookupStatus.AMBIGUOUS, entry)
        status, found = self._find(
            cache_key, now_ms=now_ms, visible_through_seq=visible_through_seq
        )
        return ToolLookup(status, found)

    def record(
        self,
        *,
        tool: str,
        args_sha256: str,
        digests: Mapping[str, bytes],
        result: bytes,
        result_is_bytes: bool,
        now_ms: int,
        seq: int,
        policy: ToolCachePolicy,
    ) -> ToolCacheEntry:
        """Record the result a recorded tool just returned in the pipeline (see the module doc).

        Args:
            tool: The tool's name.
            args_sha256: sha256 hex of the canonical JSON of its arguments.
            digests: ``arg_digests(args)``.
            result: ``encode_result``'s bytes.
            result_is_bytes: ``encode_result``'s flag.
            now_ms: The activation clock.
            seq: The recording activation's seq.
            policy: Retention, bounds and TTL.

        Returns:
            The stored entry (owned by the cache: read it, do not change it).
        """
        key = tool_cache_key(tool, args_sha256)
        digest_only = not policy.retain_payloads
        result_sha256 = hashlib.sha256(result).digest()
        self._own_body()
        previous = self._entries.get(key)
        inserted_seq = seq
        ambiguous = False
        if previous is not None:
            same = (
                previous.result_sha256 == result_sha256
                and previous.digest_only == digest_only
                and previous.result_is_bytes == result_is_bytes
            )
            if same:
                # Still the same answer: it has been the truth since the entry's first seq,
                # unless that first activation itself saw two answers and this is a later one.
                if previous.ambiguous and previous.recorded_seq != seq:
                    previous.inserted_seq = seq
                    previous.ambiguous = False
                # Refreshed where it lies (the steady state of a key that keeps asking the
                # same question): same result, same size, so no bound can be newly exceeded.
                previous.inserted_ms = now_ms
                previous.recorded_seq = seq
                previous.last_used_ms = now_ms
                previous.ttl_ms = policy.ttl_ms
                previous.last_used_tick = self._next_tick()
                return previous
            ambiguous = previous.recorded_seq == seq
        entry = self._add(
            key,
            tool=tool,
            args_sha256=args_sha256,
            arg_digests=dict(digests),
            result=b"" if digest_only else result,
            result_is_bytes=result_is_bytes,
            digest_only=digest_only,
            result_sha256=result_sha256,
            result_size=len(result),
            inserted_ms=now_ms,
            inserted_seq=inserted_seq,
            recorded_seq=seq,
            ambiguous=ambiguous,
            last_used_ms=now_ms,
            ttl_ms=policy.ttl_ms,
        )
        self._purge_expired(now_ms)
        self._evict_beyond(policy.max_entries)
        while self.stored_bytes() > policy.max_total_bytes:
            self._evict_least_recent()
        return entry

    def check_keys(self) -> None:
        """Replay's check of a loaded tool cache: within the bounds any ``ToolCachePolicy``
        allows (``MAX_TOOL_CACHE_ENTRIES``, ``MAX_TOOL_CACHE_TOTAL_BYTES``), and each entry
        filed under its own call's key.

        Replay serves an entry by its cache key alone and explains a miss with the
        entry's ``tool`` and ``args_sha256``; an entry whose fields disagree with its key
        was not written by the pipeline (``ToolCache.record`` derives the key from them).
        The pipeline does not run this (it never serves, and it loads the cell per activation).

        Raises:
            CorruptBlobError: Over a bound, or an entry's ``tool``/``args_sha256`` do not
                give its cache key.
        """
        if len(self._entries) > MAX_TOOL_CACHE_ENTRIES:
            raise CorruptBlobError(
                "tool_cache",
                f"it holds {len(self._entries)} entries, over the {MAX_TOOL_CACHE_ENTRIES} any "
                "ToolCachePolicy allows (max_entries), so no pipeline wrote it",
            )
        stored = self.stored_bytes()
        if stored > MAX_TOOL_CACHE_TOTAL_BYTES:
            raise CorruptBlobError(
                "tool_cache",
                f"its results hold {stored} bytes, over the {MAX_TOOL_CACHE_TOTAL_BYTES} any "
                "ToolCachePolicy allows (max_total_bytes), so no pipeline wrote it",
            )
        for key, entry in self._entries.items():
            try:
                expected = tool_cache_key(entry.tool, entry.args_sha256)
            except (UnicodeEncodeError, UnicodeDecodeError):
                expected = ""
            if expected != key:
                raise CorruptBlobError(
                    "tool_cache",
                    f"the entry under cache key {key} is for tool {entry.tool!r} with args "
                    f"digest {entry.args_sha256!r}, whose cache key is {expected or '(none)'}",
                )

    def stored_bytes(self) -> int:
        """The bytes of stored results in all (what ``max_total_bytes`` bounds)."""
        return sum(len(entry.result) for entry in self._entries.values())

    def nearest(
        self, tool: str, wanted: Mapping[str, bytes]
    ) -> tuple[ToolCacheEntry, list[str]] | None:
        """The recorded call of ``tool`` whose arguments differ from ``wanted`` in the fewest.

        Ties go to the most recently used, then the smaller cache key.

        Returns:
            ``(entry, ["argument 'x' differs", ...])``, or None if ``tool`` has no entry.
        """
        best: tuple[tuple[int, int, str], ToolCacheEntry, list[str]] | None = None
        for entry in self._entries.values():
            if entry.tool != tool:
                continue
            differences = _arg_differences(entry.arg_digests, wanted)
            rank = (len(differences), -self._used_tick(entry), entry.cache_key)
            if best is None or rank < best[0]:
                best = (rank, entry, differences)
        return None if best is None else (best[1], best[2])


__all__ = [
    "DEFAULT_TOOL_CACHE_POLICY",
    "MAX_TOOL_CACHE_ENTRIES",
    "MAX_TOOL_CACHE_TOTAL_BYTES",
    "ToolCache",
    "ToolCachePolicy",
    "ToolLookup",
    "arg_digests",
    "decode_result",
    "encode_result",
    "tool_cache_key",
]
