"""What an activation wrote to working memory, and which seq last wrote each key.

Replay starts from a snapshot's memory, which is a *post*-image: it already holds
the target activation's writes, and every later activation's. Comparing the
memory a re-run ends with against the traced end state cannot see a write the
re-run leaves out (the snapshot already holds it), nor judge anything from a later
snapshot. So memory is judged by what the activation *wrote*:

- ``MemoryWrites``: the write set of one activation, the top-level keys it set
  (assigned, or changed in place inside a value it read) with their committed
  values, and the keys it deleted. Its canonical JSON's sha256 is traced on
  ``ACTIVATION_END`` (``beam_agents.memory_writes_sha256``); replay compares the
  re-run's with it.
- ``MemoryProvenance``: kept in the memory blob (v3) beside the memory, the seq of
  the activation that last wrote each key, and of the latest deletions. With it,
  replay of an older activation knows per key whether the value a snapshot holds is
  the one that activation saw (docs/replay.md §4): a key last written before it
  is exact; one rewritten (or deleted) by a later seq is named as such.

A key is a top-level key of ``ctx.memory``: provenance is per key, not per nested
value, so an agent whose history replays from any later snapshot keeps what later
activations must not disturb under keys they never rewrite (docs/agent-api.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from beam_agents import canonical_json

__all__ = [
    "MAX_TOMBSTONES",
    "UNKNOWN_PROVENANCE",
    "MemoryProvenance",
    "MemoryWrites",
    "memory_writes",
]

MAX_TOMBSTONES = 256
"""How many deleted keys the provenance remembers (the latest deletions). Past it the
oldest is dropped and ``MemoryProvenance.since`` moves past its seq, so an activation
older than that cannot be told a key was absent for it (replay says so)."""

_MISSING = object()


@dataclass(frozen=True)
class MemoryWrites:
    """One activation's write set: keys set (with their committed values) and keys deleted."""

    set: Mapping[str, Any] = field(default_factory=dict)
    """Each key the activation assigned (or changed in place), with its value at commit."""
    deleted: tuple[str, ...] = ()
    """Each key the activation deleted (and did not set again), sorted."""

    def body(self) -> bytes:
        """The canonical JSON of ``{"deleted": [...], "set": {...}}``: what is digested."""
        return canonical_json.dumps({"deleted": list(self.deleted), "set": dict(self.set)})

    def digest(self) -> str:
        """sha256 hex of ``body()``: what ``beam_agents.memory_writes_sha256`` holds."""
        if not self.set and not self.deleted:
            return _EMPTY_DIGEST  # most activations write nothing: the same bytes each time
        return hashlib.sha256(self.body()).hexdigest()

    def keys(self) -> frozenset[str]:
        """Every key the activation wrote (set or deleted)."""
        return frozenset(self.set) | frozenset(self.deleted)

    def __bool__(self) -> bool:
        return bool(self.set) or bool(self.deleted)


_EMPTY_DIGEST = hashlib.sha256(MemoryWrites().body()).hexdigest()
"""The digest of the empty write set (``{"deleted": [], "set": {}}``), computed once."""


def _json_differs(before: Any, after: Any) -> bool:
    """Whether two JSON values differ as JSON (``1``, ``1.0`` and ``True`` are three values)."""
    if before is _MISSING or after is _MISSING:
        return before is not after
    if before != after:
        return True
    if not isinstance(before, (dict, list)):
        return type(before) is not type(after)
    # Equal as Python values; canonical JSON tells 1 from 1.0 and True inside containers.
    return canonical_json.dumps(before) != canonical_json.dumps(after)


def memory_writes(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    assigned: Collection[str],
    read: Iterable[str],
    exposed: bool,
) -> MemoryWrites:
    """The write set of an activation that turned memory ``before`` into ``after``.

    Args:
        before: The memory the activation started from (not modified).
        after: The memory it commits.
        assigned: The keys agent code assigned or deleted through ``ctx.memory``: a write
            even when the value is the one already there (from a post-image, that is
            exactly the write a re-run could otherwise leave out unseen).
        read: The keys whose values agent code was handed: only those can have been
            changed in place (``ctx.memory["log"].append(x)``).
        exposed: Agent code was handed the whole underlying dict (``to_dict()``), so any
            key can have changed: every key is compared.
    """
    if not assigned and not read and not exposed:
        return MemoryWrites()  # agent code touched no key (most activations)
    touched = set(assigned)
    candidates = set(before) | set(after) if exposed else set(read)
    for key in candidates - touched:
        if _json_differs(before.get(key, _MISSING), after.get(key, _MISSING)):
            touched.add(key)
    return MemoryWrites(
        set={key: after[key] for key in sorted(touched) if key in after},
        deleted=tuple(sorted(key for key in touched if key not in after)),
    )


@dataclass(frozen=True)
class MemoryProvenance:
    """Which seq last wrote each key of a memory, and the latest deletions (memory blob v3).

    The rule that makes it exact: every write and deletion by an activation with seq
    ``>= since`` is recorded. A key of the memory with no entry in ``written`` was last
    written before ``since``; a key absent from the memory and from ``deleted`` was
    absent for every activation from ``since`` on. ``since`` is None for a memory
    migrated from a blob older than provenance (v2 and before) that no activation of
    this code has committed yet: nothing is known about who wrote what.

    Frozen and shared: ``after`` returns a new one, so a failed activation (which
    commits nothing) leaves the key's provenance exactly as it was.
    """

    written: Mapping[str, int] = field(default_factory=dict)
    """Key of the memory -> the seq of the activation that last wrote it."""
    deleted: Mapping[str, int] = field(default_factory=dict)
    """Key not in the memory -> the seq of the activation that last deleted it (the
    latest ``MAX_TOMBSTONES``)."""
    since: int | None = 0
    """Writes and deletions by seqs from this one on are all recorded (None: unknown)."""

    def after(self, writes: MemoryWrites, seq: int) -> MemoryProvenance:
        """The provenance once activation ``seq`` has committed ``writes``."""
        since = seq if self.since is None else self.since
        if not writes:
            if since == self.since:
                return self
            return MemoryProvenance(self.written, self.deleted, since)
        written = dict(self.written)
        deleted = dict(self.deleted)
        for key in writes.set:
            written[key] = seq
            deleted.pop(key, None)
        for key in writes.deleted:
            written.pop(key, None)
            deleted[key] = seq
        if len(deleted) > MAX_TOMBSTONES:
            oldest = sorted(deleted.items(), key=lambda item: (item[1], item[0]))
            dropped = oldest[: len(deleted) - MAX_TOMBSTONES]
            for key, _ in dropped:
                del deleted[key]
            since = max(since, max(s for _, s in dropped) + 1)
        return MemoryProvenance(written, deleted, since)

    def to_json(self) -> dict[str, Any]:
        """The provenance as stored in the memory blob (v3)."""
        return {
            "deleted": dict(self.deleted),
            "since": self.since,
            "written": dict(self.written),
        }


UNKNOWN_PROVENANCE = MemoryProvenance(since=None)
"""The provenance of a memory migrated from a blob that predates it (v2 and before)."""
