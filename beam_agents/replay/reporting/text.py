"""The headless report: a ``ReplayResult`` as the seed page prints it, then the details.

The first lines are exactly the seed's shape (header, verdict, ``provider
calls``, each output, the memory blob); the lines after them name the first
divergence, the cache miss or the network attempt, then the context: the
registry, the HITL policy, the trigger, the snapshot and the intents ledger.
Every line is written by ``escape.escape_lines``: whatever a line holds of the
inputs (names, keys, ids, the traced digests themselves), no byte of a trace or
snapshot can drive the terminal or start a line of its own (a second verdict).
"""

from __future__ import annotations

from beam_agents import canonical_json
from beam_agents._protos import TraceEvent
from beam_agents.agent_build import describe_build
from beam_agents.replay.reporting.escape import escape, escape_lines
from beam_agents.replay.reporting.labels import duration, not_judged
from beam_agents.replay.result import (
    BlobDigest,
    CacheMiss,
    Divergence,
    EventPairs,
    ForkRun,
    IntentRow,
    Mark,
    MemoryWritesDigest,
    ReferenceRun,
    ReplayHeader,
    ReplayResult,
    ServedRecording,
    ToolCacheMiss,
    Value,
    Verdict,
    event_values,
    pair_counts,
)
from beam_agents.trace_events import kind_name
from beam_agents.trace_view import ToolCall

__all__ = [
    "SIDE_MARKS",
    "VALUE_WIDTH",
    "both_sides_text",
    "build_skew_line",
    "digest_note",
    "fork_headline",
    "fork_lines",
    "mark_text",
    "memory_writes_counts",
    "memory_writes_line",
    "memory_writes_note",
    "miss_request_values",
    "older_trace",
    "recording_age",
    "reference_line",
    "render_error",
    "render_report",
    "request_components_differing",
    "unjudged_memory",
    "untraced",
    "value_lines",
    "value_text",
    "verdict_line",
]

NOT_DIFFED = "(no traced counterpart — reported, not diffed)"
NOT_TRACED = "(not traced: the trace predates output and memory digests — reported, not diffed)"


def _unknown(value: object) -> str:
    return "-" if value is None or value == "" else escape(str(value))


def _digest_line(digest: BlobDigest) -> str:
    return f"{digest.size} bytes, sha256={digest.sha256}"


def digest_note(result: ReplayResult, digest: BlobDigest) -> str:
    """What the traced ACTIVATION_END says about an output or the memory, in parentheses."""
    if digest.mark is Mark.VERIFIED:
        return "(matches the traced digest)"
    if digest.mark is Mark.DIFFERS:
        if digest is result.memory and result.memory_not_judged:
            # Not a divergence: say so, and why, before the digest that differs.
            return f"(not judged: {result.memory_not_judged}; traced sha256={digest.traced_sha256})"
        return f"(differs: traced sha256={digest.traced_sha256})"
    return NOT_TRACED if older_trace(result) else NOT_DIFFED


