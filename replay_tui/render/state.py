"""The state view, the intents ledger and the outputs list, as rows of literal text.

Everything here formats what the result holds (``StateView``, ``IntentRow``,
``BlobDigest``); the widgets only place these rows in tables and trees.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from beam_agents.canonical_json import MAX_JSON_DEPTH
from beam_agents.replay.reporting.escape import escape, escape_bytes
from beam_agents.replay.reporting.labels import utc_time
from beam_agents.replay.reporting.text import (
    digest_note,
    memory_writes_counts,
    memory_writes_note,
)
from beam_agents.replay.result import (
    BlobDigest,
    CacheEntryView,
    ContinuationView,
    EntryStatus,
    IntentRow,
    Mark,
    PendingIntentView,
    ReplayResult,
    StateView,
    ToolCacheEntryView,
)
from replay_tui.render.literal import clip, duration

JSON_PREVIEW_CHARS = 60
PAYLOAD_VIEW_BYTES = 64 * 1024
"""The payload viewer shows this much; the rest is summarized (a terminal is not a hex editor)."""

YES = Text("yes", style="bold")
NO = Text("no", style="dim")


def _yes_no(value: bool) -> Text:
    return YES.copy() if value else NO.copy()


def json_preview(value: Any, width: int = JSON_PREVIEW_CHARS) -> str:
    """A one-line literal preview of a JSON value (for table cells and tree leaves)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    return clip(escape(text), width)


# -- memory: which image, and the replayed activation's own delta -----------------------------

_DELTA_VALUE_CHARS = 120
_DELTA_MAX_ROWS = 200


def memory_image_text(result: ReplayResult) -> Text:
    """Which memory the tree shows: the snapshot's post-image, not the target's pre-image."""
    h = result.header
    text = Text("snapshot post-image", style="bold")
    text.append(f" at seq {h.snapshot_seq}" if h.snapshot_seq is not None else "")
    text.append(
        f": the key's memory when it was exported, after seq {h.snapshot_seq}; the re-run of "
        f"seq {h.seq} started from it (replay has no pre-image: docs/replay.md §4)",
        style="dim",
    )
    return text


def _short(value: Any) -> str:
    shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(shown) > _DELTA_VALUE_CHARS:
        shown = shown[:_DELTA_VALUE_CHARS] + "…"
    return escape(shown)


_MATCH_BUDGET = 4_000_000
"""Lists whose differing middles are larger (items × items) are compared by position."""


def _item_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False, default=repr)


def _list_steps(
    where: str, old: list[Any], new: list[Any]
) -> tuple[list[tuple[str, Any, Any]], list[tuple[str, str, str]]]:
    """How two lists differ, their items matched by content, not by position.

    Returns the pairs of items to compare further (``(path, old, new)``, where an item
    changed in place) and the rows already decided: an item removed, added, or moved (the
    same item at another index: a reorder is named as one, never as every field changed).
    """
    old_keys, new_keys = [_item_key(i) for i in old], [_item_key(i) for i in new]
    if len(old) * len(new) > _MATCH_BUDGET:
        by_position = [
            (
                f"{where}[{i}]",
                old[i] if i < len(old) else _ABSENT,
                new[i] if i < len(new) else _ABSENT,
            )
            for i in range(max(len(old), len(new)))
            if i >= len(old) or i >= len(new) or old_keys[i] != new_keys[i]
        ]
        return by_position, []
    matcher = difflib.SequenceMatcher(None, old_keys, new_keys, autojunk=False)
    pairs: list[tuple[str, Any, Any]] = []
    removed: dict[str, list[int]] = {}
    added: dict[str, list[int]] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                pairs.append((f"{where}[{j}]", old[i], new[j]))
            continue
        for i in range(i1, i2):
            removed.setdefault(old_keys[i], []).append(i)
        for j in range(j1, j2):
            added.setdefault(new_keys[j], []).append(j)
    rows: list[tuple[int, tuple[str, str, str]]] = []
    for key, old_at in removed.items():
        new_at = added.get(key, [])
        while old_at and new_at:
            i, j = old_at.pop(0), new_at.pop(0)
            rows.append(
                (j, (f"{where}[{i}]", _short(old[i]), f"moved to {where}[{j}] (same item)"))
            )
    for old_at in removed.values():
        rows.extend((i, (f"{where}[{i}]", _short(old[i]), "—")) for i in old_at)
    for new_at in added.values():
        rows.extend((j, (f"{where}[{j}]", "—", _short(new[j]))) for j in new_at)
    return pairs, [row for _, row in sorted(rows, key=lambda r: r[0])]


