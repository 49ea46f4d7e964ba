"""The incident report: a ``ReplayResult`` as Markdown, for the ticket.

The TUI's ``e`` writes it beside the ``--json`` document
(``beam_agents.replay.reporting.json_doc``); both render the same result and
decide nothing. Every string from the inputs is escaped and put in a code span
(``escape.md_code``) or a fenced block (``escape.md_fence``) that its data cannot
close: a value holding a fence, a heading, a link, an image or HTML shows as text,
and cannot add a second verdict or a beacon to the ticket.
"""

from __future__ import annotations

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.replay.reporting.escape import escape, md_code, md_fence
from beam_agents.replay.reporting.labels import VERDICT_TITLES, key_text, utc_time
from beam_agents.replay.reporting.text import (
    SIDE_MARKS,
    build_skew_line,
    digest_note,
    mark_text,
    recording_age,
    reference_line,
)
from beam_agents.replay.result import Mark, ReplayResult, event_values

MARKDOWN_EVENT_ROWS = 200
"""Timeline rows in the Markdown report around the notable ones (the JSON has all of them)."""


def _md(value: str) -> str:
    """Inline literal text from the inputs, safe in a table cell too."""
    return md_code(value, in_table=True)


def _event_cell(event: TraceEvent | None) -> str:
    if event is None:
        return "—"
    return f"{_md(te.kind_name(event.kind))} {_md(event.name)}"


def _both_sides_rows(result: ReplayResult, index: int) -> list[str]:
    """Production's values (the reference run's, proved by digest) beside the re-run's."""
    reference = result.reference
    if reference is None:
        return []
    mine = {v.path: v for v in event_values(result.values, index)}
    theirs = {path: v for (at, path), v in reference.values.items() if at == index}
    paths = sorted(p for p in theirs if p not in mine or mine[p].mark is not Mark.VERIFIED)
    if not paths:
        return []
    rows = [
        "",
        "| value | traced (the reference run's, verified) | replayed |",
        "| --- | --- | --- |",
    ]
    for path in paths:
        replayed = mine.get(path)
        shown = (
            f"{_md(replayed.text)} {SIDE_MARKS[replayed.mark]}"
            if replayed is not None
            else "(none)"
        )
        rows.append(f"| {_md(path)} | {_md(theirs[path].text)} ✓ | {shown} |")
    return rows


MARKDOWN_VALUE_CHARS = 2000
"""How much of one value the report quotes (the JSON report holds every value whole)."""


def _value_lines(result: ReplayResult, index: int) -> list[str]:
    """The re-run's values of event ``index``, differing ones first, each with its mark: the
    values the TUI's detail pane shows there (the digests alone say where, not why)."""
    order = {Mark.DIFFERS: 0, Mark.VERIFIED: 1, Mark.UNVERIFIABLE: 2}
    values = sorted(event_values(result.values, index), key=lambda v: order[v.mark])
    if not values:
        return []
    lines = ["", f"Values at event {index} (the re-run's, marked against the traced digests):", ""]
    for value in values:
        text = escape(value.text)
        if len(text) > MARKDOWN_VALUE_CHARS:
            text = f"{text[:MARKDOWN_VALUE_CHARS]}… ({len(text) - MARKDOWN_VALUE_CHARS} more characters)"
        lines.append(f"- {_md(value.path)} {_md(mark_text(value, result))}: {_md(text)}")
    return lines


