from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beam_agents import canonical_json
from beam_agents._protos import TraceEvent
from beam_agents.capture import ValueCapture
from beam_agents.memory_writes import MemoryProvenance, MemoryWrites
from beam_agents.replay.judging.memory_reads import resolved, unseen_reads
from beam_agents.replay.judging.state_view import blob_digest, end_digests
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import (
    BlobDigest,
    FieldDiff,
    Mark,
    MemoryWritesDigest,
    UnseenRead,
    WriteSet,
)
from beam_agents.trace_events import (
    ATTR_MEMORY_SHA256,
    ATTR_MEMORY_WRITES_SHA256,
    ATTR_OUTPUTS_SHA256,
    outputs_digest_text,
)

__all__ = [
    "EndCheck",
    "check_end",
    "end_divergence_detail",
    "memory_diff_lines",
    "memory_digest",
    "write_set",
]

_OUTPUT_WIDTH = 240


def memory_digest(memory: Any) -> str:
    """sha256 hex of a memory's canonical JSON: what ``beam_agents.memory_sha256`` holds."""
    return hashlib.sha256(canonical_json.dumps(memory)).hexdigest()


def memory_diff_lines(before: Any, after: Any) -> list[str]:
    """The structured difference ``before`` → ``after`` (root is the memory object): one
    line per change. A line break inside a value stays inside its line (the renderers
    escape it), never a line of its own: ``.pretty().splitlines()`` let a value's newline
    start a line that reads as the report's (``verdict: reproduced``)."""
    if before == after:
        return ["(no key differs)"]
    try:
        from deepdiff import DeepDiff
        from deepdiff.serialization import pretty_print_diff
    except ImportError:  # a stripped install: name the top-level keys that differ
        keys = sorted(
            set(before) ^ set(after)
            | {k for k in set(before) & set(after) if before[k] != after[k]}
        )
        return [f"key {k!r} differs" for k in keys]
    tree = DeepDiff(before, after, verbose_level=2).tree
    # DeepDiff.pretty() is these, in this order, joined by line feeds; each value is cut
    # (a 16 MiB value made a 16 MiB line) and each line escaped (a value's line feed
    # stays ``\n``: a line of it can never read as the report's own).
    return [
        escape(str(pretty_print_diff(_CutValues(item))))  # type: ignore[no-untyped-call]
        for kind in sorted(tree.keys())
        for item in tree[kind]
    ]


def _cut(value: Any) -> Any:
    """``value`` as DeepDiff's text shows it, cut to ``_OUTPUT_WIDTH`` characters."""
    text = str(value)
    if len(text) <= _OUTPUT_WIDTH:
        return value
    cut = text[:_OUTPUT_WIDTH] + "…"
    if isinstance(value, str):
        return cut
    # Keeps the type's name, which a type change's line names.
    return type(type(value).__name__, (), {"__str__": lambda _self: cut})()


class _CutValues:
    """A DeepDiff report item whose two values are cut (``pretty_print_diff`` reads these)."""

    def __init__(self, item: Any) -> None:
        self._item = item
        self.t1, self.t2 = _cut(item.t1), _cut(item.t2)
        self.verbose_level, self.report_type = item.verbose_level, item.report_type

    def path(self, **kwargs: Any) -> Any:
        return self._item.path(**kwargs)


