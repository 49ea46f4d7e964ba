"""The header lines and the verdict banner: what was replayed, and what replay concluded.

The verdict, its exit code and its reason are read from the ``ReplayResult``;
nothing here judges anything (docs/index.md, "How the code is laid out", rule 3).
"""

from __future__ import annotations

from rich.text import Text

from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.reporting.labels import VERDICT_TITLES, key_text, utc_time
from beam_agents.replay.result import ReplayHeader, ReplayResult, Verdict
from replay_tui.render.literal import literal_text

VERDICT_STYLES: dict[Verdict, str] = {
    Verdict.REPRODUCED: "bold black on green",
    Verdict.WHAT_IF: "bold black on cyan",
    Verdict.DIVERGED: "bold white on red",
    Verdict.IRREPRODUCIBLE: "bold black on yellow",
    Verdict.USAGE_ERROR: "bold white on magenta",
}

LABEL = "bold"
DIM = "dim"


def styled_key(entity_key: bytes | None) -> Text:
    """The key as hex and, when it is printable, as quoted text: ``6375…3432 "customer-42"``."""
    if entity_key is None:
        return Text("?", style=DIM)
    label = Text(entity_key.hex() or '""')
    printable = key_text(entity_key)
    if printable is not None:
        label.append("  ")
        label.append(f'"{printable}"', style="italic")
    return label


def _field(line: Text, name: str, value: Text | str) -> None:
    if line:
        line.append("   ")
    line.append(f"{name}: ", style=LABEL)
    line.append(value if isinstance(value, Text) else literal_text(value))


def header_lines(header: ReplayHeader) -> list[Text]:
    """Three lines: version and import paths; key, seq and kind; clock and snapshot provenance."""
    first = Text()
    first.append(f"beam-agents-replay {escape(header.version)}", style="bold")
    _field(first, "agent", header.agent_path or "-")
    _field(first, "registry", header.registry_path or "-")

    second = Text()
    _field(second, "key", styled_key(header.entity_key))
    _field(second, "seq", "?" if header.seq is None else str(header.seq))
    kind: str = header.kind or "?"
    if header.trigger:
        kind = f"{kind} ({header.trigger})"
    _field(second, "kind", kind)

    # Most important first on each line: a narrow terminal cuts the end of a line.
    third = Text()
    if header.now_ms is None:
        _field(third, "now_ms", "?")
    else:
        _field(third, "now_ms", f"{header.now_ms} ({utc_time(header.now_ms)})")
    if header.snapshot_seq is not None:
        snap = f"seq {header.snapshot_seq}"
        if header.snapshot_request_id:
            snap += f", request {header.snapshot_request_id}"
        _field(third, "snapshot", snap)
    if header.state_schema_version is not None:
        _field(third, "schema", f"v{header.state_schema_version}")
    migrations = ", ".join(header.migrations_applied) or "none"
    _field(third, "migrations", migrations)
    _field(third, "hitl", header.hitl_source or "default")
    if header.continuation_source:
        _field(third, "continuation", header.continuation_source)
    return [first, second, third]


def verdict_banner(result: ReplayResult) -> Text:
    """`` DIVERGED  exit 1  event 4 TOOL_CALL lookup_order: result differs``, styled per verdict."""
    verdict = result.verdict
    banner = Text()
    banner.append(f" {VERDICT_TITLES[verdict]} ", style=VERDICT_STYLES[verdict])
    banner.append(f"  exit {result.exit_code}  ", style="bold")
    banner.append(escape(result.reason) or "-")
    return banner
