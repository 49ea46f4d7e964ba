"""``--json``: a ``ReplayResult`` as one JSON document with stable field names.

The schema is documented in docs/replay.md ("JSON output") and versioned by
``JSON_SCHEMA``: fields may be added in a minor release; renaming or removing
one, or changing its meaning, bumps it. Bytes are lowercase hex. Trace events
use the layout of ``beam_agents.trace_data.event_to_dict``.

Every string is shown as the terminal report shows it (``escape.escape_strings``:
``jq -r .reason`` prints no raw escape sequence); the values themselves (a value's
``value``, the state's memory, a memory write set's ``set``, intent arguments, a
continuation's ``adapter_state``) are the data, exact (``Raw``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from beam_agents.agent_build import describe_build
from beam_agents.replay.reporting.escape import Raw, escape_strings
from beam_agents.replay.reporting.json_lines import write_document
from beam_agents.replay.reporting.labels import not_judged
from beam_agents.replay.result import (
    BlobDigest,
    CacheMiss,
    ContinuationView,
    Divergence,
    EventPair,
    ForkRun,
    MemoryWritesDigest,
    ReferenceRun,
    ReplayHeader,
    ReplayResult,
    StateView,
    Value,
    WriteSet,
)
from beam_agents.trace_data import event_to_dict

__all__ = [
    "JSON_SCHEMA",
    "pair_document",
    "reference_values",
    "render_json",
    "result_to_dict",
    "value_document",
    "write_json",
]

JSON_SCHEMA = "beam-agents-replay/1"
"""The ``schema`` field of every document."""


def _blob(digest: BlobDigest | None) -> dict[str, Any] | None:
    if digest is None:
        return None
    return {
        "size": digest.size,
        "sha256": digest.sha256,
        "hex": digest.payload.hex(),
        "traced_sha256": digest.traced_sha256,
        "mark": digest.mark.value,
    }


def _header(h: ReplayHeader) -> dict[str, Any]:
    return {
        "version": h.version,
        "agent": h.agent_path,
        "registry": h.registry_path,
        "entity_key": h.entity_key.hex() if h.entity_key is not None else None,
        "seq": h.seq,
        "now_ms": h.now_ms,
        "kind": h.kind or None,
        "trigger": h.trigger or None,
        "envelope_id": h.envelope_id or None,
        "provider": h.provider or None,
        "hitl_policy": h.hitl_policy or None,
        "hitl_source": h.hitl_source,
        "continuation_source": h.continuation_source or None,
        "agent_build": describe_build(h.agent_build) if h.agent_build is not None else None,
        "snapshot_agent_build": describe_build(h.snapshot_build)
        if h.snapshot_build is not None
        else None,
        "build_skew": list(h.build_skew),
        "snapshot": {
            "seq": h.snapshot_seq,
            "snapshot_at_ms": h.snapshot_at_ms,
            "request_id": h.snapshot_request_id,
            "state_schema_version": h.state_schema_version,
            "migrations_applied": list(h.migrations_applied),
        },
    }


def _divergence(d: Divergence | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "index": d.index,
        "kind": d.kind,
        "name": d.name,
        "missing": d.missing,
        "extra": d.extra,
        "fields": [{"path": f.path, "traced": f.traced, "replayed": f.replayed} for f in d.fields],
        "detail": d.detail,
    }


def _miss(m: CacheMiss | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "event_index": m.event_index,
        "cache_key": m.cache_key,
        "model": m.model,
        "status": m.status,
        "traced_cache_key": m.traced_cache_key,
        "nearest": None
        if m.nearest is None
        else {
            "cache_key": m.nearest.cache_key,
            "model": m.nearest.model,
            "differences": list(m.nearest.differences),
        },
    }


def _continuation(c: ContinuationView | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "suspended_seq": c.suspended_seq,
        "step_index": c.step_index,
        "awaiting_intent_ids": list(c.awaiting_intent_ids),
        "deadline_ms": c.deadline_ms,
        "adapter_state": Raw(c.adapter_state),
    }


def _state(s: StateView | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "memory": Raw(s.memory),
        "cache_entries": [
            {
                "cache_key": e.cache_key,
                "model": e.model,
                "provider": e.provider,
                "age_ms": e.age_ms,
                "ttl_left_ms": e.ttl_left_ms,
                "lru_rank": e.lru_rank,
                "digest_only": e.digest_only,
                "inserted_seq": e.inserted_seq,
                "hit_in_activation": e.hit_in_activation,
                "status": e.status,
            }
            for e in s.cache_entries
        ],
        "pending": [
            {
                "intent_id": p.intent_id,
                "tool": p.tool,
                "seq": p.seq,
                "created_ms": p.created_ms,
                "expires_at_ms": p.expires_at_ms,
                "requires_approval": p.requires_approval,
                "approval_channel": p.approval_channel,
                "args": Raw(p.args),
            }
            for p in s.pending
        ],
        "continuation": _continuation(s.continuation),
        "resumed_continuation": _continuation(s.resumed_continuation),
        "blob_versions": dict(s.blob_versions),
        "migrations_applied": list(s.migrations_applied),
        "tool_cache_entries": [
            {
                "tool": e.tool,
                "args_sha256": e.args_sha256,
                "result_sha256": e.result_sha256,
                "result_size": e.result_size,
                "age_ms": e.age_ms,
                "ttl_left_ms": e.ttl_left_ms,
                "lru_rank": e.lru_rank,
                "status": e.status,
                "inserted_seq": e.inserted_seq,
                "recorded_seq": e.recorded_seq,
                "served_in_activation": e.served_in_activation,
            }
            for e in s.tool_cache_entries
        ],
    }


def result_to_dict(result: ReplayResult) -> dict[str, Any]:
    """The JSON document of ``result`` as Python data (see docs/replay.md for the schema)."""
    document = _document(result)
    document["events"] = list(document["events"])
    document["values"] = list(document["values"])
    return document


def _document(result: ReplayResult) -> dict[str, Any]:
    """``result_to_dict`` with ``events`` and ``values`` lazy: only for ``write_document``.
    Every string escaped, but the values (``Raw``)."""
    document = escape_strings(_fields(result))
    document["events"] = _Lazy(result.events, pair_document)
    document["values"] = _Lazy(result.values, value_document)
    return document  # type: ignore[no-any-return]


def _fields(result: ReplayResult) -> dict[str, Any]:
    """The document's fields, with ``events`` and ``values`` left out (``_document``)."""
    return {
        "schema": JSON_SCHEMA,
        "verdict": result.verdict.value,
        "exit_code": result.exit_code,
        "reason": result.reason,
        "error": result.error or None,
        "header": _header(result.header),
        "provider_calls": result.provider_calls,
        "network_attempts": list(result.network_attempts),
        "first_divergence": _divergence(result.first_divergence),
        "cache_miss": _miss(result.cache_miss),
        "tool_miss": None
        if result.tool_miss is None
        else {
            "event_index": result.tool_miss.event_index,
            "tool": result.tool_miss.tool,
            "args_sha256": result.tool_miss.args_sha256,
            "status": result.tool_miss.status,
            "traced_args_sha256": result.tool_miss.traced_args_sha256,
            "nearest_args_sha256": result.tool_miss.nearest_args_sha256,
            "differences": list(result.tool_miss.differences),
            "held_seq": result.tool_miss.held_seq,
            "held_result_sha256": result.tool_miss.held_result_sha256,
            "traced_result_sha256": result.tool_miss.traced_result_sha256,
        },
        "served_tool_events": list(result.served_tool_events),
        "served_recordings": [
            {
                "event_index": r.event_index,
                "tool": r.tool,
                "args_sha256": r.args_sha256,
                "result_sha256": r.result_sha256,
                "minted_seq": r.minted_seq,
                "recorded_seq": r.recorded_seq,
                "recorded_at_ms": r.recorded_at_ms,
                "age_ms": r.age_ms,
            }
            for r in result.served_recordings
        ],
        "events": [],
        "events_reached_only": result.events_reached_only,
        "intents": [
            {
                "intent_id": row.intent_id,
                "tool": row.tool,
                "traced_staged": row.traced_staged,
                "replayed_staged": row.replayed_staged,
                "traced_released": row.traced_released,
                "replayed_released": row.replayed_released,
                "requires_approval": row.requires_approval,
                "expires_at_ms": row.expires_at_ms,
            }
            for row in result.intents
        ],
        "outputs": [_blob(o) for o in result.outputs],
        "memory": _blob(result.memory),
        "memory_writes": _memory_writes(result.memory_writes),
        "memory_reads_unseen": [
            {
                "key": read.key,
                "keys": list(read.keys),
                "event_index": read.event_index,
                "why": read.why.value,
                "seq": read.seq,
                "text": read.text,
            }
            for read in result.unseen_reads
        ],
        "not_judged": not_judged(result) or None,
        "end_digests_traced": result.end_digests_traced,
        "values_error": result.values_error or None,
        "values": [],
        "memory_not_judged": result.memory_not_judged or None,
        "state": _state(result.state),
        "reference": _reference(result.reference),
        "fork": _fork(result.fork),
    }


