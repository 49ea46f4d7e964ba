"""``ReplayResult``: everything one replay established, as frozen data.

One function (``beam_agents.replay.engine.replay``) produces it; the headless
report, ``--json`` and the TUI all render it and compute nothing of their own
(docs/index.md, "How the code is laid out", rule 3), so they cannot disagree on a verdict.

Verdicts and exit codes are the seed page's table:

    REPRODUCED      0  the re-run matched the traced record
    WHAT_IF         0  a pending resume that has not run: no traced outcome to diff
    FORK            0  a fork that ran to its end: a counterfactual, not a reproduction
    DIVERGED        1  the first diverging event is named in ``first_divergence``
    USAGE_ERROR     2  bad input, inputs that do not belong together, or a snapshot newer than us
    IRREPRODUCIBLE  3  a cache miss, a digest-only entry, a migration gap, a blocked network call,
                       a recorded tool call the tool cache cannot serve, a resume whose
                       continuation is no longer in the snapshot
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

from beam_agents._protos import AgentBuild, LlmResponse, TraceEvent
from beam_agents.trace_view import ActivationKind, Trigger


def text_digest(text: str) -> str:
    """How ``--redact`` shows a plaintext a message quotes (a command line, a path, an exit's
    text): ``sha256:<hex>`` of its UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _same_items(mine: Sequence[Any], other: Sequence[Any]) -> bool:
    """``==`` of a lazy sequence with any sequence (a tuple of the same items is equal)."""
    return len(mine) == len(other) and all(a == b for a, b in zip(mine, other, strict=True))


