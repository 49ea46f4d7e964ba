"""Which of the re-run's memory reads got what the original got: the snapshot's provenance, per key.

Replay starts from a snapshot's memory, a *post*-image: it holds the target
activation's own writes and those of every activation after it. The memory blob
(v3) records the seq that last wrote each key, and the latest deletions
(``memory_writes.MemoryProvenance``). So, for a replay of seq N, the value the
snapshot holds for a key the re-run reads *before writing it itself* is

- exact when the key was last written (or deleted) before N, or, with no entry,
  before ``since`` <= N (a key absent with no entry was absent for N too);
- not what the original read when N itself wrote it (own write: the snapshot holds
  what it wrote), when a later seq rewrote or deleted it, or when the snapshot
  cannot tell (a blob older than provenance, or deletions older than ``since``).

A read of the memory as a whole (iterating it, ``len``, ``to_dict``, ``repr``)
needs every key it could see to be exact, except those the re-run wrote first.

A read after the re-run wrote the key reads the re-run's own write: exact. The
re-run's own writes are judged against the traced write set (``end_check``);
what it computed from an unseen value cannot be, so the verdict never reads
``reproduced`` past such a read (``judge``).

A blob older than provenance (``since`` unknown) is still judged key by key when
the snapshot was taken right after the target (its seq is the snapshot's, or its
memory is the traced committed memory) and the re-run's write set is the traced
one: then the keys the target wrote are exactly the re-run's (``resolved``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_agents.capture import ValueCapture
from beam_agents.memory_writes import MemoryProvenance, MemoryWrites
from beam_agents.replay.result import UnseenRead, UnseenWhy

__all__ = ["resolved", "unseen_reads"]

_SHOWN_KEYS = 3
"""How many keys the text of a whole-memory read names."""


def resolved(
    provenance: MemoryProvenance, *, seq: int, right_after: bool, own: MemoryWrites | None
) -> MemoryProvenance:
    """``provenance``, or for a blob older than provenance what can still be told of it.

    Args:
        provenance: The snapshot's (migrated) memory provenance.
        seq: The replayed seq.
        right_after: No activation after ``seq`` changed the memory: the snapshot is at
            ``seq``, or its memory is the one ``seq`` committed (traced digest).
        own: The target's own write set when it is known (the re-run's, when its digest
            is the traced one); None when it is not.
    """
    if provenance.since is not None or not right_after or own is None:
        return provenance
    return MemoryProvenance(
        written=dict.fromkeys(own.set, seq), deleted=dict.fromkeys(own.deleted, seq), since=seq
    )


def _status(
    key: str, memory: Mapping[str, Any], provenance: MemoryProvenance, seq: int
) -> tuple[UnseenWhy, int | None] | None:
    """Why the snapshot's value of ``key`` is not what seq ``seq`` saw; None when it is."""
    since = provenance.since
    if key in memory:
        written = provenance.written.get(key)
        if written is None:
            return None if since is not None and since <= seq else (UnseenWhy.UNKNOWN, None)
        if written < seq:
            return None
        return (UnseenWhy.OWN_WRITE, seq) if written == seq else (UnseenWhy.REWRITTEN, written)
    deleted = provenance.deleted.get(key)
    if deleted is None:
        return None if since is not None and since <= seq else (UnseenWhy.UNKNOWN, None)
    if deleted < seq:
        return None
    return (UnseenWhy.OWN_WRITE, seq) if deleted == seq else (UnseenWhy.DELETED, deleted)


def _unknown_text(provenance: MemoryProvenance, seq: int) -> str:
    if provenance.since is None:
        return (
            "the snapshot does not record who last wrote it (its memory blob predates "
            "per-key provenance, memory v3)"
        )
    return (
        f"the snapshot records who wrote what only from seq {provenance.since} on, so it may "
        f"have been written at seq {seq} or later"
    )