def _fork(f: ForkRun | None) -> dict[str, Any] | None:
    """A fork's facts: the event answered differently, with what, and how it went on."""
    if f is None:
        return None
    return {
        "counterfactual": True,  # never a reproduction, whatever the exit code
        "event_index": f.index,
        "kind": f.kind,
        "name": f.name,
        "value": f.value,
        "value_source": f.value_source,
        "provider": f.provider_path or None,
        "provider_calls": f.provider_calls,
        "network": f"only {f.provider_path}'s model calls" if f.provider_path else "none",
        "ended_at": f.ended_at,
        "outcome": f.outcome,
    }


def reference_values(r: ReferenceRun, index: int | None = None) -> list[dict[str, Any]]:
    """The reference run's proved values (of event ``index`` only, if given), as the
    document's ``reference.values`` holds them (the TUI's ``c`` copies an event's)."""
    return [
        {**value_document(v), "rehashed": key in r.rehashed}
        for key, v in sorted(r.values.items())
        if index is None or key[0] == index
    ]


def _reference(r: ReferenceRun | None) -> dict[str, Any] | None:
    """The reference run: which build, its verdict, and the values it proved production's."""
    if r is None:
        return None
    return {
        "agent": r.agent_path,
        "source": r.source,
        "seq": r.seq,
        "verdict": r.verdict or None,
        "reason": r.reason,
        "first_divergence_index": r.first_divergence,
        "values": Raw(reference_values(r)),  # each escaped but its value (value_document)
    }