def memory_delta(before: Any, after: Any, path: str = "") -> list[tuple[str, str, str]]:
    """``(path, before, after)`` for each leaf that differs (``"—"`` where absent), in order.

    A hand-written walk (no DeepDiff): objects key by key; lists item by item matched by
    content (``difflib``'s longest matching blocks), so an item inserted, removed or moved
    is one row and the items around it are not marked changed; an item changed in place
    is walked into. Anything else that differs is one row. Cut at a few hundred rows.
    """
    rows: list[tuple[str, str, str]] = []
    stack: list[tuple[str, Any, Any]] = [(path, before, after)]
    while stack and len(rows) < _DELTA_MAX_ROWS:
        where, old, new = stack.pop()
        if old == new and type(old) is type(new):
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new), reverse=True):
                stack.append(
                    (f"{where}[{json.dumps(key)}]", old.get(key, _ABSENT), new.get(key, _ABSENT))
                )
            continue
        if isinstance(old, list) and isinstance(new, list):
            pairs, decided = _list_steps(where, old, new)
            rows.extend(decided)
            stack.extend(reversed(pairs))
            continue
        rows.append(
            (
                where or "memory",
                "—" if old is _ABSENT else _short(old),
                "—" if new is _ABSENT else _short(new),
            )
        )
    return rows[:_DELTA_MAX_ROWS]


_ABSENT = object()


def memory_delta_text(result: ReplayResult) -> Text:
    """The replayed activation's own writes: snapshot memory → the re-run's committed memory."""
    text = Text("this activation's memory delta (replayed)", style="bold underline")
    if result.replayed_memory is None or result.state is None:
        text.append(
            "\n  none: the re-run committed nothing (a failure commits nothing)", style="dim"
        )
        return text
    rows = memory_delta(result.state.memory, result.replayed_memory)
    if result.memory is not None:
        text.append(f"   {digest_note(result, result.memory)}", style=_memory_style(result))
    writes = result.memory_writes
    if writes is not None:
        # What is judged: the keys the re-run wrote, against the traced write set.
        text.append("\n  memory writes: ", style="bold")
        text.append(memory_writes_counts(writes))
        text.append(f" {memory_writes_note(result, writes)}", style=_NOTE_STYLES[writes.mark])
        written = [
            *(f"set {k!r}" for k in writes.replayed.set),
            *(f"deleted {k!r}" for k in writes.replayed.deleted),
        ]
        if written:
            text.append(f"  ({escape(', '.join(written))})", style="dim")
    for read in result.unseen_reads:
        text.append("\n  not judged: ", style="bold yellow")
        text.append(escape(f"{read.text} (before event {read.event_index})"), style="yellow")
    if not rows:
        text.append("\n  no change: the re-run wrote back what the snapshot holds", style="dim")
    for where, old, new in rows:
        text.append(f"\n  {escape(where)}: ", style="bold")
        text.append(old, style="red")
        text.append(" → ")
        text.append(new, style="green")
    return text


# -- memory tree ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonNode:
    """One node of the memory tree: its label, and its children if it is a container."""

    label: Text
    children: tuple[JsonNode, ...] | None
    """None for a leaf; a tuple (possibly empty) for an object or array."""