def _key_text(
    key: str, why: UnseenWhy, at: int | None, memory: Mapping[str, Any], provenance: MemoryProvenance, seq: int
) -> str:
    name = repr(key)
    if why is UnseenWhy.OWN_WRITE:
        if key in memory:
            return (
                f"read {name}, which this activation (seq {seq}) itself wrote: the snapshot "
                "holds what it wrote, not what it read"
            )
        return (
            f"read {name}, which this activation (seq {seq}) itself deleted: the snapshot no "
            "longer holds what it read"
        )
    if why is UnseenWhy.REWRITTEN:
        return f"read {name}, which seq {at} rewrote"
    if why is UnseenWhy.DELETED:
        return f"read {name}, which seq {at} deleted"
    return f"read {name}, whose value at seq {seq} the snapshot cannot tell: {_unknown_text(provenance, seq)}"


def _scan(
    event_index: int,
    written_before: frozenset[str],
    memory: Mapping[str, Any],
    provenance: MemoryProvenance,
    seq: int,
) -> UnseenRead | None:
    """A read of the memory as a whole, if some key behind it is not as the original saw."""
    candidates = (set(memory) | set(provenance.deleted)) - written_before
    found = sorted(
        (key, status)
        for key in candidates
        if (status := _status(key, memory, provenance, seq)) is not None
    )
    key_set_unknown = provenance.since is None or provenance.since > seq
    if not found and not key_set_unknown:
        return None
    if not found:
        return UnseenRead(
            key=None,
            event_index=event_index,
            why=UnseenWhy.UNKNOWN,
            text=(
                "read the memory as a whole (its keys), whose keys at seq "
                f"{seq} the snapshot cannot tell: {_unknown_text(provenance, seq)}"
            ),
        )
    whys = {status[0] for _, status in found}
    later = [
        s
        for _, (why, s) in found
        if why in (UnseenWhy.REWRITTEN, UnseenWhy.DELETED) and s is not None
    ]
    keys = tuple(key for key, _ in found)
    shown = ", ".join(repr(k) for k in keys[:_SHOWN_KEYS])
    more = f" and {len(keys) - _SHOWN_KEYS} more" if len(keys) > _SHOWN_KEYS else ""
    if later:
        latest: int | None = max(later)
        why = next(iter(whys)) if len(whys) == 1 else UnseenWhy.REWRITTEN
        by = f"later activations changed (the latest, seq {latest})"
    elif whys == {UnseenWhy.OWN_WRITE}:
        why, latest = UnseenWhy.OWN_WRITE, seq
        by = f"this activation (seq {seq}) itself changed"
    else:
        why, latest = UnseenWhy.UNKNOWN, None
        by = f"the snapshot cannot tell as seq {seq} saw ({_unknown_text(provenance, seq)})"
    return UnseenRead(
        key=None,
        event_index=event_index,
        why=why,
        seq=latest,
        keys=keys,
        text=f"read the memory as a whole (its keys), of which {by}: {shown}{more}",
    )


def unseen_reads(
    capture: ValueCapture, *, memory: Mapping[str, Any], provenance: MemoryProvenance, seq: int
) -> tuple[UnseenRead, ...]:
    """The re-run's reads whose value the snapshot does not hold as seq ``seq`` saw it.

    Args:
        capture: What the re-run read, and when (``ValueCapture.memory_reads_before_write``,
            ``ValueCapture.memory_scan``).
        memory: The memory the re-run started from (the snapshot's).
        provenance: Who last wrote each of its keys (``resolved`` first).
        seq: The replayed seq.

    Returns:
        One per key read before the re-run wrote it, in the order of the events they came
        before (then by key), and one for the first read of the memory as a whole.
    """
    found: list[UnseenRead] = []
    for key, event_index in capture.memory_reads_before_write.items():
        status = _status(key, memory, provenance, seq)
        if status is None:
            continue
        why, at = status
        found.append(
            UnseenRead(
                key=key,
                event_index=event_index,
                why=why,
                seq=at,
                text=_key_text(key, why, at, memory, provenance, seq),
            )
        )
    scan = capture.memory_scan
    if scan is not None:
        whole = _scan(scan.event_index, scan.written_before, memory, provenance, seq)
        if whole is not None:
            found.append(whole)
    return tuple(sorted(found, key=lambda r: (r.event_index, r.key is None, r.key or "")))