def _write_set(writes: WriteSet | None) -> dict[str, Any] | None:
    if writes is None:
        return None
    return {"set": Raw(dict(writes.set)), "deleted": list(writes.deleted), "sha256": writes.sha256}


def _memory_writes(writes: MemoryWritesDigest | None) -> dict[str, Any] | None:
    if writes is None:
        return None
    return {
        "replayed": _write_set(writes.replayed),
        "traced_sha256": writes.traced_sha256,
        "mark": writes.mark.value,
        "production": _write_set(writes.production),
        "differences": list(writes.differences),
    }


def pair_document(pair: EventPair) -> dict[str, Any]:
    """One traced/replayed pair as the document's ``events`` hold it: the one encoding of a
    pair (the TUI's ``c`` copies exactly this), every string escaped."""
    document: dict[str, Any] = escape_strings({
        "index": pair.index,
        "differs": pair.differs,
        "differing_fields": list(pair.differing_fields),
        "normalized_fields": list(pair.normalized_fields),
        "traced": event_to_dict(pair.traced) if pair.traced is not None else None,
        "replayed": event_to_dict(pair.replayed) if pair.replayed is not None else None,
    })
    return document


def value_document(v: Value) -> dict[str, Any]:
    """One value as the document's ``values`` hold it (the TUI's ``c`` copies these too),
    every string escaped but the value itself (``Raw``)."""
    return escape_strings({  # type: ignore[no-any-return]
        "event_index": v.event_index,
        "path": v.path,
        "mark": v.mark.value,
        "value": Raw(v.value),
        "text": v.text,
        "is_bytes": v.is_bytes,
        "digest": v.digest,
        "traced_digest": v.traced_digest,
        "attribute": v.attribute,
    })


class _Lazy(list):  # type: ignore[type-arg]
    """An array of the document (``events``, ``values``), each element built only when the
    encoder reaches it.

    ``write_document`` iterates it element by element, so a 100,000-event activation
    never holds 100,000 event dicts (or its values) at once. Never handed out: the C
    encoder would see an empty list, so ``result_to_dict`` returns real ones. Iterating the result's sequence derives its items as it goes
    (``EventPairs``, ``ValueList``).
    """

    def __init__(self, items: Sequence[Any], convert: Callable[[Any], dict[str, Any]]) -> None:
        super().__init__()
        self._items = items
        self._convert = convert

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._convert(item) for item in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._convert(item) for item in self._items[index]]
        return self._convert(self._items[index])

    def __eq__(self, other: object) -> bool:
        return list(self) == other

    __hash__ = None


_STREAMED = ("events", "values")
"""The document's long arrays, one element per line (``json_lines``)."""


def render_json(result: ReplayResult) -> str:
    """The JSON document of ``result`` (``json_lines``' layout; ASCII; one trailing newline)."""
    out = io.StringIO()
    write_json(result, out)
    return out.getvalue()


def write_json(result: ReplayResult, out: TextIO, *, chunk_chars: int = 1 << 16) -> None:
    """Write exactly ``render_json(result)`` to ``out``, in chunks, never the whole text at once.

    Peak memory stays near one event's JSON plus ``chunk_chars``, not the document's size;
    every piece is encoded by the standard library's C encoder (``json_lines``).
    """
    write_document(out, _document(result), streamed=_STREAMED, chunk_chars=chunk_chars)