def _leaf_label(name: str, value: Any) -> Text:
    label = Text()
    label.append(escape(name), style="bold")
    label.append(" = ")
    if isinstance(value, str):
        label.append(f'"{escape(value)}"', style="green")
    elif value is None or isinstance(value, bool):
        label.append(json.dumps(value), style="italic")
    else:
        label.append(json_preview(value), style="cyan")
    return label


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def json_tree(value: Any, name: str = "memory") -> JsonNode:
    """The memory JSON as a tree of literal labels (keys and strings may hold anything).

    Built without recursion, whatever the nesting; containers deeper than
    ``MAX_JSON_DEPTH`` (the loader's own limit) are shown as a note, not opened.
    """
    labels: list[Text] = []
    children_of: list[list[int] | None] = []
    stack: list[tuple[Any, str, int, int]] = [(value, name, 0, -1)]
    while stack:
        item, item_name, depth, parent = stack.pop()
        index = len(labels)
        if parent >= 0:
            kids = children_of[parent]
            assert kids is not None
            kids.append(index)
        if isinstance(item, (dict, list)) and depth >= MAX_JSON_DEPTH:
            label = Text(escape(item_name), style="bold")
            label.append(f"  … nested deeper than {MAX_JSON_DEPTH} levels (not shown)", style="dim")
            labels.append(label)
            children_of.append(None)
        elif isinstance(item, dict):
            label = Text(escape(item_name), style="bold")
            label.append(f"  {{}} {_count(len(item), 'key')}", style="dim")
            labels.append(label)
            children_of.append([])
            entries = sorted(item.items())
            stack.extend((v, str(k), depth + 1, index) for k, v in reversed(entries))
        elif isinstance(item, list):
            label = Text(escape(item_name), style="bold")
            label.append(f"  [] {_count(len(item), 'item')}", style="dim")
            labels.append(label)
            children_of.append([])
            stack.extend(
                (item[i], f"[{i}]", depth + 1, index) for i in range(len(item) - 1, -1, -1)
            )
        else:
            labels.append(_leaf_label(item_name, item))
            children_of.append(None)
    # Children always come after their parent: build the nodes from the last one back.
    built: list[JsonNode | None] = [None] * len(labels)
    for index in range(len(labels) - 1, -1, -1):
        kids = children_of[index]
        built[index] = JsonNode(
            labels[index], None if kids is None else tuple(_built(built, k) for k in kids)
        )
    return _built(built, 0)


def _built(built: list[JsonNode | None], index: int) -> JsonNode:
    node = built[index]
    assert node is not None
    return node


# -- cache, pending, continuation, versions ---------------------------------------------------

CACHE_COLUMNS = ("LRU", "hit", "key", "model", "age", "TTL left", "digest-only", "provider", "seq")
"""What a row says first comes first: at 80 columns the whole key pushed ``hit`` off screen
(the key is cut to ``CACHE_KEY_CHARS``; the entry's pane below the table shows it whole)."""

CACHE_KEY_CHARS = 16


def cache_rows(entries: tuple[CacheEntryView, ...]) -> list[tuple[Text, ...]]:
    """One row per cache entry, most recently used first."""
    rows: list[tuple[Text, ...]] = []
    for entry in sorted(entries, key=lambda e: e.lru_rank):
        ttl = (
            Text(duration(entry.ttl_left_ms))
            if entry.ttl_left_ms > 0
            else Text(f"expired {duration(-entry.ttl_left_ms)} ago", style="bold yellow")
        )
        rows.append(
            (
                Text(str(entry.lru_rank), style="dim"),
                Text("hit", style="bold green") if entry.hit_in_activation else NO.copy(),
                Text(clip(escape(entry.cache_key), CACHE_KEY_CHARS + 1)),
                Text(escape(entry.model)),
                _cache_age(entry),
                ttl,
                Text("digest-only", style="bold yellow") if entry.digest_only else NO.copy(),
                Text(escape(entry.provider)),
                Text(str(entry.inserted_seq), style="dim"),
            )
        )
    return rows


