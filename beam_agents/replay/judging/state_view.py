"""The reported-not-judged parts of a ``ReplayResult``: state, intents ledger, digests.

Nothing here affects the verdict (the comparison of the events does). Outputs
and the committed memory are reported as size + sha256 and marked against the
digests the traced ``ACTIVATION_END`` carries (a trace written before those
digests existed has none: they are then unverifiable, reported and not diffed);
the state view is the snapshot as loaded, for an operator to look at.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from beam_agents._protos import Continuation, ToolIntent, TraceEvent
from beam_agents.entry_cache import LookupStatus, entry_status
from beam_agents.key_state import KeyState
from beam_agents.replay.result import (
    BlobDigest,
    CacheEntryView,
    ContinuationView,
    EntryStatus,
    IntentRow,
    Mark,
    PendingIntentView,
    ServedRecording,
    StateView,
    ToolCacheEntryView,
)
from beam_agents.tool_cache import ToolCache, tool_cache_key, tool_entry_status
from beam_agents.trace_view import (
    ActivationEnd,
    IntentReleased,
    IntentStaged,
    LlmCall,
    ToolCall,
    decode,
)

__all__ = [
    "EndDigests",
    "blob_digest",
    "end_digests",
    "intent_ledger",
    "served_recordings",
    "state_view",
    "tool_cache_view",
]


def blob_digest(data: bytes, traced_sha256: str | None = None) -> BlobDigest:
    """Size and sha256 of ``data`` (kept too, for viewing), marked against ``traced_sha256``."""
    sha = hashlib.sha256(data).hexdigest()
    if traced_sha256 is None:
        mark = Mark.UNVERIFIABLE
    else:
        mark = Mark.VERIFIED if sha == traced_sha256 else Mark.DIFFERS
    return BlobDigest(
        size=len(data), sha256=sha, payload=data, traced_sha256=traced_sha256, mark=mark
    )


class EndDigests:
    """The traced ACTIVATION_END's output, memory and memory-writes digests (``traced``
    False: none traced; ``writes`` None: a trace from before the write-set digest)."""

    __slots__ = ("memory", "outputs", "traced", "writes")

    def __init__(self, end: TraceEvent | None) -> None:
        view = ActivationEnd.of(end) if end is not None else None
        self.traced = view is not None and view.digests_traced
        self.outputs: list[str] | None = None
        self.memory: str | None = None
        self.writes: str | None = None
        if view is not None and view.outputs_sha256 is not None:
            self.outputs = list(view.outputs_sha256)
        if view is not None:
            self.memory = view.memory_sha256
            self.writes = view.memory_writes_sha256

    def output(self, index: int) -> str | None:
        """The traced digest of output ``index``, None if not traced (or not that many)."""
        if self.outputs is None or index >= len(self.outputs):
            return None
        return self.outputs[index]


def end_digests(traced: Sequence[TraceEvent] | None) -> EndDigests:
    """The digests of the traced activation's ACTIVATION_END (its last event), if it has one."""
    end = traced[-1] if traced else None
    if end is not None and end.kind != TraceEvent.ACTIVATION_END:
        end = None
    return EndDigests(end)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_or_marker(data: bytes) -> Any:
    """Decoded JSON for display, or a marker string (NaN/Infinity refused: --json emits JSON)."""
    if not data:
        return None
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return f"<{len(data)} bytes, not JSON>"


def _continuation_view(cont: Continuation | None) -> ContinuationView | None:
    if cont is None:
        return None
    return ContinuationView(
        suspended_seq=cont.suspended_seq,
        step_index=cont.step_index,
        awaiting_intent_ids=tuple(cont.awaiting_intent_ids),
        deadline_ms=cont.deadline_ms,
        adapter_state=_json_or_marker(cont.adapter_snapshot),
    )