def report_markdown(result: ReplayResult, *, selected: int | None = None) -> str:
    """The result as a Markdown incident report; ``selected``: also the values of that event
    (the one the operator had selected), after those of the divergence and the miss."""
    h = result.header
    lines = [
        f"# beam-agents-replay: {VERDICT_TITLES[result.verdict]} (exit {result.exit_code})",
        "",
    ]
    lines += md_fence(result.reason)
    lines.append("")
    if result.unseen_reads:
        lines += ["## Memory reads not judged", ""]
        lines += [
            f"- before event {read.event_index}: {_md(read.text)}" for read in result.unseen_reads
        ]
        lines.append("")
    key = "?"
    if h.entity_key is not None:
        key = _md(h.entity_key.hex())
        printable = key_text(h.entity_key)
        if printable is not None:
            key += f" ({_md(printable)})"
    now = "?" if h.now_ms is None else f"{h.now_ms} ({utc_time(h.now_ms)})"
    lines += [
        "| | |",
        "| --- | --- |",
        f"| version | {_md(h.version)} |",
        f"| agent | {_md(h.agent_path)} |",
        f"| registry | {_md(h.registry_path)} |",
        f"| key | {key} |",
        f"| seq | {h.seq if h.seq is not None else '?'} |",
        f"| now_ms | {now} |",
        f"| kind | {_md(h.kind or '?')} {_md(h.trigger)} |",
        f"| snapshot | seq {h.snapshot_seq} request {_md(h.snapshot_request_id)} |",
        f"| migrations | {_md(', '.join(h.migrations_applied) or 'none')} |",
        f"| hitl | {_md(h.hitl_policy or '-')} ({_md(h.hitl_source)}) |",
        f"| provider calls | {result.provider_calls} |",
    ]
    if h.build_skew:
        lines.append(f"| build skew | {_md(build_skew_line(h).strip())} |")
    if result.reference is not None:
        lines.append(f"| reference | {_md(reference_line(result.reference).strip())} |")
    lines += [
        "",
    ]
    fork = result.fork
    if fork is not None:
        continuation = (
            f"the snapshot's caches, then {fork.provider_path} ({fork.provider_calls} call(s))"
            if fork.provider_path
            else "the snapshot's caches only (no network)"
        )
        ended = (
            f"ended at event {fork.ended_at}" if fork.ended_at is not None else fork.outcome
        )
        lines += [
            "## Fork: a counterfactual, not a reproduction",
            "",
            "| | |",
            "| --- | --- |",
            f"| event | {fork.index} {_md(fork.kind)} {_md(fork.name)} |",
            f"| received | {_md(fork.value)} ({_md(fork.value_source)}) |",
            f"| before it | the {fork.index} event(s) reproduced the trace (verified) |",
            f"| continuation | {_md(continuation)} |",
            f"| outcome | {_md(ended)} |",
            "",
            "The replayed side below is the forked run.",
            "",
        ]
    if result.error:
        lines += ["## Error", "", *md_fence(result.error), ""]
    div = result.first_divergence
    if div is not None:
        lines += [f"## First divergence: event {div.index} {_md(div.kind)} {_md(div.name)}", ""]
        if div.missing:
            lines.append("The re-run did not produce this event.")
        if div.extra:
            lines.append("The re-run produced an event the trace does not have.")
        if div.fields:
            lines += ["| field | traced | replayed |", "| --- | --- | --- |"]
            lines += [
                f"| {_md(f.path)} | {_md(f.traced)} | {_md(f.replayed)} |" for f in div.fields
            ]
        lines += _both_sides_rows(result, div.index)
        if div.detail:
            lines += ["", *md_fence(div.detail)]
        lines += _value_lines(result, div.index)
        lines.append("")
    miss = result.cache_miss
    if miss is not None:
        lines += [
            f"## Cache miss at event {miss.event_index} ({_md(miss.status)})",
            "",
            f"- key: {_md(miss.cache_key)}",
            f"- model: {_md(miss.model)}",
        ]
        if miss.traced_cache_key is not None:
            lines.append(f"- traced key: {_md(miss.traced_cache_key)}")
        if miss.nearest is not None:
            lines.append(
                f"- nearest entry: {_md(miss.nearest.cache_key)} (model {_md(miss.nearest.model)}),"
                f" differs in: {_md(', '.join(miss.nearest.differences) or 'nothing recorded')}"
            )
        lines += _value_lines(result, miss.event_index)
        lines.append("")
    tool_miss = result.tool_miss
    if tool_miss is not None:
        lines += [
            f"## Tool cache miss at event {tool_miss.event_index} ({_md(tool_miss.status)})",
            "",
            f"- recorded tool: {_md(tool_miss.tool)}",
            f"- args sha256: {_md(tool_miss.args_sha256)}",
        ]
        if tool_miss.traced_args_sha256 is not None:
            lines.append(f"- traced args sha256: {_md(tool_miss.traced_args_sha256)}")
        if tool_miss.nearest_args_sha256 is not None:
            lines.append(
                f"- nearest recorded call: {_md(tool_miss.nearest_args_sha256)}, differs in: "
                f"{_md(', '.join(tool_miss.differences) or 'nothing')}"
            )
        lines.append("")
    if result.served_tool_events:
        lines += ["## Recorded tools served from the tool cache (cache hits)", ""]
        ages = {r.event_index: r for r in result.served_recordings}
        for index in result.served_tool_events:
            event = result.events[index].replayed if index < len(result.events) else None
            if event is not None:
                age = f"; {_md(recording_age(ages[index]))}" if index in ages else ""
                lines.append(f"- event {index}: {_md(event.name)} (never run in replay{age})")
        lines.append("")
    covered = {div.index if div else None, miss.event_index if miss else None}
    if selected is not None and selected not in covered:
        values = _value_lines(result, selected)
        if values:
            lines += [f"## Selected event {selected}", *values, ""]
    if result.network_attempts:
        lines += ["## Blocked network attempts", ""]
        lines += [f"- {_md(a)}" for a in result.network_attempts]
        lines.append("")
    if result.events:
        lines += [f"## Timeline ({len(result.events)} events)", ""]
        lines += [
            "| # | | traced | replayed | differing fields |",
            "| --- | --- | --- | --- | --- |",
        ]
        shown = result.events[:MARKDOWN_EVENT_ROWS]
        for pair in shown:
            mark = "≠" if pair.differs else ""
            fields = ", ".join(_md(f) for f in pair.differing_fields)
            lines.append(
                f"| {pair.index} | {mark} | {_event_cell(pair.traced)} | {_event_cell(pair.replayed)} | {fields} |"
            )
        if len(result.events) > len(shown):
            lines.append(
                f"| … | | {len(result.events) - len(shown)} more events in the JSON report | | |"
            )
        lines.append("")
    if result.intents:
        lines += [
            "## Intents",
            "",
            "| intent | tool | staged (traced/replayed) | released (traced/replayed) |",
        ]
        lines.append("| --- | --- | --- | --- |")
        for row in result.intents:
            lines.append(
                f"| {_md(row.intent_id)} | {_md(row.tool)} | {row.traced_staged}/{row.replayed_staged}"
                f" | {row.traced_released}/{row.replayed_released} |"
            )
        lines.append("")
    if result.outputs or result.memory is not None:
        lines += ["## Outputs and memory", ""]
        for i, out in enumerate(result.outputs):
            lines.append(
                f"- outputs[{i}]: {out.size} bytes, sha256={out.sha256} "
                f"{md_code(digest_note(result, out))}"
            )
        if result.memory is not None:
            lines.append(
                f"- memory blob: {result.memory.size} bytes, sha256={result.memory.sha256} "
                + md_code(digest_note(result, result.memory))
            )
        lines.append("")
    return "\n".join(lines)
