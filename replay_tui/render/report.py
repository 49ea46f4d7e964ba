"""The exported report: the result as Markdown (for the incident ticket) and as JSON.

``e`` in the TUI writes both next to each other and says where. The JSON is the
headless ``--json`` document (``beam_agents.replay.json_report``), so the two
can never disagree.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.replay.json_report import render_json
from beam_agents.replay.report import digest_note
from beam_agents.replay.result import EventPair, ReplayResult
from beam_agents.trace_data import event_to_dict
from replay_tui.render.header import VERDICT_TITLES
from replay_tui.render.literal import key_hex, key_printable, literal, utc_time

MARKDOWN_EVENT_ROWS = 200
"""Timeline rows in the Markdown report around the notable ones (the JSON has all of them)."""


def pair_data(pair: EventPair) -> dict[str, Any]:
    """An ``EventPair`` as JSON-able data (what ``c`` copies to the clipboard)."""
    return {
        "index": pair.index,
        "differs": pair.differs,
        "differing_fields": list(pair.differing_fields),
        "traced": None if pair.traced is None else event_to_dict(pair.traced),
        "replayed": None if pair.replayed is None else event_to_dict(pair.replayed),
    }


def report_json_text(result: ReplayResult) -> str:
    """The JSON report: exactly what ``beam-agents-replay --json`` prints for this result."""
    return render_json(result)


def _md(value: str) -> str:
    """Inline Markdown-safe literal text (code spans cannot hold backticks safely)."""
    return literal(value).replace("`", "'").replace("|", "\\|")


def _event_cell(event: TraceEvent | None) -> str:
    if event is None:
        return "—"
    return f"{te.kind_name(event.kind)} `{_md(event.name)}`"


def report_markdown(result: ReplayResult) -> str:
    """The result as a Markdown incident report."""
    h = result.header
    lines = [
        f"# beam-agents-replay: {VERDICT_TITLES[result.verdict]} (exit {result.exit_code})",
        "",
    ]
    lines.append(f"> {_md(result.reason)}")
    lines.append("")
    key = "?"
    if h.entity_key is not None:
        key = f"`{key_hex(h.entity_key)}`"
        printable = key_printable(h.entity_key)
        if printable is not None:
            key += f" (`{_md(printable)}`)"
    now = "?" if h.now_ms is None else f"{h.now_ms} ({utc_time(h.now_ms)})"
    lines += [
        "| | |",
        "| --- | --- |",
        f"| version | {_md(h.version)} |",
        f"| agent | `{_md(h.agent_path)}` |",
        f"| registry | `{_md(h.registry_path)}` |",
        f"| key | {key} |",
        f"| seq | {h.seq if h.seq is not None else '?'} |",
        f"| now_ms | {now} |",
        f"| kind | {_md(h.kind or '?')} {_md(h.trigger)} |",
        f"| snapshot | seq {h.snapshot_seq} request `{_md(h.snapshot_request_id)}` |",
        f"| migrations | {_md(', '.join(h.migrations_applied) or 'none')} |",
        f"| hitl | {_md(h.hitl_policy or '-')} ({_md(h.hitl_source)}) |",
        f"| provider calls | {result.provider_calls} |",
        "",
    ]
    if result.error:
        lines += ["## Error", "", "```", literal(result.error, multiline=True), "```", ""]
    div = result.first_divergence
    if div is not None:
        lines += [f"## First divergence: event {div.index} {_md(div.kind)} `{_md(div.name)}`", ""]
        if div.missing:
            lines.append("The re-run did not produce this event.")
        if div.extra:
            lines.append("The re-run produced an event the trace does not have.")
        if div.fields:
            lines += ["| field | traced | replayed |", "| --- | --- | --- |"]
            lines += [
                f"| `{_md(f.path)}` | `{_md(f.traced)}` | `{_md(f.replayed)}` |" for f in div.fields
            ]
        if div.detail:
            lines += ["", "```", literal(div.detail, multiline=True), "```"]
        lines.append("")
    miss = result.cache_miss
    if miss is not None:
        lines += [
            f"## Cache miss at event {miss.event_index} ({_md(miss.status)})",
            "",
            f"- key: `{_md(miss.cache_key)}`",
            f"- model: `{_md(miss.model)}`",
        ]
        if miss.traced_cache_key is not None:
            lines.append(f"- traced key: `{_md(miss.traced_cache_key)}`")
        if miss.nearest is not None:
            lines.append(
                f"- nearest entry: `{_md(miss.nearest.cache_key)}` (model `{_md(miss.nearest.model)}`),"
                f" differs in: {_md(', '.join(miss.nearest.differences) or 'nothing recorded')}"
            )
        lines.append("")
    tool_miss = result.tool_miss
    if tool_miss is not None:
        lines += [
            f"## Tool cache miss at event {tool_miss.event_index} ({_md(tool_miss.status)})",
            "",
            f"- recorded tool: `{_md(tool_miss.tool)}`",
            f"- args sha256: `{_md(tool_miss.args_sha256)}`",
        ]
        if tool_miss.traced_args_sha256 is not None:
            lines.append(f"- traced args sha256: `{_md(tool_miss.traced_args_sha256)}`")
        if tool_miss.nearest_args_sha256 is not None:
            lines.append(
                f"- nearest recorded call: `{_md(tool_miss.nearest_args_sha256)}`, differs in: "
                f"{_md(', '.join(tool_miss.differences) or 'nothing')}"
            )
        lines.append("")
    if result.served_tool_events:
        lines += ["## Recorded tools served from the tool cache (cache hits)", ""]
        for index in result.served_tool_events:
            event = result.events[index].replayed if index < len(result.events) else None
            if event is not None:
                lines.append(f"- event {index}: `{_md(event.name)}` (never run in replay)")
        lines.append("")
    if result.network_attempts:
        lines += ["## Blocked network attempts", ""]
        lines += [f"- `{_md(a)}`" for a in result.network_attempts]
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
            fields = ", ".join(f"`{_md(f)}`" for f in pair.differing_fields)
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
                f"| `{_md(row.intent_id)}` | `{_md(row.tool)}` | {row.traced_staged}/{row.replayed_staged}"
                f" | {row.traced_released}/{row.replayed_released} |"
            )
        lines.append("")
    if result.outputs or result.memory is not None:
        lines += ["## Outputs and memory", ""]
        for i, out in enumerate(result.outputs):
            lines.append(
                f"- outputs[{i}]: {out.size} bytes, sha256={out.sha256} {digest_note(result, out)}"
            )
        if result.memory is not None:
            lines.append(
                f"- memory blob: {result.memory.size} bytes, sha256={result.memory.sha256} "
                + digest_note(result, result.memory)
            )
        lines.append("")
    return "\n".join(lines)


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_EXPORTS_OF_ONE_NAME = 1000


def report_basename(result: ReplayResult) -> str:
    """``replay-<agent>-<key hex, first 32 digits>-seq<seq>``: the exported files' common name.

    The agent is its ``module:ATTR`` path with anything but letters, digits, ``.``,
    ``_`` and ``-`` replaced by ``_`` (at most 60 characters): never a path separator.
    """
    h = result.header
    agent = _UNSAFE_NAME.sub("_", h.agent_path)[:60].strip("._") or "agent"
    key = key_hex(h.entity_key)[:32] if h.entity_key else "nokey"
    seq = "unknown" if h.seq is None else str(h.seq)
    return f"replay-{agent}-{key or 'empty'}-seq{seq}"


def _create(path: Path, text: str) -> bool:
    """Write ``text`` to a new file at ``path``; False if anything is already there.

    ``O_CREAT | O_EXCL`` never opens an existing file nor follows a symbolic link
    (a planted link, even a dangling one, counts as existing): nothing is ever
    overwritten or written through a link.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return True