def _pending_view(intent: ToolIntent) -> PendingIntentView:
    return PendingIntentView(
        intent_id=intent.intent_id,
        tool=intent.tool,
        seq=intent.seq,
        created_ms=intent.created_ms,
        expires_at_ms=intent.expires_at_ms,
        requires_approval=intent.requires_approval,
        approval_channel=intent.approval_channel,
        args=_json_or_marker(intent.args),
    )


def _entry_status(status: LookupStatus) -> EntryStatus:
    return EntryStatus.SERVABLE if status is LookupStatus.HIT else EntryStatus(status.value)


def _hit_keys(replayed: Iterable[TraceEvent]) -> set[str]:
    calls = (LlmCall.of(e) for e in replayed if e.kind == TraceEvent.LLM_CALL)
    return {c.cache_key for c in calls if c.cache_key is not None and c.cache_hit}


def _served_calls(
    replayed: Sequence[TraceEvent], served_tool_events: Sequence[int]
) -> set[tuple[str, str]]:
    served: set[tuple[str, str]] = set()
    for index in served_tool_events:
        if index < len(replayed):
            event = replayed[index]
            served.add((event.name, ToolCall.of(event).args_sha256 or ""))
    return served


def tool_cache_view(
    cache: ToolCache,
    *,
    now_ms: int,
    visible_through_seq: int | None,
    served: Collection[tuple[str, str]] = (),
) -> tuple[ToolCacheEntryView, ...]:
    """The recorded tool results, most recently used first, with their status at ``now_ms``."""
    views = []
    for rank, entry in enumerate(cache.entries_by_recency(), start=1):
        status = _entry_status(
            tool_entry_status(entry, now_ms=now_ms, visible_through_seq=visible_through_seq)
        )
        views.append(
            ToolCacheEntryView(
                tool=entry.tool,
                args_sha256=entry.args_sha256,
                result_sha256=entry.result_sha256.hex(),
                result_size=entry.result_size,
                age_ms=now_ms - entry.inserted_ms,
                ttl_left_ms=entry.inserted_ms + entry.ttl_ms - now_ms,
                lru_rank=rank,
                status=status,
                inserted_seq=entry.inserted_seq,
                recorded_seq=entry.recorded_seq,
                served_in_activation=(entry.tool, entry.args_sha256) in served,
            )
        )
    return tuple(views)


def served_recordings(
    cache: ToolCache,
    *,
    now_ms: int,
    replayed: Sequence[TraceEvent],
    served_tool_events: Sequence[int],
) -> tuple[ServedRecording, ...]:
    """Each recorded result the re-run was served (its TOOL_CALLs at ``served_tool_events``),
    with the seqs that recorded it and how long before ``now_ms`` it was last recorded."""
    found: list[ServedRecording] = []
    for index in served_tool_events:
        if index >= len(replayed):
            continue
        event = replayed[index]
        call = ToolCall.of(event)
        if call.args_sha256 is None:
            continue
        entry = cache.get(tool_cache_key(event.name, call.args_sha256))
        if entry is None:  # pragma: no cover - a served call was served from an entry
            continue
        found.append(
            ServedRecording(
                event_index=index,
                tool=event.name,
                args_sha256=call.args_sha256,
                result_sha256=entry.result_sha256.hex(),
                minted_seq=entry.inserted_seq,
                recorded_seq=entry.recorded_seq,
                recorded_at_ms=entry.inserted_ms,
                age_ms=now_ms - entry.inserted_ms,
            )
        )
    return tuple(found)


