"""Outputs and memory at ``ACTIVATION_END``: marked against the traced digests, and judged.

The traced ``ACTIVATION_END`` carries the sha256 of each output
(``beam_agents.outputs.sha256``) and of the committed memory's canonical JSON
(``beam_agents.memory_sha256``). Each replayed one is *verified* when its sha256
equals the traced digest and *differs* when not. Whether a difference is a
divergence (exit 1) depends on what the re-run started from, because replay
starts from a snapshot's memory, which is a post-image (docs/replay.md §4):

- memory: comparable only when the snapshot's memory *is* this activation's
  committed memory (its digest equals the traced one: the snapshot was taken
  right after it) and the re-run read no memory key it also wrote or changed
  (from a post-image such a read returns the activation's own write: ``turns +=
  1`` replays as 2). Otherwise the difference is reported with the reason it
  cannot be judged, and the verdict rests on the events.
- outputs: compared as-is, like intent arguments (docs/replay.md §4 states the same
  limit for both); when the re-run read a memory key it also writes, the
  divergence says so, since an output built from such a read differs for that
  reason.

A trace written before these digests existed has neither: outputs and memory
are then unverifiable, reported and not diffed, as before.

The memory change is shown as a structured diff (DeepDiff, imported here only,
when a memory difference is rendered).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beam_agents import canonical_json
from beam_agents._protos import TraceEvent
from beam_agents.capture import ValueCapture
from beam_agents.replay.judging.state_view import blob_digest, end_digests
from beam_agents.replay.result import BlobDigest, FieldDiff, Mark
from beam_agents.trace_events import (
    ATTR_MEMORY_SHA256,
    ATTR_OUTPUTS_SHA256,
    outputs_digest_text,
)

__all__ = ["EndCheck", "check_end", "end_divergence_detail", "memory_diff_lines", "memory_digest"]

_OUTPUT_WIDTH = 240


def memory_digest(memory: Any) -> str:
    """sha256 hex of a memory's canonical JSON: what ``beam_agents.memory_sha256`` holds."""
    return hashlib.sha256(canonical_json.dumps(memory)).hexdigest()


def memory_diff_lines(before: Any, after: Any) -> list[str]:
    """The structured difference ``before`` → ``after`` (root is the memory object)."""
    if before == after:
        return ["(no key differs)"]
    try:
        from deepdiff import DeepDiff
    except ImportError:  # a stripped install: name the top-level keys that differ
        keys = sorted(
            set(before) ^ set(after)
            | {k for k in set(before) & set(after) if before[k] != after[k]}
        )
        return [f"key {k!r} differs" for k in keys]
    pretty: str = DeepDiff(before, after, verbose_level=2).pretty()
    return pretty.splitlines()


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
    self_read: str = ""
    """Which memory keys the re-run read and also wrote (a hint at an output divergence)."""
    detail: tuple[str, ...] = ()
    """With ``fields``: the lines explaining them (``end_divergence_detail``)."""


def _changed_keys(before: Any, after: Any) -> set[str]:
    keys = set(before) | set(after)
    return {k for k in keys if before.get(k, _MISSING) != after.get(k, _MISSING)}


_MISSING = object()


def check_end(
    traced: Sequence[TraceEvent] | None,
    *,
    outputs: Sequence[bytes],
    memory_body: bytes | None,
    before: Any,
    after: Any,
    snapshot_seq: int,
    capture: ValueCapture,
) -> EndCheck:
    """Mark the re-run's outputs and memory and decide which differences are divergences.

    Args:
        traced: The traced events of the activation (None for a what-if).
        outputs: The re-run's outputs.
        memory_body: The canonical JSON of the memory the re-run committed (None: nothing).
        before: The memory the re-run started from (the snapshot's).
        after: The memory the re-run committed.
        snapshot_seq: The snapshot's seq (for the reason a memory cannot be compared).
        capture: What the re-run read and wrote.
    """
    digests = end_digests(traced)
    marked = tuple(blob_digest(o, digests.output(i)) for i, o in enumerate(outputs))
    memory = None if memory_body is None else blob_digest(memory_body, digests.memory)
    if not digests.traced or memory is None:
        return EndCheck(outputs=marked, memory=memory, traced=digests.traced)
    wrote = capture.memory_writes | _changed_keys(before, after)
    reads = capture.memory_reads
    self_read = sorted(wrote if "*" in reads and wrote else reads & wrote)
    fields: list[FieldDiff] = []
    why: list[str] = []
    read_why = (
        f"the re-run read memory {', '.join(repr(k) for k in self_read)}, which it also "
        "writes, so from the snapshot's post-image it read this activation's own write"
    )
    replayed_outputs = outputs_digest_text(tuple(outputs))
    if digests.outputs is not None and replayed_outputs != ",".join(digests.outputs):
        fields.append(
            FieldDiff(
                path=f"attributes[{ATTR_OUTPUTS_SHA256!r}]",
                traced=repr(",".join(digests.outputs)),
                replayed=repr(replayed_outputs),
            )
        )
    if memory.mark is Mark.DIFFERS:
        if memory_digest(before) != digests.memory:
            why.append(
                f"the snapshot holds the memory after seq {snapshot_seq}, not the memory this "
                "activation committed, so the re-run did not start from it"
            )
        elif self_read:
            why.append(read_why)
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
        if self_read and any(ATTR_OUTPUTS_SHA256 in path for path in paths):
            detail.append(f"note: {read_why}; an output built from it differs for that reason")
    return EndCheck(
        outputs=marked,
        memory=memory,
        traced=True,
        fields=tuple(fields),
        not_comparable="; ".join(why),
        self_read=read_why if self_read else "",
        detail=tuple(detail),
    )