class Verdict(enum.Enum):
    REPRODUCED = "reproduced"
    WHAT_IF = "what-if"
    FORK = "fork"
    DIVERGED = "diverged"
    USAGE_ERROR = "error"
    IRREPRODUCIBLE = "irreproducible"

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for this verdict (the seed's table)."""
        return _EXIT_CODES[self]


EXIT_OK = 0
"""Reproduced, a what-if that ran to its end, or a command (``ls``, ``bundle``) that succeeded."""
EXIT_DIVERGED = 1
EXIT_USAGE = 2
"""Bad input, inputs that do not belong together, a newer snapshot, or a bug of ours."""
EXIT_IRREPRODUCIBLE = 3

_EXIT_CODES = {
    Verdict.REPRODUCED: EXIT_OK,
    Verdict.WHAT_IF: EXIT_OK,
    Verdict.FORK: EXIT_OK,
    Verdict.DIVERGED: EXIT_DIVERGED,
    Verdict.USAGE_ERROR: EXIT_USAGE,
    Verdict.IRREPRODUCIBLE: EXIT_IRREPRODUCIBLE,
}


class Mark(enum.Enum):
    """What the trace says about one replayed value (decided by the engine, rendered as is)."""

    VERIFIED = "verified"
    """Its sha256 equals the traced digest: this is the value that ran in production."""
    DIFFERS = "differs"
    """The traced digest is another value's: production had something else here."""
    UNVERIFIABLE = "unverifiable"
    """Nothing traced to check it against (an older trace, a what-if, an untraced field)."""


@dataclass(frozen=True, kw_only=True)
class Value:
    """One value of one replayed event, decoded from the re-run, marked against the trace."""

    event_index: int
    """Index of the event (the same in the trace and the re-run)."""
    path: str
    """What it is: ``request.messages[1]``, ``response.text``, ``args``, ``result``,
    ``error.message``, ``intent.args``, ``suspend.state``, ``outputs[0]``, ``memory``,
    ``envelope``..."""
    value: Any
    """The value as JSON data (bytes decoded as UTF-8, bad bytes as ``\\xNN``)."""
    text: str
    """The value as one string (JSON for structures); renderers escape and cut it."""
    mark: Mark
    digest: str | None = None
    """What was compared: the value's sha256 hex (a request's: its cache key or component
    digest; an error type: the type name)."""
    traced_digest: str | None = None
    """The traced counterpart of ``digest``; None when nothing was traced."""
    attribute: str | None = None
    """The trace attribute ``traced_digest`` comes from."""
    is_bytes: bool = False
    """The value was bytes (an output, a bytes tool result, an event payload)."""


class ValueList(Sequence[Value]):
    """A result's values in event order, derived when read, and the values of one event.

    The engine's (``values.ReplayValues``) keeps no ``Value``: it derives an event's values
    from what the re-run captured each time they are read, so a 100,000-event activation
    or a 1 MiB model response is held once, by the re-run, not again as values. Reading
    every value costs what deriving them costs; ``for_event`` reads one event's.
    """

    __slots__ = ()

    def for_event(self, index: int) -> tuple[Value, ...]:
        """The values of event ``index``, in the order iteration yields them."""
        raise NotImplementedError

    def search_texts(self, index: int) -> list[str]:
        """The path and the text of each of event ``index``'s values (what the TUI's ``/``
        searches), in the order ``for_event`` gives them."""
        return [text for v in self.for_event(index) for text in (v.path, v.text)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return _same_items(self, other)

    __hash__ = None  # type: ignore[assignment]


def event_values(values: Sequence[Value], index: int) -> tuple[Value, ...]:
    """The values of event ``index`` among ``values`` (cheap for a ``ValueList``)."""
    if isinstance(values, ValueList):
        return values.for_event(index)
    return tuple(v for v in values if v.event_index == index)


@dataclass(frozen=True, kw_only=True)
class ReplayHeader:
    """What was replayed, with what: the seed's header lines and the context around them."""

    version: str
    """The installed beam-agents version (skew with the pipeline's is a divergence source)."""
    agent_path: str
    """``module:ATTR`` of the agent, as given."""
    registry_path: str
    entity_key: bytes | None = None
    seq: int | None = None
    now_ms: int | None = None
    """The activation clock: the traced ACTIVATION_START.start_ms (for a what-if: the event's time)."""
    kind: ActivationKind | Literal[""] = ""
    """``start`` or ``resume``."""
    trigger: Trigger | Literal[""] = ""
    """``event``, ``tool_result``, ``approval`` or ``timeout``."""
    hitl_policy: str = ""
    """The HitlPolicy the re-run used, every setting on one line."""
    hitl_source: str = "default"
    """``default`` or the ``--hitl module:ATTR`` path."""
    snapshot_seq: int | None = None
    snapshot_at_ms: int | None = None
    snapshot_request_id: str = ""
    snapshot_waiting: str = ""
    """What the key waited on at export (a retry hold, its inbox): ``key_state.waiting_text``."""
    state_schema_version: int | None = None
    migrations_applied: tuple[str, ...] = ()
    """Blob migrations applied in memory while loading, e.g. ``llm_cache v1→v2``."""
    continuation_source: str = ""
    """For a resume: ``snapshot.continuation`` or ``snapshot.resumed_from[seq=N]``."""
    provider: str = ""
    """The provider name the re-run's cache keys were computed with (the traced one)."""
    envelope_id: str = ""
    """The triggering envelope's id (empty for a HITL timeout)."""
    agent_build: AgentBuild | None = None
    """The given agent's build (``beam_agents.agent_build``); None before it is imported."""
    snapshot_build: AgentBuild | None = None
    """The build that wrote the snapshot, as it recorded it (None: it recorded none)."""
    build_skew: tuple[str, ...] = ()
    """What differs between the two: ``class``, ``code``, ``version`` (empty: no skew known)."""

    def with_target(self, target: TargetFacts) -> ReplayHeader:
        """This header with what ``target`` knows about the replayed activation."""
        return replace(
            self,
            seq=self.seq if target.seq is None else target.seq,
            now_ms=self.now_ms if target.now_ms is None else target.now_ms,
            kind=target.kind or self.kind,
            trigger=target.trigger or self.trigger,
            envelope_id=target.envelope_id or self.envelope_id,
        )


@dataclass(kw_only=True)
class TargetFacts:
    """What replay knew about the target activation when it refused (``ReplayRefused.target``).

    Empty values mean "not known yet"; ``ReplayHeader.with_target`` keeps the header's own.
    """

    seq: int | None = None
    now_ms: int | None = None
    kind: ActivationKind | Literal[""] = ""
    trigger: Trigger | Literal[""] = ""
    envelope_id: str = ""


@dataclass(frozen=True, kw_only=True)
class FieldDiff:
    """One differing field of an event, traced vs replayed (values rendered as text)."""

    path: str
    """E.g. ``name``, ``attributes['beam_agents.result_sha256']``."""
    traced: str
    replayed: str


@dataclass(frozen=True, kw_only=True)
class EventPair:
    """One row of the timeline: the traced event and the replayed event at the same index."""

    index: int
    traced: TraceEvent | None
    """None when the re-run produced an extra event."""
    replayed: TraceEvent | None
    """None when the re-run stopped short of this traced event."""
    differs: bool
    """After normalization (``beam_agents.cache_hit``/``billed`` on LLM_CALL only)."""
    differing_fields: tuple[str, ...] = ()
    normalized_fields: tuple[str, ...] = ()
    """Paths (``attributes['…']``) whose raw values differ but were normalized: shown, not a
    difference. Decided by ``compare_events``; renderers keep no list of their own."""


class EventPairs(Sequence[EventPair]):
    """The timeline as positions into the traced and replayed events: each ``EventPair`` is
    built when read (``compare_events`` makes it).

    Pair ``i`` is ``traced[i]`` beside ``replayed[i]``; a position only one side has
    differs (missing or extra). What the comparison found is kept per differing
    position only, so a 100,000-event activation costs its two event sequences (held
    compactly: ``event_log.EventLog``) and nothing per matching event.
    """

    __slots__ = ("_differing", "_normalized", "replayed", "traced")

    def __init__(
        self,
        traced: Sequence[TraceEvent],
        replayed: Sequence[TraceEvent],
        *,
        differing: Mapping[int, tuple[str, ...]] | None = None,
        normalized: Mapping[int, tuple[str, ...]] | None = None,
    ) -> None:
        """``differing``: the fields of each position where both sides have an event and they
        differ; ``normalized``: the normalized fields of a position (``EventPair``)."""
        self.traced = traced
        self.replayed = replayed
        self._differing = dict(differing or {})
        self._normalized = dict(normalized or {})

    def __len__(self) -> int:
        return max(len(self.traced), len(self.replayed))

    @overload
    def __getitem__(self, position: int) -> EventPair: ...

    @overload
    def __getitem__(self, position: slice) -> tuple[EventPair, ...]: ...

    def __getitem__(self, position: int | slice) -> EventPair | tuple[EventPair, ...]:
        if isinstance(position, slice):
            return tuple(self[i] for i in range(*position.indices(len(self))))
        size = len(self)
        if position < 0:
            position += size
        if not 0 <= position < size:
            raise IndexError("event pair position out of range")
        return EventPair(
            index=position,
            traced=self.traced[position] if position < len(self.traced) else None,
            replayed=self.replayed[position] if position < len(self.replayed) else None,
            differs=self.differs_at(position),
            differing_fields=self._differing.get(position, ()),
            normalized_fields=self._normalized.get(position, ()),
        )

    def __iter__(self) -> Iterator[EventPair]:
        for position in range(len(self)):
            yield self[position]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return _same_items(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventPairs({len(self)} pairs, {len(self.differing_positions())} differ)"

    def differs_at(self, position: int) -> bool:
        """Whether the pair at ``position`` differs (without building it)."""
        return position in self._differing or position >= min(
            len(self.traced), len(self.replayed)
        )

    def differing_positions(self) -> list[int]:
        """The positions of every differing pair, ascending (without building any pair)."""
        common = min(len(self.traced), len(self.replayed))
        return sorted(self._differing) + list(range(common, len(self)))

    def marked(self, position: int, fields: Sequence[str]) -> EventPairs:
        """These pairs with the pair at ``position`` differing in ``fields`` too (a copy)."""
        differing = dict(self._differing)
        differing[position] = (*differing.get(position, ()), *fields)
        return EventPairs(
            self.traced, self.replayed, differing=differing, normalized=self._normalized
        )


def pair_counts(pairs: Sequence[EventPair]) -> tuple[int, int, int]:
    """How many of ``pairs`` have a traced event, a replayed event, and differ."""
    if isinstance(pairs, EventPairs):
        return len(pairs.traced), len(pairs.replayed), len(pairs.differing_positions())
    return (
        sum(1 for p in pairs if p.traced is not None),
        sum(1 for p in pairs if p.replayed is not None),
        sum(1 for p in pairs if p.differs),
    )


def differing_positions(pairs: Sequence[EventPair]) -> list[int]:
    """The positions of the differing pairs of ``pairs``, ascending (cheap for ``EventPairs``)."""
    if isinstance(pairs, EventPairs):
        return pairs.differing_positions()
    return [position for position, pair in enumerate(pairs) if pair.differs]


class StopCause(enum.StrEnum):
    """What stopped a replay short of a judgement on every traced event (``ReplayResult.stop``).

    Typed, so that what groups results (``check``'s causes) never reads it back out of
    the reason's words.
    """

    CACHE_MISS = "cache-miss"
    """A model call the snapshot's cache cannot serve."""
    TOOL_MISS = "tool-miss"
    """A recorded tool call the snapshot's tool cache cannot serve (also one it holds another
    seq's answer to: the answer this activation got was never committed)."""
    MEMORY_UNSEEN = "memory-unseen"
    """The re-run read a memory key whose value the snapshot does not hold as the original
    saw it (a later seq rewrote it, or the activation itself): not judged."""
    BLOCKED = "blocked"
    """The guard refused something the re-run tried (network, a process, a signal,
    native code, a file write)."""
    PROVIDER_REACHED = "provider-reached"
    """The provider that serves nothing was reached without a traced model call."""
    TIME_LIMIT = "time-limit"
    """The re-run ran past the time limit."""
    IMPORT_TIME_LIMIT = "import-time-limit"
    """Importing the agent code ran past the time limit."""
    AGENT_EXITED = "agent-exited"
    """Agent code called ``os._exit`` during the re-run (what it raises fails the activation)."""
    REFUSED = "refused"
    """The inputs were refused before anything was re-run (exit 2, or 3: something gone)."""
    INTERNAL_ERROR = "internal-error"
    """A bug of ours (exit 2)."""


class DivergenceKind(enum.StrEnum):
    """How the first diverging event disagrees (decided by ``compare.describe_divergence``)."""

    FIELDS = "fields"
    """Both sides have the event; the fields listed in ``Divergence.fields`` differ."""
    MISSING = "missing"
    """The trace has an event here and the re-run did not produce one."""
    EXTRA = "extra"
    """The re-run produced an event the trace does not have."""


@dataclass(frozen=True, kw_only=True)
class Divergence:
    """The first event where the re-run and the trace disagree."""

    index: int
    kind: str
    """Kind name of the traced event (or of the replayed one if the trace has none there);
    ``KIND_<n>`` for a kind number this version does not know."""
    name: str
    fields: tuple[FieldDiff, ...]
    how: DivergenceKind = DivergenceKind.FIELDS
    """Fields differ, or the event is missing from / extra in the re-run."""
    detail: str = ""
    """A human-readable structured diff of the event (deepdiff, rendered)."""

    @property
    def missing(self) -> bool:
        """The trace has an event here and the re-run did not produce one."""
        return self.how is DivergenceKind.MISSING

    @property
    def extra(self) -> bool:
        """The re-run produced an event the trace does not have."""
        return self.how is DivergenceKind.EXTRA


@dataclass(frozen=True, kw_only=True)
class NearestEntry:
    """The cached entry closest to a request that missed, and how it differs."""

    cache_key: str
    model: str
    differences: tuple[str, ...]
    """E.g. ``("messages[2]",)``."""


@dataclass(frozen=True, kw_only=True)
class CacheMiss:
    """A model call the replay cache could not serve."""

    event_index: int
    """Index of the replayed LLM_CALL that missed."""
    cache_key: str
    model: str
    status: str
    """``absent``, ``expired``, ``digest_only`` or ``minted_later``."""
    traced_cache_key: str | None = None
    """The cache key the traced LLM_CALL at that index had, if any."""
    nearest: NearestEntry | None = None
    traced_error_type: str = ""
    """The error the traced LLM_CALL at that index failed with (``""``: it did not fail)."""


@dataclass(frozen=True, kw_only=True)
class ToolCacheMiss:
    """A ``recorded=True`` tool call the snapshot's tool cache could not serve."""

    event_index: int
    """Index of the replayed TOOL_CALL that missed."""
    tool: str
    args_sha256: str
    """The re-run's canonical-args digest."""
    status: str
    """``absent``, ``expired``, ``digest_only``, ``minted_later``, ``ambiguous``, or
    ``other_seq``: the tool cache served an answer another seq got, not the traced one."""
    traced_args_sha256: str | None = None
    """The args digest the traced TOOL_CALL at that index had, if any."""
    nearest_args_sha256: str | None = None
    """The args digest of the recorded call of this tool closest to the re-run's."""
    differences: tuple[str, ...] = ()
    """How the nearest recorded call's arguments differ, e.g. ``("argument 'order_id' differs",)``."""
    held_seq: int | None = None
    """``other_seq``: the seq whose answer the entry holds (its ``inserted_seq``)."""
    held_result_sha256: str | None = None
    """``other_seq``: the result digest of that answer."""
    traced_result_sha256: str | None = None
    """``other_seq``: the result digest the traced call got (None: it raised)."""


class UnseenWhy(enum.StrEnum):
    """Why the snapshot's value of a memory key is not the one the replayed activation saw."""

    OWN_WRITE = "own_write"
    """The activation itself wrote (or deleted) it: the snapshot holds its write, not what it read."""
    REWRITTEN = "rewritten"
    """A later activation (``UnseenRead.seq``) wrote it."""
    DELETED = "deleted"
    """A later activation (``UnseenRead.seq``) deleted it."""
    UNKNOWN = "unknown"
    """The snapshot cannot tell: its memory blob predates per-key provenance, or forgot the
    deletions that old (``MemoryProvenance.since``)."""


@dataclass(frozen=True, kw_only=True)
class UnseenRead:
    """A read of memory whose value the re-run did not get as the original did (decided by
    the engine, ``judging.memory_reads``)."""

    key: str | None
    """The top-level key read; None for a read of the memory as a whole (iterating it,
    ``len``, ``to_dict``), whose keys are in ``keys``."""
    event_index: int
    """The trace event the read came before (reads happen between events)."""
    why: UnseenWhy
    seq: int | None = None
    """The seq that wrote or deleted the key (OWN_WRITE: the replayed seq itself)."""
    keys: tuple[str, ...] = ()
    """For a read of the whole memory: the keys behind it that were not as the original saw."""
    text: str = ""
    """One clause saying it, e.g. ``read 'notes', which seq 9 rewrote`` (renderers escape it)."""


@dataclass(frozen=True, kw_only=True)
class WriteSet:
    """What an activation wrote to memory: the top-level keys it set, with their values, and
    the keys it deleted (``memory_writes.MemoryWrites``, as JSON data)."""

    set: Mapping[str, Any]
    deleted: tuple[str, ...]
    sha256: str
    """sha256 hex of its canonical JSON, what ``beam_agents.memory_writes_sha256`` holds."""


@dataclass(frozen=True, kw_only=True)
class MemoryWritesDigest:
    """The re-run's memory write set against the traced digest (decided by the engine)."""

    replayed: WriteSet
    traced_sha256: str | None
    """The traced ``beam_agents.memory_writes_sha256``; None for an older trace or a what-if."""
    mark: Mark
    production: WriteSet | None = None
    """The traced activation's own write set, rebuilt from the snapshot's provenance (the
    keys its seq last wrote) when its sha256 is the traced one; None when the snapshot no
    longer holds it whole (a later seq rewrote one of its keys) or nothing was traced."""
    differences: tuple[str, ...] = ()
    """When it differs: one line per key, what production and the re-run wrote (``dropped:``,
    ``added:``, ``changed:``, or what the snapshot cannot tell), then DeepDiff of the first
    changed value."""


@dataclass(frozen=True, kw_only=True)
class ServedRecording:
    """A recorded tool result the re-run was served, and how old it is at its clock."""

    event_index: int
    """The replayed TOOL_CALL it answered."""
    tool: str
    args_sha256: str
    result_sha256: str
    minted_seq: int
    """The first seq from which every recording of this call returned this result."""
    recorded_seq: int
    """The seq of its latest recording."""
    recorded_at_ms: int
    """When it was last recorded (the activation clock of ``recorded_seq``)."""
    age_ms: int
    """How long before the re-run's clock that was."""


@dataclass(frozen=True, kw_only=True)
class IntentRow:
    """One intent of the ledger: what the trace says happened to it, and what the re-run did."""

    intent_id: str
    tool: str
    traced_staged: bool
    replayed_staged: bool
    traced_released: bool
    replayed_released: bool
    requires_approval: bool = False
    expires_at_ms: int | None = None


@dataclass(frozen=True, kw_only=True)
class BlobDigest:
    """An output or the committed memory: its size and sha256, checked against the trace."""

    size: int
    sha256: str
    payload: bytes = field(default=b"", repr=False)
    """The bytes themselves, for viewing on request (an output; memory's canonical JSON)."""
    traced_sha256: str | None = None
    """The digest the traced ACTIVATION_END holds for it; None when not traced."""
    mark: Mark = Mark.UNVERIFIABLE
    """VERIFIED when ``sha256 == traced_sha256``, DIFFERS when not, else UNVERIFIABLE."""


class EntryStatus(enum.StrEnum):
    """What a lookup of a cache entry at the activation clock finds (decided by the engine).

    The same rule as the lookups that served or missed the re-run's calls
    (``entry_cache.entry_status``, ``tool_cache.tool_entry_status``): a table of
    entries can never call servable what the replay refused.
    """

    SERVABLE = "servable"
    EXPIRED = "expired"
    DIGEST_ONLY = "digest_only"
    MINTED_LATER = "minted_later"
    """Inserted by an activation after the replayed one: not what it consumed."""
    AMBIGUOUS = "ambiguous"
    """Tool cache only: the recording activation got two results for the same call."""


@dataclass(frozen=True, kw_only=True)
class CacheEntryView:
    """One replay-cache entry of the snapshot, as the operator needs to see it at ``now_ms``."""

    cache_key: str
    model: str
    provider: str
    age_ms: int
    ttl_left_ms: int
    lru_rank: int
    """1 = most recently used."""
    digest_only: bool
    inserted_seq: int
    hit_in_activation: bool
    """The re-run was served this entry."""
    status: EntryStatus = EntryStatus.SERVABLE
    """What a lookup at the activation clock finds (the engine always sets it)."""
    response: LlmResponse | None = field(default=None, repr=False, compare=False)
    """The cached response as the snapshot holds it (None when digest-only): the state
    screen shows its text. A reference to the loaded cache's own message, not a copy."""


@dataclass(frozen=True, kw_only=True)
class ToolCacheEntryView:
    """One recorded tool result of the snapshot, as the operator needs to see it at ``now_ms``."""

    tool: str
    args_sha256: str
    result_sha256: str
    result_size: int
    age_ms: int
    """Since the latest recording."""
    ttl_left_ms: int
    lru_rank: int
    """1 = most recently used."""
    status: EntryStatus
    """What a lookup at the activation clock finds (``minted_later``: recorded with this
    result only after the replayed activation)."""
    inserted_seq: int
    """The first seq from which every recording returned this result."""
    recorded_seq: int
    """The seq of the latest recording."""
    served_in_activation: bool
    """The re-run was served this entry."""


@dataclass(frozen=True, kw_only=True)
class ContinuationView:
    suspended_seq: int
    step_index: int
    awaiting_intent_ids: tuple[str, ...]
    deadline_ms: int
    adapter_state: Any
    """The agent's Suspend(state=...) value, decoded JSON."""


@dataclass(frozen=True, kw_only=True)
class PendingIntentView:
    intent_id: str
    tool: str
    seq: int
    created_ms: int
    expires_at_ms: int
    requires_approval: bool
    approval_channel: str
    args: Any
    """Decoded JSON arguments."""


@dataclass(frozen=True, kw_only=True)
class StateView:
    """The snapshot's state, as loaded (migrated in memory) — the pre-replay picture."""

    memory: Any
    """Working memory (JSON object)."""
    cache_entries: tuple[CacheEntryView, ...]
    pending: tuple[PendingIntentView, ...]
    continuation: ContinuationView | None
    blob_versions: dict[str, int]
    """Schema version each blob was stored at, before migration."""
    migrations_applied: tuple[str, ...]
    tool_cache_entries: tuple[ToolCacheEntryView, ...] = ()
    """Recorded tool results (``@tool(recorded=True)``), most recently used first."""
    resumed_continuation: ContinuationView | None = None
    """For a resume: the continuation the re-run consumed (``header.continuation_source``
    says where it came from); ``continuation`` is the snapshot's own, which a completed
    resume has already replaced or cleared."""


@dataclass(frozen=True, kw_only=True)
class ReferenceRun:
    """The reference run: the same activation replayed first, in a fresh process of its own,
    with the build that ran in production (``--reference``, ``--reference-path``, a bundle's
    recorded agent). Where its values are proved production's by the trace's digests they
    fill the traced side of the comparison; it never changes the verdict (the candidate's).
    Decided by ``judging.reference.prove_reference``; renderers show it as it is.
    """

    agent_path: str
    """``module:ATTR`` of the reference agent."""
    source: str
    """Where it came from, for the header (``--reference-path /prod``, ``the bundle's agent``)."""
    seq: int | None = None
    """The activation it replayed (the candidate's seq; another seq's values are not shown)."""
    verdict: str = ""
    """Its verdict word (``reproduced``, ``diverged``...), empty when it gave no result."""
    reason: str = ""
    """Its one-line reason, or why it gave no result (it could not run, its output unreadable)."""
    first_divergence: int | None = None
    """The event where the reference itself diverged from the trace: only values it proves are
    shown (each one checked by digest), and the header says it did not reproduce."""
    values: Mapping[tuple[int, str], Value] = field(default_factory=dict, repr=False)
    """Its proved values by ``(event_index, path)``: every one VERIFIED against this trace."""
    rehashed: frozenset[tuple[int, str]] = frozenset()
    """The keys of ``values`` whose digest was recomputed here from the value itself (the
    others were proved by the reference process's engine: a model request's components,
    whose request cache key is the traced one, and a response, by its response digest)."""

    @property
    def reproduced(self) -> bool:
        """The reference reproduced the trace: every value it shows is production's."""
        return self.verdict == "reproduced"

    def value_for(self, index: int, path: str) -> Value | None:
        """Production's value at event ``index``, ``path``, when the reference proved it."""
        return self.values.get((index, path))


@dataclass(frozen=True, kw_only=True)
class ForkRun:
    """A fork: the traced call at ``index`` received ``value`` instead, the events before it
    reproduced the trace (verified), and the re-run went on from there: a counterfactual.
    Decided by ``judging.judge.judge_fork``; renderers show it as it is."""

    index: int
    """The forked event's trace index."""
    kind: str
    """Its kind (``LLM_CALL``, ``TOOL_CALL``)."""
    name: str
    """Its name (the model, the tool)."""
    value: str
    """What it received: a model call's response text, a tool call's result as JSON."""
    value_source: str
    """Where the value came from (``--set``, ``--set @answer.txt``)."""
    provider_path: str = ""
    """``module:ATTR`` of the provider that answered the continuation's uncached model calls
    (empty: none was given; such a call ends the fork)."""
    provider_calls: int = 0
    """How many model calls that provider answered."""
    ended_at: int | None = None
    """The event where the continuation stopped short of its end (a request nothing could
    serve, a blocked attempt); None when it ran to its end."""
    outcome: str = ""
    """How the forked activation ended (``done``, ``suspended``, ``failed: ErrorType``)."""


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """Everything one replay established. Render it; never recompute a verdict from it."""

    verdict: Verdict
    reason: str
    """One line saying why this verdict (for ``reproduced``: what matched)."""
    header: ReplayHeader
    events: Sequence[EventPair] = ()
    """Traced and replayed events side by side, in order (normalized comparison). The
    engine's is an ``EventPairs``: each pair is built when read."""
    first_divergence: Divergence | None = None
    cache_miss: CacheMiss | None = None
    tool_miss: ToolCacheMiss | None = None
    """The recorded tool call the tool cache could not serve (exit 3), if that stopped it."""
    served_tool_events: tuple[int, ...] = ()
    """Indices of the replayed TOOL_CALL events served from the snapshot's tool cache."""
    intents: tuple[IntentRow, ...] = ()
    outputs: tuple[BlobDigest, ...] = ()
    memory: BlobDigest | None = None
    """The committed memory (its canonical JSON, the memory blob's body), checked against the
    traced ``beam_agents.memory_sha256``."""
    end_digests_traced: bool = False
    """The traced ACTIVATION_END carries output and memory digests. False for a trace written
    before they existed (outputs and memory are then reported, not diffed), a failed
    activation, or a what-if."""
    values: Sequence[Value] = ()
    """Every replayed event's values, in event order, each marked (``replay.values``). The
    engine's is a ``ValueList``: values are derived when read (``event_values`` reads one
    event's)."""
    values_error: str = ""
    """Why the values could not be decoded (a bug of ours); the verdict stands without them."""
    memory_not_judged: str = ""
    """Why a memory that differs from the traced digest is not a divergence (replay started
    from a post-image, docs/replay.md §4); empty when it matches, diverges, or was not traced."""
    memory_writes: MemoryWritesDigest | None = None
    """What the re-run wrote to memory, against the traced write set; None when it committed
    nothing."""
    unseen_reads: tuple[UnseenRead, ...] = ()
    """Reads of memory whose values the snapshot does not hold as the original saw them, in
    the order they happened (the first read of each key before the re-run wrote it)."""
    served_recordings: tuple[ServedRecording, ...] = ()
    """Each recorded tool result the re-run was served, with its age (for a what-if, what the
    pipeline would fetch anew)."""
    replayed_memory: Any = None
    """The re-run's committed memory (a JSON object), None when it committed nothing."""
    state: StateView | None = None
    provider_calls: int = 0
    """How many times the re-run reached the provider (each one is a miss)."""
    network_attempts: tuple[str, ...] = ()
    """Connections the re-run tried and the guard blocked (``host:port``, with the tool if known)."""
    error: str = ""
    """For USAGE_ERROR (and internal errors): the full one-paragraph message."""
    redacted_reason: str | None = None
    """``reason`` with each plaintext it quotes (an attempted command line, a file path, an
    address, the text of an exit or of an exception agent code raised) shown as its
    ``text_digest``, for ``--redact``; None when it quotes none."""
    redacted_error: str | None = None
    """``error`` likewise."""
    redacted_network_attempts: tuple[str, ...] = ()
    """``network_attempts`` with each address shown as its digest."""
    events_reached_only: bool = False
    """True when the re-run ran past the time limit: ``events`` are only the positions it
    had reached (the traced events after them are not listed, nor missing)."""
    stop: StopCause | None = None
    """What stopped the replay short of judging every traced event; None when nothing did
    (reproduced, diverged, or a what-if that ran to its end)."""
    reference: ReferenceRun | None = None
    """The reference run's proved values beside this replay's (``ReferenceRun``), if one ran."""
    fork: ForkRun | None = None
    """A fork's facts (``--fork``): ``events``, ``intents``, ``outputs`` and ``memory_writes``
    are then the traced trajectory beside the forked one, not a reproduction's."""

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code