def state_view(
    state: KeyState,
    *,
    now_ms: int,
    blob_versions: dict[str, int],
    resumed: Continuation | None,
    replayed: Sequence[TraceEvent],
    served_tool_events: Sequence[int] = (),
    visible_through_seq: int | None = None,
) -> StateView:
    """The snapshot's state as loaded, seen at the activation clock ``now_ms``.

    Args:
        state: Its migrated state.
        now_ms: The activation clock (cache ages and TTLs are judged against it).
        blob_versions: Each blob's stored version.
        resumed: For a resume, the continuation the re-run consumed.
        replayed: The re-run's events (to mark the cache entries it was served).
        served_tool_events: Indices of the re-run's TOOL_CALLs served from the tool cache.
        visible_through_seq: The replayed seq (tool results recorded later are marked).
    """
    hits = _hit_keys(replayed)
    entries = tuple(
        CacheEntryView(
            cache_key=entry.cache_key,
            model=entry.model,
            provider=entry.provider,
            age_ms=now_ms - entry.inserted_ms,
            ttl_left_ms=entry.inserted_ms + entry.ttl_ms - now_ms,
            lru_rank=rank,
            digest_only=entry.digest_only,
            inserted_seq=entry.inserted_seq,
            hit_in_activation=entry.cache_key in hits,
            response=None if entry.digest_only else entry.response,
            status=_entry_status(
                entry_status(entry, now_ms=now_ms, visible_through_seq=visible_through_seq)
            ),
        )
        for rank, entry in enumerate(state.cache.entries_by_recency(), start=1)
    )
    return StateView(
        memory=state.memory,
        cache_entries=entries,
        pending=tuple(_pending_view(i) for i in state.pending),
        continuation=_continuation_view(state.continuation),
        blob_versions=dict(blob_versions),
        migrations_applied=tuple(state.migrations_applied),
        resumed_continuation=_continuation_view(resumed),
        tool_cache_entries=tool_cache_view(
            state.tool_cache,
            now_ms=now_ms,
            visible_through_seq=visible_through_seq,
            served=_served_calls(replayed, served_tool_events),
        ),
    )


class _Row:
    __slots__ = (
        "expires_at_ms",
        "intent_id",
        "replayed_released",
        "replayed_staged",
        "requires_approval",
        "tool",
        "traced_released",
        "traced_staged",
    )

    def __init__(self, intent_id: str, tool: str) -> None:
        self.intent_id = intent_id
        self.tool = tool
        self.traced_staged = self.replayed_staged = False
        self.traced_released = self.replayed_released = False
        self.requires_approval = False
        self.expires_at_ms: int | None = None


def intent_ledger(
    traced: Sequence[TraceEvent] | None, replayed: Sequence[TraceEvent]
) -> tuple[IntentRow, ...]:
    """Every intent staged or released on either side, traced first, in order of appearance.

    ``requires_approval`` and ``expires_at_ms`` are the re-run's when it staged
    the intent, else the trace's.
    """
    rows: dict[str, _Row] = {}
    for side, events in (("traced", traced or ()), ("replayed", replayed)):
        for event in events:
            if event.kind not in (TraceEvent.INTENT_STAGED, TraceEvent.INTENT_RELEASED):
                continue
            view = decode(event)
            assert isinstance(view, IntentStaged | IntentReleased)
            intent_id = view.intent_id or ""
            row = rows.get(intent_id)
            if row is None:
                tool = (isinstance(view, IntentStaged) and view.tool_name) or event.name
                row = rows[intent_id] = _Row(intent_id, tool)
            if isinstance(view, IntentStaged):
                setattr(row, f"{side}_staged", True)
                if side == "replayed" or not row.replayed_staged:
                    if view.requires_approval is not None:
                        row.requires_approval = view.requires_approval
                    if view.expires_at_ms is not None:
                        row.expires_at_ms = view.expires_at_ms
            else:
                setattr(row, f"{side}_released", True)
    return tuple(
        IntentRow(
            intent_id=row.intent_id,
            tool=row.tool,
            traced_staged=row.traced_staged,
            replayed_staged=row.replayed_staged,
            traced_released=row.traced_released,
            replayed_released=row.replayed_released,
            requires_approval=row.requires_approval,
            expires_at_ms=row.expires_at_ms,
        )
        for row in rows.values()
    )