def end_divergence_detail(
    fields: Sequence[str],
    *,
    before: Any,
    before_label: str,
    after: Any,
    traced_memory_sha256: str | None,
    outputs: Sequence[BlobDigest],
) -> list[str]:
    """Lines explaining an ACTIVATION_END divergence on its output or memory digests.

    Args:
        fields: The differing field paths of the event.
        before: The memory the re-run started from.
        before_label: Where ``before`` came from (e.g. "snapshot memory (post-image at seq 7)").
        after: The memory the re-run committed.
        traced_memory_sha256: The traced digest, to say whether ``before`` is production's.
        outputs: The re-run's outputs, marked.
    """
    lines: list[str] = []
    if any(ATTR_MEMORY_SHA256 in f for f in fields):
        before_is_traced = (
            traced_memory_sha256 is not None and memory_digest(before) == traced_memory_sha256
        )
        lines.append(
            f"memory: {before_label} → replayed memory"
            + (
                " (the snapshot's memory matches the traced digest: it is what production "
                "committed, so this is exactly what the re-run wrote differently)"
                if before_is_traced
                else " (the re-run's own writes; production committed another memory, whose "
                f"digest is {traced_memory_sha256})"
            )
        )
        lines.extend(f"  {line}" for line in memory_diff_lines(before, after))
    if any(ATTR_OUTPUTS_SHA256 in f for f in fields):
        for i, out in enumerate(outputs):
            if out.mark is Mark.VERIFIED:
                lines.append(f"outputs[{i}]: matches the traced digest")
            else:
                text = repr(out.payload.decode("utf-8", "backslashreplace"))
                cut = text if len(text) <= _OUTPUT_WIDTH else text[:_OUTPUT_WIDTH] + "…"
                lines.append(f"outputs[{i}]: {out.mark.value}, replayed {out.size} bytes: {cut}")
    return lines


def write_set(writes: MemoryWrites) -> WriteSet:
    """``writes`` as the result shows it."""
    return WriteSet(set=dict(writes.set), deleted=writes.deleted, sha256=writes.digest())


def _value_text(value: Any) -> str:
    text = canonical_json.dumps(value).decode("utf-8")
    return text if len(text) <= _OUTPUT_WIDTH else text[:_OUTPUT_WIDTH] + "…"


def _production_wrote(
    key: str, before: Any, provenance: MemoryProvenance, seq: int
) -> tuple[bool | None, int | None]:
    """Whether seq ``seq`` wrote ``key``, by the snapshot's provenance (None: it cannot
    tell), and the later seq that hides it when it cannot."""
    since = provenance.since
    recorded = provenance.written.get(key) if key in before else provenance.deleted.get(key)
    if recorded is None:
        return (False, None) if since is not None and since <= seq else (None, None)
    if recorded == seq:
        return True, None
    return (False, None) if recorded < seq else (None, recorded)


def production_writes(
    before: Any, provenance: MemoryProvenance, seq: int, traced_sha256: str | None
) -> MemoryWrites | None:
    """The write set of seq ``seq`` as the snapshot keeps it (the keys its seq last wrote),
    when that is the whole of it: its digest is ``traced_sha256``."""
    if traced_sha256 is None:
        return None
    if any(k not in before for k, s in provenance.written.items() if s == seq):
        return None  # not a provenance any writer of this memory wrote
    candidate = MemoryWrites(
        set={k: before[k] for k, s in sorted(provenance.written.items()) if s == seq},
        deleted=tuple(sorted(k for k, s in provenance.deleted.items() if s == seq)),
    )
    return candidate if candidate.digest() == traced_sha256 else None