def cache_entry_text(entry: CacheEntryView, limit: int = PAYLOAD_VIEW_BYTES) -> Text:
    """One cache entry whole: its key, and the cached response's text and tool calls as the
    snapshot holds them (controls shown as escapes), or why there is none."""
    text = Text(f"LRU {entry.lru_rank}  ", style="bold")
    text.append(escape(entry.cache_key))
    text.append(f"\nmodel {escape(entry.model)}  provider {escape(entry.provider)}", style="dim")
    text.append(f"  inserted at seq {entry.inserted_seq}\n\n", style="dim")
    response = entry.response
    if response is None:
        text.append(
            "digest-only: the pipeline kept the response's digest, not the response (replay "
            "cannot serve it)",
            style="bold yellow",
        )
        return text
    shown = response.text[:limit]
    text.append(escape(shown, multiline=True) if shown else "(no text)")
    if len(response.text) > limit:
        text.append(f"\n… {len(response.text) - limit} more characters not shown", style="dim")
    for call in response.tool_calls:
        text.append(f"\n\ntool call {escape(call.name)}: ", style="bold")
        text.append(escape(clip(call.arguments_json, limit), multiline=True))
    if response.stop_reason:
        text.append(f"\n\nstop reason {escape(response.stop_reason)}", style="dim")
    return text


def _cache_age(entry: CacheEntryView) -> Text:
    """The entry's age; "minted later" only when the engine says so (``EntryStatus``)."""
    if entry.status is EntryStatus.MINTED_LATER:
        return Text(f"minted later (seq {entry.inserted_seq})", style="bold yellow")
    if entry.age_ms >= 0:
        return Text(duration(entry.age_ms))
    return Text(f"{duration(-entry.age_ms)} after the clock", style="dim")


TOOL_CACHE_COLUMNS = (
    "LRU",
    "tool",
    "args sha256",
    "status",
    "age",
    "TTL left",
    "size",
    "served",
    "seqs",
)

_TOOL_STATUS_STYLES = {
    "servable": "green",
    "digest_only": "bold yellow",
    "expired": "bold yellow",
    "minted_later": "bold yellow",
    "ambiguous": "bold red",
}


def tool_cache_rows(entries: tuple[ToolCacheEntryView, ...]) -> list[tuple[Text, ...]]:
    """One row per recorded tool result, most recently used first, with its status at now_ms."""
    rows: list[tuple[Text, ...]] = []
    for entry in sorted(entries, key=lambda e: e.lru_rank):
        ttl = (
            Text(duration(entry.ttl_left_ms))
            if entry.ttl_left_ms > 0
            else Text(f"expired {duration(-entry.ttl_left_ms)} ago", style="bold yellow")
        )
        seqs = (
            f"{entry.inserted_seq}"
            if entry.inserted_seq == entry.recorded_seq
            else f"{entry.inserted_seq}..{entry.recorded_seq}"
        )
        rows.append(
            (
                Text(str(entry.lru_rank), style="dim"),
                Text(escape(entry.tool)),
                Text(escape(entry.args_sha256)),
                Text(escape(entry.status), style=_TOOL_STATUS_STYLES.get(entry.status, "")),
                Text(duration(entry.age_ms))
                if entry.age_ms >= 0
                else Text(f"recorded {duration(-entry.age_ms)} later", style="dim"),
                ttl,
                Text(f"{entry.result_size} B"),
                Text("hit", style="bold green") if entry.served_in_activation else NO.copy(),
                Text(seqs, style="dim"),
            )
        )
    return rows


PENDING_COLUMNS = ("intent", "tool", "seq", "created", "expires", "approval", "channel", "args")


def pending_rows(pending: tuple[PendingIntentView, ...]) -> list[tuple[Text, ...]]:
    """One row per pending intent of the snapshot."""
    return [
        (
            Text(escape(p.intent_id)),
            Text(escape(p.tool)),
            Text(str(p.seq)),
            Text(utc_time(p.created_ms)),
            Text(utc_time(p.expires_at_ms)),
            _yes_no(p.requires_approval),
            Text(escape(p.approval_channel) or "-"),
            Text(json_preview(p.args)),
        )
        for p in pending
    ]