def export_report(result: ReplayResult, directory: Path) -> tuple[Path, Path]:
    """Write the Markdown and JSON reports as new files in ``directory``; returns both paths.

    The names are ``report_basename(result)`` plus ``.md`` / ``.json``; if either
    exists (a file, a directory or a symbolic link), ``-2``, ``-3``, ... is added
    until both are new. Existing files are never overwritten and links never followed.

    Raises:
        OSError: The directory cannot be created or written (the app shows the message).
    """
    directory.mkdir(parents=True, exist_ok=True)
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(directory))
    base = report_basename(result)
    markdown, document = report_markdown(result), report_json_text(result)
    for n in range(1, _MAX_EXPORTS_OF_ONE_NAME + 1):
        stem = base if n == 1 else f"{base}-{n}"
        md_path, json_path = directory / f"{stem}.md", directory / f"{stem}.json"
        if os.path.lexists(json_path) or not _create(md_path, markdown):
            continue
        if not _create(json_path, document):
            md_path.unlink()  # ours, just written: the pair moves on to the next number
            continue
        return md_path.resolve(), json_path.resolve()
    raise FileExistsError(
        errno.EEXIST,
        f"{_MAX_EXPORTS_OF_ONE_NAME} reports of this activation already exist there",
        str(directory / base),
    )