def write_differences(
    replayed: MemoryWrites, *, before: Any, provenance: MemoryProvenance, seq: int
) -> tuple[list[str], list[str]]:
    """One line per key where the re-run's writes and production's differ (``dropped:``,
    ``added:``, ``changed:``), or where the snapshot cannot tell what production wrote;
    then DeepDiff of the first changed value (on that one value, not the whole memory).
    And each key named, as ``dropped 'notes'``."""
    keys = sorted(
        replayed.keys()
        | {k for k, s in provenance.written.items() if s == seq}
        | {k for k, s in provenance.deleted.items() if s == seq}
    )
    lines: list[str] = []
    named: list[str] = []
    first_change: tuple[str, Any, Any] | None = None
    for key in keys:
        wrote, hidden_by = _production_wrote(key, before, provenance, seq)
        in_rerun = key in replayed.set or key in replayed.deleted
        rerun = (
            f"set it to {_value_text(replayed.set[key])}" if key in replayed.set else "deleted it"
        )
        if wrote is True:
            production = f"set it to {_value_text(before[key])}" if key in before else "deleted it"
            if not in_rerun:
                lines.append(
                    f"dropped: {key!r}: production {production}; the re-run did not write it"
                )
                named.append(f"dropped {key!r}")
            elif (key in before) != (key in replayed.set):
                lines.append(f"changed: {key!r}: production {production}; the re-run {rerun}")
                named.append(f"changed {key!r}")
            elif key in before and canonical_json.dumps(before[key]) != canonical_json.dumps(
                replayed.set[key]
            ):
                lines.append(f"changed: {key!r}: production {production}; the re-run {rerun}")
                named.append(f"changed {key!r}")
                if first_change is None:
                    first_change = (key, before[key], replayed.set[key])
        elif wrote is False:
            lines.append(f"added: {key!r}: the re-run {rerun}; production did not write it")
            named.append(f"added {key!r}")
        elif in_rerun:
            hidden = (
                f"seq {hidden_by} wrote it since"
                if hidden_by is not None
                else "its memory blob does not record who wrote it"
            )
            lines.append(
                f"{key!r}: the re-run {rerun}; whether production wrote it, and what, the "
                f"snapshot cannot tell ({hidden})"
            )
    if not lines:
        lines.append(
            "every key the snapshot can tell about agrees: the difference is in what the "
            "re-run wrote to keys later activations rewrote"
        )
    if first_change is not None:
        key, production_value, rerun_value = first_change
        lines.append(f"{key!r}, production → re-run:")
        lines.extend(f"  {line}" for line in memory_diff_lines(production_value, rerun_value))
    return lines, named


@dataclass(frozen=True)
class EndCheck:
    """What the re-run's outputs and memory say against the traced ACTIVATION_END."""

    outputs: tuple[BlobDigest, ...]
    memory: BlobDigest | None
    traced: bool
    """The traced ACTIVATION_END carries the digests."""
    fields: tuple[FieldDiff, ...] = ()
    """The digests that differ *and* can be judged: a divergence at ACTIVATION_END."""
    not_comparable: str = ""
    """Why a differing memory cannot be judged, one clause without ``;`` (empty when none)."""
    detail: tuple[str, ...] = ()
    """With ``fields``: the lines explaining them (``end_divergence_detail``)."""
    writes: MemoryWritesDigest | None = None
    """The re-run's memory write set against the traced one (None: it committed nothing)."""
    unseen: tuple[UnseenRead, ...] = ()
    """The re-run's reads whose values the snapshot does not hold as the original saw them."""
    write_keys: tuple[str, ...] = ()
    """With a write-set divergence: each key it names, as ``dropped 'notes'``."""