def continuation_text(cont: ContinuationView | None, now_ms: int | None) -> Text:
    """The continuation: step index, awaited intents, deadline (and how far from now_ms)."""
    if cont is None:
        return Text("The key was not suspended in this snapshot (no continuation).", style="dim")
    text = Text()
    text.append("suspended at seq ", style="bold")
    text.append(str(cont.suspended_seq))
    text.append("\nstep index       ", style="bold")
    text.append(str(cont.step_index))
    text.append("\nawaiting         ", style="bold")
    text.append(", ".join(escape(i) for i in cont.awaiting_intent_ids) or "nothing")
    text.append("\ndeadline         ", style="bold")
    text.append(f"{cont.deadline_ms} ({utc_time(cont.deadline_ms)})")
    if now_ms is not None:
        left = cont.deadline_ms - now_ms
        text.append(
            f"  {duration(left)} after now_ms"
            if left >= 0
            else f"  passed {duration(-left)} before now_ms",
            style="dim",
        )
    text.append("\nadapter state\n", style="bold")
    pretty = json.dumps(
        cont.adapter_state, ensure_ascii=False, sort_keys=True, indent=2, default=repr
    )
    text.append(escape(pretty, multiline=True))
    return text


def versions_text(result: ReplayResult, state: StateView | None) -> Text:
    """Schema versions of the snapshot and its blobs, and the migrations applied in memory."""
    header = result.header
    text = Text()
    text.append("snapshot schema  ", style="bold")
    text.append("?" if header.state_schema_version is None else f"v{header.state_schema_version}")
    if state is not None:
        for kind, version in sorted(state.blob_versions.items()):
            text.append(f"\n{escape(kind):<17}", style="bold")
            text.append(f"v{version} (as stored)")
    migrations = state.migrations_applied if state is not None else header.migrations_applied
    text.append("\nmigrations       ", style="bold")
    if migrations:
        for step in migrations:
            text.append(f"\n  {escape(step)}")
        text.append("\n  (applied in memory; nothing written back)", style="dim")
    else:
        text.append("none")
    if header.continuation_source:
        text.append("\ncontinuation     ", style="bold")
        text.append(escape(header.continuation_source))
    text.append("\nhitl policy      ", style="bold")
    text.append(f"{escape(header.hitl_policy) or '-'} ({escape(header.hitl_source)})")
    return text


# -- intents ledger ---------------------------------------------------------------------------

INTENT_COLUMNS = (
    "",
    "intent",
    "tool",
    "traced staged",
    "replayed staged",
    "traced released",
    "replayed released",
    "approval",
    "expires",
)


def intent_columns(*, forked: bool = False) -> tuple[str, ...]:
    """The ledger's column headings; a fork's right side is ``forked``, not ``replayed``."""
    if not forked:
        return INTENT_COLUMNS
    return tuple(c.replace("replayed", "forked") for c in INTENT_COLUMNS)


def _agree(traced: bool, replayed: bool, unreached: bool = False) -> tuple[Text, Text]:
    if unreached and not replayed:  # the fork ended first: not judged, never "no"
        return Text("yes" if traced else "no", style="bold" if traced else "dim"), Text(
            "not reached", style="dim italic"
        )
    style = "" if traced == replayed else "bold red"
    return (
        Text("yes" if traced else "no", style=style or ("bold" if traced else "dim")),
        Text("yes" if replayed else "no", style=style or ("bold" if replayed else "dim")),
    )