def older_trace(result: ReplayResult) -> bool:
    """The traced activation ended, on an ACTIVATION_END without output and memory digests."""
    if result.end_digests_traced:
        return False
    if isinstance(result.events, EventPairs):
        # A traced activation is whole (``check_complete``): only its last event can end it.
        traced = result.events.traced
        return bool(traced) and traced[-1].kind == TraceEvent.ACTIVATION_END
    return any(
        pair.traced is not None and pair.traced.kind == TraceEvent.ACTIVATION_END
        for pair in result.events
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _intent_line(row: IntentRow, side: str = "replayed", *, unreached: bool = False) -> str:
    """One intent of the ledger; ``unreached``: the re-run (a fork's continuation) ended
    short of the activation's end, so what it did not do is "not reached", never "no"."""
    extra = []
    if row.requires_approval:
        extra.append("approval required")
    if row.expires_at_ms is not None:
        extra.append(f"expires_at_ms={row.expires_at_ms}")
    pairs = ((row.traced_staged, row.replayed_staged), (row.traced_released, row.replayed_released))
    # A side not reached is not judged: only what the re-run did (a yes) can differ there.
    differs = any(t != r for t, r in pairs if r or not unreached)
    mark = "  <- differs" if differs else ""

    def theirs(flag: bool) -> str:
        return "not reached" if unreached and not flag else _yes(flag)

    tail = f"  ({', '.join(extra)})" if extra else ""
    return (
        f"    {escape(row.intent_id)}  {escape(row.tool)}  "
        f"staged: traced {_yes(row.traced_staged)} / {side} {theirs(row.replayed_staged)}  "
        f"released: traced {_yes(row.traced_released)} / {side} {theirs(row.replayed_released)}"
        f"{tail}{mark}"
    )


VALUE_WIDTH = 160
"""How many characters of a value the report prints before cutting it (``--full-values``: all)."""


def unjudged_memory(result: ReplayResult, value: Value) -> bool:
    """``value`` is the committed memory, which differs from the traced digest for a reason
    replay names (``memory_not_judged``: a later snapshot): a fact about the bytes, not a
    difference the verdict rests on (what the activation wrote is judged instead)."""
    return value.path == "memory" and value.mark is Mark.DIFFERS and bool(result.memory_not_judged)


def mark_text(value: Value, result: ReplayResult | None = None) -> str:
    """``[verified]``, ``[differs: traced sha256=…]``, ``[unverifiable]``, or for a memory
    replay does not judge, ``[not judged: traced sha256=…]``."""
    if result is not None and unjudged_memory(result, value):
        return f"[not judged: traced sha256={value.traced_digest}; its writes are judged instead]"
    if value.mark is Mark.DIFFERS:
        label = "sha256" if value.attribute != "error.type" else "value"
        return f"[differs: traced {label}={value.traced_digest}]"
    return f"[{value.mark.value}]"


def value_text(value: Value, *, width: int | None = VALUE_WIDTH) -> str:
    """The value on one line, escaped, cut to ``width`` characters (None: whole)."""
    text = escape(value.text)
    if width is not None and len(text) > width:
        text = f"{text[:width]}… ({len(text) - width} more characters; --full-values prints all)"
    return text


def value_lines(
    result: ReplayResult, index: int, *, width: int | None = VALUE_WIDTH, indent: str = "      "
) -> list[str]:
    """The replayed values of event ``index``, differing ones first, each with its mark."""
    values = list(event_values(result.values, index))
    order = {Mark.DIFFERS: 0, Mark.VERIFIED: 1, Mark.UNVERIFIABLE: 2}
    values.sort(key=lambda v: 1 if unjudged_memory(result, v) else order[v.mark])
    reference = result.reference
    lines = []
    for v in values:
        theirs = reference.value_for(index, v.path) if reference is not None else None
        if theirs is not None and v.mark is not Mark.VERIFIED:
            lines.append(f"{indent}{escape(v.path)}: {both_sides_text(theirs, v, width=width)}")
        else:
            shown = value_text(v, width=width)
            lines.append(f"{indent}{escape(v.path)}: {shown}  {mark_text(v, result)}")
    if reference is not None:
        # Production's values the re-run has none for (it stopped short, or took another path).
        mine = {v.path for v in values}
        for (at, path), theirs in sorted(reference.values.items()):
            if at == index and path not in mine:
                lines.append(
                    f"{indent}{escape(path)}: traced {value_text(theirs, width=width)} "
                    f"{SIDE_MARKS[Mark.VERIFIED]} | replayed (none)"
                )
    return lines


SIDE_MARKS = {Mark.VERIFIED: "✓", Mark.DIFFERS: "≠", Mark.UNVERIFIABLE: "?"}
"""A value's mark beside it when both sides are shown (the TUI's marks, without their words)."""


def both_sides_text(traced: Value, replayed: Value, *, width: int | None = VALUE_WIDTH) -> str:
    """``traced "B-2001" ✓ | replayed "B2001" ≠``: production's value (the reference run's,
    proved by the trace's digest) beside the re-run's, each marked."""
    return (
        f"traced {value_text(traced, width=width)} {SIDE_MARKS[traced.mark]} | "
        f"replayed {value_text(replayed, width=width)} {SIDE_MARKS[replayed.mark]}"
    )


BUILD_COVERS = "code is the sha256 of the agent class's module file only, not of the modules it imports"
"""What the build identity covers (agent_build.py), said on the report's build line itself:
a change in a helper module shows only through ``Agent.build_version``."""


def build_skew_line(h: ReplayHeader) -> str:
    """The report's ``build skew:`` line: the snapshot's build is not the given agent's."""
    wrote = describe_build(h.snapshot_build) if h.snapshot_build is not None else "?"
    given = describe_build(h.agent_build) if h.agent_build is not None else "?"
    return (
        f"  build skew: the snapshot was written by {escape(wrote)}; the agent "
        f"given is {escape(given)} (differs: {', '.join(h.build_skew)}; {BUILD_COVERS})"
    )


def build_line(h: ReplayHeader) -> str | None:
    """The report's build line: the skew, the same build (and what "same" covers), or that
    the snapshot records none (nothing to compare with, which is not "no skew"); None when
    no agent was imported (a refusal before it)."""
    if h.build_skew:
        return build_skew_line(h)
    if h.agent_build is None:
        return None
    given = escape(describe_build(h.agent_build))
    if h.snapshot_build is None:
        return (
            f"  build: the snapshot records none (written before builds were recorded), so "
            f"there is nothing to compare the agent given, {given}, with"
        )
    return f"  build: the same as the snapshot's, {given} ({BUILD_COVERS})"


def reference_line(reference: ReferenceRun) -> str:
    """The report's ``reference:`` line: which build, and how far its values are production's."""
    who = f"{escape(reference.agent_path) or '-'} ({escape(reference.source)})"
    if not reference.verdict or reference.verdict == "error":
        why = escape(reference.reason) or "no result"
        return f"  reference: {who}: no values shown: {why}"
    shown = len(reference.values)
    if reference.reproduced:
        return (
            f"  reference: {who}: reproduced; {shown} of its values proved production's by the "
            "trace's digests fill the traced side"
        )
    where = (
        f" at event {reference.first_divergence}" if reference.first_divergence is not None else ""
    )
    return (
        f"  reference: {who}: {escape(reference.verdict)}{where} itself; only the {shown} "
        "values it proves by the trace's digests are shown as production's"
    )


def _failure_lines(
    result: ReplayResult, *, width: int | None = VALUE_WIDTH, last_replayed: bool = False
) -> list[str]:
    """A failed re-run: the exception's type, message and the agent-code line that raised it
    (``last_replayed``: at the re-run's last event, which a fork's can reach before the
    trace's last)."""
    last = result.events[-1] if result.events else None
    if last_replayed:
        last = next((p for p in reversed(result.events) if p.replayed is not None), None)
    if last is None or last.replayed is None or last.replayed.kind != TraceEvent.ACTIVATION_FAILED:
        return []
    failed = [
        v
        for v in event_values(result.values, last.index)
        if v.path in ("error.type", "error.message", "error.raised_at")
    ]
    if not failed:
        return []
    lines = ["  the re-run failed:"]
    for v in failed:
        lines.append(f"    {escape(v.path)}: {value_text(v, width=width)}  {mark_text(v)}")
    return lines


def _divergence_lines(
    div: Divergence, result: ReplayResult, *, width: int | None = VALUE_WIDTH
) -> list[str]:
    lines = [f"  first divergence: event {div.index} {escape(div.kind)} {escape(repr(div.name))}"]
    if div.missing:
        lines.append("    missing: the trace has this event; the re-run ended before it")
    if div.extra:
        lines.append("    extra: the re-run produced this event; the trace ends before it")
    for row in div.fields:
        lines.append(
            f"    {escape(row.path)}: traced {escape(row.traced)}  replayed {escape(row.replayed)}"
        )
    shown = value_lines(result, div.index, width=width)
    if shown:
        lines.append("    values (the re-run's, marked against the traced digests):")
        lines.extend(shown)
    if div.detail:
        lines.append("    detail:")
        lines.extend(f"      {escape(line)}" for line in div.detail.splitlines())
    return lines


def request_components_differing(miss: CacheMiss) -> frozenset[str]:
    """The value paths (``request.messages[1]``) of the components the nearest entry differs in."""
    if miss.nearest is None:
        return frozenset()
    return frozenset(f"request.{name}" for name in miss.nearest.differences)


def miss_request_values(result: ReplayResult, miss: CacheMiss) -> list[Value]:
    """The replayed request's components at the miss, in request order (no digests line)."""
    return [
        v for v in event_values(result.values, miss.event_index) if v.path.startswith("request.")
    ]


def _miss_request_lines(
    result: ReplayResult, miss: CacheMiss, *, width: int | None = VALUE_WIDTH
) -> list[str]:
    """The replayed request in plaintext; ``≠`` on the components the nearest entry lacks."""
    values = miss_request_values(result, miss)
    if not values:
        return []
    differing = request_components_differing(miss)
    lines = [
        "    replayed request (≠: differs from the nearest cached entry's):"
        if differing
        else "    replayed request:"
    ]
    reference = result.reference
    for v in values:
        flag = "≠" if v.path in differing else " "
        lines.append(f"    {flag} {escape(v.path)}: {value_text(v, width=width)}")
        theirs = reference.value_for(v.event_index, v.path) if reference is not None else None
        if theirs is not None and theirs.text != v.text:
            # Production's component (the reference's request had the traced cache key).
            lines.append(
                f"        traced: {value_text(theirs, width=width)} {SIDE_MARKS[Mark.VERIFIED]}"
            )
    return lines


def _traced_key_note(miss: CacheMiss) -> str:
    """What the traced cache key says about the miss, in a few words."""
    if miss.traced_cache_key != miss.cache_key:
        return "  (differs: the request changed)" if miss.traced_cache_key else ""
    if miss.traced_error_type:
        return f"  (same key: the original call failed, {escape(miss.traced_error_type)}; it never had a response)"
    return "  (same key: the response is gone)"


def _miss_lines(
    miss: CacheMiss, result: ReplayResult | None = None, *, width: int | None = VALUE_WIDTH
) -> list[str]:
    lines = [
        f"  cache miss: event {miss.event_index} LLM_CALL model {escape(repr(miss.model))} "
        f"({escape(miss.status)})",
        f"    cache key:        {escape(miss.cache_key)}",
        f"    traced cache key: {escape(miss.traced_cache_key or '-')}"
        + _traced_key_note(miss),
    ]
    if miss.nearest is None:
        lines.append("    nearest entry:    none (the snapshot's cache is empty)")
    else:
        differs = ", ".join(miss.nearest.differences) or "nothing (the same request)"
        own = (
            "  (this request's own entry, cached later by another activation)"
            if miss.nearest.cache_key == miss.cache_key
            else ""
        )
        lines.append(
            f"    nearest entry:    {escape(miss.nearest.cache_key)} model "
            f"{escape(repr(miss.nearest.model))}{own}"
        )
        lines.append(f"    differs in:       {escape(differs)}")
    if result is not None:
        lines.extend(_miss_request_lines(result, miss, width=width))
    return lines


def _tool_miss_lines(miss: ToolCacheMiss) -> list[str]:
    lines = [
        f"  tool cache miss: event {miss.event_index} TOOL_CALL {escape(repr(miss.tool))} "
        f"({miss.status})",
        f"    args sha256:        {miss.args_sha256}",
        f"    traced args sha256: {miss.traced_args_sha256 or '-'}",
    ]
    if miss.held_seq is not None:
        # The entry is for these very arguments, but holds another seq's answer.
        lines.append(
            f"    the cache holds:    seq {miss.held_seq}'s answer, result sha256 "
            f"{miss.held_result_sha256}"
        )
        lines.append(
            f"    the traced call:    got result sha256 {miss.traced_result_sha256 or '- (it raised)'}"
            " — never committed, so replay cannot serve it"
        )
        return lines
    if miss.nearest_args_sha256 is None:
        lines.append(
            f"    nearest recorded:   none (no recorded call of {escape(repr(miss.tool))})"
        )
    else:
        lines.append(f"    nearest recorded:   args sha256 {miss.nearest_args_sha256}")
        differs = ", ".join(miss.differences) or "nothing (the same arguments)"
        lines.append(f"    differs in:         {escape(differs)}")
    return lines


def recording_age(recording: ServedRecording) -> str:
    """``minted at seq 2, last recorded at seq 4 (at_ms …, 2 h 05 min before this clock)``."""
    last = (
        f", last recorded at seq {recording.recorded_seq}"
        if recording.recorded_seq != recording.minted_seq
        else ""
    )
    return (
        f"minted at seq {recording.minted_seq}{last} (at_ms {recording.recorded_at_ms}, "
        f"{duration(recording.age_ms)} before this activation's clock)"
    )


def _served_tool_lines(result: ReplayResult, *, width: int | None = VALUE_WIDTH) -> list[str]:
    """Each recorded tool call the tool cache served (a cache hit: never run), with its values
    and how old the recording is.

    The served result is marked like every value: ``[verified]`` when its sha256 is the
    traced ``result_sha256``, i.e. provably what the tool returned in production.
    """
    ages = {r.event_index: r for r in result.served_recordings}
    lines: list[str] = []
    for index in result.served_tool_events:
        if index >= len(result.events):
            continue
        event = result.events[index].replayed
        if event is None:
            continue
        call = ToolCall.of(event)
        args = call.args_sha256 if call.args_sha256 is not None else "-"
        value = call.result_sha256 if call.result_sha256 is not None else "-"
        lines.append(
            f"    event {index} TOOL_CALL {escape(repr(event.name))}  cache hit  "
            f"args sha256={args}  result sha256={value}"
        )
        if index in ages:
            lines.append(f"      recorded: {recording_age(ages[index])}")
        lines.extend(
            line
            for line in value_lines(result, index, width=width)
            if line.lstrip().startswith("result:")
        )
    return lines


def _provider_calls_note(result: ReplayResult) -> str:
    """On a divergence, what a provider call means: each one is a miss, so the re-run
    stopped there too (``provider calls: 1`` beside ``diverged`` read as a live call)."""
    fork = result.fork
    if fork is not None and fork.provider_calls:
        refused = result.provider_calls - fork.provider_calls
        return f" ({fork.provider_calls} answered by the fork provider" + (
            f", {refused} refused)" if refused else ")"
        )
    if result.verdict is not Verdict.DIVERGED or not result.provider_calls:
        return ""
    where = (
        f" at event {result.cache_miss.event_index}" if result.cache_miss is not None else ""
    )
    return (
        f" (each one a miss: after diverging, the re-run also stopped at a model call the "
        f"snapshot's cache could not serve{where})"
    )


def verdict_line(result: ReplayResult) -> str:
    """The verdict, and what it did not judge when that is what decided it (the seed's verdict
    line; never a plain ``reproduced`` for a replay that read what the original did not)."""
    unjudged = not_judged(result)
    return result.verdict.value + (f" ({escape(unjudged)})" if unjudged else "")


def memory_writes_counts(writes: MemoryWritesDigest) -> str:
    """``2 key(s) set, 1 deleted``."""
    return f"{len(writes.replayed.set)} key(s) set, {len(writes.replayed.deleted)} deleted"


def untraced(result: ReplayResult) -> bool:
    """Nothing was traced for the replayed activation (a what-if)."""
    if isinstance(result.events, EventPairs):
        return len(result.events.traced) == 0
    return all(pair.traced is None for pair in result.events)


def memory_writes_note(result: ReplayResult, writes: MemoryWritesDigest) -> str:
    """What the traced digest says about the re-run's write set, in parentheses."""
    if writes.mark is Mark.VERIFIED:
        return "(matches the traced digest)"
    if writes.mark is Mark.DIFFERS:
        return f"(differs: traced sha256={writes.traced_sha256})"
    if untraced(result):
        return NOT_DIFFED
    return "(not traced: the trace predates memory write digests — reported, not diffed)"


def memory_writes_line(result: ReplayResult, writes: MemoryWritesDigest) -> str:
    """``2 key(s) set, 1 deleted, sha256=… (matches the traced digest)``."""
    return (
        f"{memory_writes_counts(writes)}, sha256={writes.replayed.sha256} "
        f"{memory_writes_note(result, writes)}"
    )


def _memory_writes_lines(writes: MemoryWritesDigest, *, width: int | None) -> list[str]:
    """What the re-run wrote, key by key (and how it differs, when it does)."""
    lines: list[str] = []
    for key, value in writes.replayed.set.items():
        text = canonical_json.dumps(value).decode("utf-8")
        cut = text if width is None or len(text) <= width else text[:width] + "…"
        lines.append(f"    set {escape(repr(key))} = {escape(cut)}")
    lines.extend(f"    deleted {escape(repr(key))}" for key in writes.replayed.deleted)
    return lines


FORK_EVENT_ROWS = 40
"""How many events after the fork point the report lists, traced beside forked."""


def fork_headline(fork: ForkRun) -> str:
    """The header's plain statement that a fork is a counterfactual, never a reproduction."""
    return (
        f"  FORK: a counterfactual, not a reproduction: event {fork.index} ({escape(fork.kind)} "
        f"{escape(repr(fork.name))}) received the value of {escape(fork.value_source)} instead "
        "of the traced answer"
    )


def _event_cell(event: TraceEvent | None) -> str:
    if event is None:
        return "-"
    return f"{kind_name(event.kind)} {escape(repr(event.name))}"


def fork_lines(result: ReplayResult, fork: ForkRun, *, width: int | None = VALUE_WIDTH) -> list[str]:
    """The fork's value, what the continuation could call, and the events after the fork
    point, traced beside forked (the ledger, outputs and memory writes follow as in any report)."""
    value = escape(fork.value)
    if width is not None and len(value) > width:
        value = value[:width] + "…"
    lines = [
        f"  fork value: {value}",
        f"  fork prefix: the {fork.index} event(s) before it reproduced the trace (verified by "
        "its digests)",
    ]
    if fork.provider_path:
        lines.append(
            f"  fork continuation: identical requests served from the snapshot's caches; the "
            f"others answered by {escape(fork.provider_path)} ({fork.provider_calls} call(s)), "
            "the only network this run may open"
        )
    else:
        lines.append(
            "  fork continuation: served from the snapshot's caches only (no network); a request "
            "they cannot serve ends the fork"
        )
    if fork.ended_at is not None:
        lines.append(f"  fork ended at event {fork.ended_at}, short of the activation's end")
    else:
        lines.append(f"  fork outcome: {escape(fork.outcome)}")
    pairs = result.events
    rows = [p for p in pairs[fork.index :] if p.differs or p.index == fork.index]
    if rows:
        lines.append("  events from the fork on (traced | forked):")
        for pair in rows[:FORK_EVENT_ROWS]:
            note = "  <- the fork" if pair.index == fork.index else "  <- differs"
            lines.append(
                f"    {pair.index}  {_event_cell(pair.traced)} | {_event_cell(pair.replayed)}{note}"
            )
        if len(rows) > FORK_EVENT_ROWS:
            lines.append(f"    … {len(rows) - FORK_EVENT_ROWS} more that differ (the JSON report lists all)")
    for i, output in enumerate(result.outputs):
        # What the fork emitted (the trace holds only digests of production's outputs).
        if output.size and not output.payload:  # --redact kept only the digest
            lines.append(f"  forked outputs[{i}]: sha256={output.sha256}")
            continue
        text = escape(output.payload.decode("utf-8", "backslashreplace"))
        if width is not None and len(text) > width:
            text = text[:width] + "…"
        lines.append(f"  forked outputs[{i}]: {text}")
    if result.memory_writes is not None and result.memory_writes.differences:
        lines.append("  memory writes, traced vs forked:")
        lines.extend(f"    {escape(line)}" for line in result.memory_writes.differences)
    return lines


def render_report(result: ReplayResult, *, full_values: bool = False) -> str:
    """The headless report (stdout) for any verdict but a usage error.

    Args:
        result: What replay established.
        full_values: Print every value whole instead of cutting it at ``VALUE_WIDTH``.
    """
    width = None if full_values else VALUE_WIDTH
    h = result.header
    lines = [
        f"beam-agents-replay {h.version}",
        f"  agent:  {escape(h.agent_path)}",
        f"  key:    {h.entity_key.hex() if h.entity_key is not None else '-'}"
        f"  seq: {_unknown(h.seq)}  now_ms: {_unknown(h.now_ms)}",
        f"  kind:   {_unknown(h.kind)}",
        *([fork_headline(result.fork)] if result.fork is not None else []),
        verdict_line(result),
        f"  provider calls: {result.provider_calls}{_provider_calls_note(result)}",
    ]
    for i, output in enumerate(result.outputs):
        lines.append(f"  outputs[{i}]: {_digest_line(output)} {digest_note(result, output)}")
    if result.memory is not None:
        memory = result.memory
        lines.append(f"  memory blob: {_digest_line(memory)} {digest_note(result, memory)}")
    elif result.events:
        lines.append(
            "  memory blob: none — the re-run failed or stopped before the end, and commits nothing"
        )
    if result.memory_writes is not None:
        lines.append(f"  memory writes: {memory_writes_line(result, result.memory_writes)}")
    if h.build_skew:  # up here, beside the verdict: a divergence source of its own
        lines.append(build_skew_line(h))
    if result.reference is not None:
        lines.append(reference_line(result.reference))
    # A refusal (migration gap, continuation gone) carries its advice in ``error``.
    lines.append(f"  reason: {escape(result.error or result.reason)}")
    if result.fork is not None:
        lines.extend(fork_lines(result, result.fork, width=width))
    lines.extend(_failure_lines(result, width=width, last_replayed=result.fork is not None))
    if result.values_error:
        lines.append(
            f"  values: not shown — decoding them failed ({escape(result.values_error)}); "
            "the verdict does not depend on them. Please report this"
        )
    if result.first_divergence is not None and result.fork is None:
        lines.extend(_divergence_lines(result.first_divergence, result, width=width))
    if result.cache_miss is not None:
        lines.extend(_miss_lines(result.cache_miss, result, width=width))
    if result.tool_miss is not None:
        lines.extend(_tool_miss_lines(result.tool_miss))
    if result.unseen_reads:
        lines.append(
            "  memory reads not judged (the snapshot does not hold what the original read):"
        )
        lines.extend(
            f"    before event {read.event_index}: {escape(read.text)}"
            for read in result.unseen_reads
        )
    if result.memory_writes is not None and (
        result.memory_writes.replayed.set or result.memory_writes.replayed.deleted
    ):
        lines.append("  memory written by the re-run:")
        lines.extend(_memory_writes_lines(result.memory_writes, width=width))
    served = _served_tool_lines(result, width=width)
    if served:
        if result.verdict is Verdict.WHAT_IF or (result.events and untraced(result)):
            lines.append(
                f"  recorded tools: {len(result.served_tool_events)} call(s) served from the tool "
                "cache (never run); a what-if: the pipeline would call these services anew, "
                "and this is how old their recorded answers are:"
            )
        else:
            lines.append(
                f"  recorded tools: {len(result.served_tool_events)} call(s) served from the tool "
                "cache (never run):"
            )
        lines.extend(served)
    for attempt in result.network_attempts:
        lines.append(f"  network blocked: {escape(attempt)}")
    lines.append(f"  registry: {escape(h.registry_path)}")
    policy = "default" if h.hitl_source == "default" else f"--hitl {escape(h.hitl_source)}"
    lines.append(f"  hitl policy: {policy} ({escape(h.hitl_policy) or '-'})")
    trigger = f"  trigger: {_unknown(h.trigger)}"
    if h.envelope_id:
        trigger += f"  envelope_id: {escape(h.envelope_id)}"
    if h.continuation_source:
        trigger += f"  continuation: {escape(h.continuation_source)}"
    lines.append(trigger)
    if h.provider and result.fork is not None and result.fork.provider_path:
        lines.append(
            f"  provider: {escape(h.provider)} (the cache keys' name; the fork's uncached model "
            f"calls went to {escape(result.fork.provider_path)})"
        )
    elif h.provider:
        lines.append(
            f"  provider: {escape(h.provider)} (replay's provider of that name serves nothing)"
        )
    if h.snapshot_seq is not None:
        migrations = ", ".join(h.migrations_applied) or "none"
        lines.append(
            f"  snapshot: seq {h.snapshot_seq}  at_ms {h.snapshot_at_ms}  request_id "
            f"{_unknown(h.snapshot_request_id)}  schema v{h.state_schema_version}  "
            f"migrations: {escape(migrations)}"
        )
        if h.snapshot_waiting:
            lines.append(f"  waiting at export: {escape(h.snapshot_waiting)}")
    build = None if h.build_skew else build_line(h)  # no skew: said among the inputs
    if build is not None:
        lines.append(build)
    if result.events:
        traced, replayed, differing = pair_counts(result.events)
        if result.events_reached_only:
            lines.append(
                f"  events: the first {replayed} the re-run reached before the time limit, "
                f"{differing} differ"
            )
        else:
            done = "replayed" if result.fork is None else "forked"
            lines.append(f"  events: {traced} traced, {replayed} {done}, {differing} differ")
    if result.intents:
        side = "replayed" if result.fork is None else "forked"
        lines.append("  intents:" if result.fork is None else "  intents (the ledger, traced | forked):")
        # A fork that ended short (its "fork ended at event N" line): what it did not do
        # by then is not reached, not "no".
        unreached = result.fork is not None and result.fork.ended_at is not None
        lines.extend(_intent_line(row, side, unreached=unreached) for row in result.intents)
    return escape_lines(lines)


def render_error(result: ReplayResult) -> str:
    """The one-paragraph message (stderr) of a usage error."""
    assert result.verdict is Verdict.USAGE_ERROR
    return f"beam-agents-replay: error: {escape(result.error or result.reason)}\n"