def check_end(
    traced: Sequence[TraceEvent] | None,
    *,
    outputs: Sequence[bytes],
    memory_body: bytes | None,
    writes: MemoryWrites | None,
    before: Any,
    after: Any,
    provenance: MemoryProvenance,
    seq: int,
    snapshot_seq: int,
    capture: ValueCapture,
) -> EndCheck:
    """Mark the re-run's outputs, memory and writes; find its unseen reads; decide which
    differences are divergences (the judge decides what the unseen reads leave of them).

    Args:
        traced: The traced events of the activation (None for a what-if).
        outputs: The re-run's outputs.
        memory_body: The canonical JSON of the memory the re-run committed (None: nothing).
        writes: What the re-run wrote to memory (None: it committed nothing).
        before: The memory the re-run started from (the snapshot's).
        after: The memory the re-run committed.
        provenance: Who last wrote each key of ``before`` (the snapshot's).
        seq: The replayed seq.
        snapshot_seq: The snapshot's seq.
        capture: What the re-run read and wrote, and when.
    """
    digests = end_digests(traced)
    marked = tuple(blob_digest(o, digests.output(i)) for i, o in enumerate(outputs))
    memory = None if memory_body is None else blob_digest(memory_body, digests.memory)
    failed = bool(traced) and traced is not None and traced[-1].kind == TraceEvent.ACTIVATION_FAILED
    right_after = snapshot_seq == seq or (
        digests.memory is not None and memory_digest(before) == digests.memory
    )
    own: MemoryWrites | None = None
    if failed:
        own = MemoryWrites()  # a failed activation commits nothing
    elif writes is not None and (digests.writes is None or writes.digest() == digests.writes):
        # Known when the re-run's matches the traced digest; for a trace from before the
        # digest, the re-run's is taken for it (what older replays assumed).
        own = writes
    judged_provenance = resolved(provenance, seq=seq, right_after=right_after, own=own)
    unseen = (
        unseen_reads(capture, memory=before, provenance=judged_provenance, seq=seq)
        if traced is not None
        else ()
    )
    writes_view: MemoryWritesDigest | None = None
    write_keys: list[str] = []
    if writes is not None:
        replayed = write_set(writes)
        if digests.writes is None:
            mark = Mark.UNVERIFIABLE
        else:
            mark = Mark.VERIFIED if replayed.sha256 == digests.writes else Mark.DIFFERS
        production = production_writes(before, judged_provenance, seq, digests.writes)
        differences: list[str] = []
        if mark is Mark.DIFFERS:
            differences, write_keys = write_differences(
                writes, before=before, provenance=judged_provenance, seq=seq
            )
        writes_view = MemoryWritesDigest(
            replayed=replayed,
            traced_sha256=digests.writes,
            mark=mark,
            production=None if production is None else write_set(production),
            differences=tuple(differences),
        )
    if not digests.traced or memory is None:
        return EndCheck(
            outputs=marked, memory=memory, traced=digests.traced, writes=writes_view, unseen=unseen
        )
    fields: list[FieldDiff] = []
    why: list[str] = []
    replayed_outputs = outputs_digest_text(tuple(outputs))
    if digests.outputs is not None and replayed_outputs != ",".join(digests.outputs):
        fields.append(
            FieldDiff(
                path=f"attributes[{ATTR_OUTPUTS_SHA256!r}]",
                traced=repr(",".join(digests.outputs)),
                replayed=repr(replayed_outputs),
            )
        )
    later_snapshot = (
        f"the snapshot holds the memory after seq {snapshot_seq}, not the memory this "
        "activation committed, so the re-run did not start from it"
    )
    if writes_view is not None and writes_view.traced_sha256 is not None:
        if writes_view.mark is Mark.DIFFERS:
            fields.append(
                FieldDiff(
                    path=f"attributes[{ATTR_MEMORY_WRITES_SHA256!r}]",
                    traced=repr(writes_view.traced_sha256),
                    replayed=repr(writes_view.replayed.sha256),
                )
            )
        if memory.mark is Mark.DIFFERS and not right_after:
            why.append(
                f"the snapshot holds the memory after seq {snapshot_seq}, so the re-run started "
                "from another memory than this activation did; what it wrote is judged instead "
                "(memory writes)"
            )
    elif memory.mark is Mark.DIFFERS:
        # A trace from before the write-set digest: only the end memory can be judged.
        if memory_digest(before) != digests.memory:
            why.append(later_snapshot)
        elif unseen:
            why.append(f"the re-run {unseen[0].text}")
        else:
            fields.append(
                FieldDiff(
                    path=f"attributes[{ATTR_MEMORY_SHA256!r}]",
                    traced=repr(digests.memory),
                    replayed=repr(memory.sha256),
                )
            )
    detail: list[str] = []
    if fields:
        paths = [f.path for f in fields]
        detail = end_divergence_detail(
            paths,
            before=before,
            before_label=f"snapshot memory (post-image at seq {snapshot_seq})",
            after=after,
            traced_memory_sha256=digests.memory,
            outputs=marked,
        )
        if writes_view is not None and any(ATTR_MEMORY_WRITES_SHA256 in p for p in paths):
            detail.append(
                "memory writes: production's (as the snapshot's provenance keeps them) → the "
                "re-run's"
            )
            detail.extend(f"  {line}" for line in writes_view.differences)
    return EndCheck(
        outputs=marked,
        memory=memory,
        traced=True,
        fields=tuple(fields),
        not_comparable="; ".join(why),
        detail=tuple(detail),
        writes=writes_view,
        unseen=unseen,
        write_keys=tuple(write_keys),
    )