def intent_rows(
    intents: tuple[IntentRow, ...], *, unreached: bool = False
) -> list[tuple[Text, ...]]:
    """One ledger row per intent; cells where trace and re-run disagree are red
    (``unreached``: a fork that ended short, whose "no" is "not reached")."""
    rows: list[tuple[Text, ...]] = []
    for row in intents:
        staged = _agree(row.traced_staged, row.replayed_staged, unreached)
        released = _agree(row.traced_released, row.replayed_released, unreached)
        pairs = (
            (row.traced_staged, row.replayed_staged),
            (row.traced_released, row.replayed_released),
        )
        mismatch = any(t != r for t, r in pairs if r or not unreached)
        rows.append(
            (
                Text("≠", style="bold red") if mismatch else Text(""),
                Text(escape(row.intent_id)),
                Text(escape(row.tool)),
                staged[0],
                staged[1],
                released[0],
                released[1],
                _yes_no(row.requires_approval),
                Text("-" if row.expires_at_ms is None else utc_time(row.expires_at_ms)),
            )
        )
    return rows


# -- outputs ----------------------------------------------------------------------------------

OUTPUT_COLUMNS = ("artefact", "size", "sha256", "note")


def output_rows(result: ReplayResult) -> list[tuple[Text, ...]]:
    """One row per output, then the post-activation memory blob."""
    rows: list[tuple[Text, ...]] = [
        (
            Text(f"outputs[{i}]", style="bold"),
            Text(f"{o.size} bytes"),
            Text(o.sha256),
            Text(digest_note(result, o), style=_NOTE_STYLES[o.mark]),
        )
        for i, o in enumerate(result.outputs)
    ]
    if result.memory is not None:
        rows.append(
            (
                Text("memory blob", style="bold"),
                Text(f"{result.memory.size} bytes"),
                Text(result.memory.sha256),
                Text(digest_note(result, result.memory), style=_memory_style(result)),
            )
        )
    writes = result.memory_writes
    if writes is not None:
        rows.append(
            (
                Text("memory writes", style="bold"),
                Text(f"{len(writes.replayed.set)} set, {len(writes.replayed.deleted)} del"),
                Text(writes.replayed.sha256),
                Text(memory_writes_note(result, writes), style=_NOTE_STYLES[writes.mark]),
            )
        )
    return rows


_NOTE_STYLES = {Mark.VERIFIED: "green", Mark.DIFFERS: "bold red", Mark.UNVERIFIABLE: "dim"}


def _memory_style(result: ReplayResult) -> str:
    """A memory that differs but is not judged is a note, not an alarm: yellow, not red."""
    memory = result.memory
    if memory is None:
        return _NOTE_STYLES[Mark.UNVERIFIABLE]
    if memory.mark is Mark.DIFFERS and result.memory_not_judged:
        return "yellow"
    return _NOTE_STYLES[memory.mark]


def payload_as_text(blob: BlobDigest, limit: int = PAYLOAD_VIEW_BYTES) -> Text:
    """The payload decoded as UTF-8, every control character shown as an escape."""
    if not blob.payload and blob.size:
        return Text(
            "The result carries no payload bytes for this artefact (digest only).", style="dim"
        )
    shown = blob.payload[:limit]
    text = Text(escape_bytes(shown, multiline=True))
    if len(blob.payload) > limit:
        text.append(f"\n… {len(blob.payload) - limit} more bytes not shown", style="dim")
    return text


def hexdump_lines(data: bytes, limit: int = PAYLOAD_VIEW_BYTES) -> Iterator[str]:
    """Classic 16-bytes-per-line hex dump lines; non-printable bytes shown as dots."""
    for offset in range(0, min(len(data), limit), 16):
        chunk = data[offset : offset + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        ascii_part = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        yield f"{offset:08x}  {hex_part:<47}  {ascii_part}"


def payload_as_hex(blob: BlobDigest, limit: int = PAYLOAD_VIEW_BYTES) -> Text:
    """The payload as a hex dump (safe by construction: hex digits and printable ASCII)."""
    if not blob.payload and blob.size:
        return Text(
            "The result carries no payload bytes for this artefact (digest only).", style="dim"
        )
    text = Text("\n".join(hexdump_lines(blob.payload, limit)))
    if len(blob.payload) > limit:
        text.append(f"\n… {len(blob.payload) - limit} more bytes not shown", style="dim")
    return text
