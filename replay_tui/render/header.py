"""The header lines and the verdict banner: what was replayed, and what replay concluded.

The verdict, its exit code and its reason are read from the ``ReplayResult``;
nothing here judges anything (docs/index.md, "How the code is laid out", rule 3).
"""

from __future__ import annotations

from rich.text import Text

from beam_agents.agent_build import describe_build
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.reporting.labels import VERDICT_TITLES, key_text, utc_time
from beam_agents.replay.result import ForkRun, ReferenceRun, ReplayHeader, ReplayResult, Verdict
from replay_tui.render.literal import literal_text

VERDICT_STYLES: dict[Verdict, str] = {
    Verdict.REPRODUCED: "bold black on green",
    Verdict.WHAT_IF: "bold black on cyan",
    Verdict.FORK: "bold white on blue",
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


def reference_header_line(reference: ReferenceRun) -> Text:
    """Which build the traced side's values come from, and how far they are production's."""
    line = Text()
    _field(line, "reference", reference.agent_path or "-")
    line.append(f" ({escape(reference.source)})", style=DIM)
    line.append("  ")
    if not reference.verdict or reference.verdict == "error":
        line.append("no values shown: ", style="bold yellow")
        line.append(escape(reference.reason) or "no result")
    elif reference.reproduced:
        line.append("reproduced", style="bold green")
        line.append(f": {len(reference.values)} values proved production's by digest")
    else:
        where = (
            f" at event {reference.first_divergence}"
            if reference.first_divergence is not None
            else ""
        )
        line.append(f"{escape(reference.verdict)}{where} itself", style="bold yellow")
        line.append(f": only the {len(reference.values)} values it proves are shown")
    return line


def fork_header_line(fork: ForkRun) -> Text:
    """A fork: which event received what, and that the replayed column is the forked run."""
    line = Text()
    line.append("fork: a counterfactual, not a reproduction", style="bold blue")
    _field(line, "event", f"{fork.index} {fork.kind} {fork.name!r}")
    _field(line, "received", fork.value if len(fork.value) <= 60 else fork.value[:60] + "…")
    line.append(f" ({escape(fork.value_source)})", style=DIM)
    _field(
        line,
        "continuation",
        f"caches, then {fork.provider_path}" if fork.provider_path else "the snapshot's caches only",
    )
    line.append("   the replayed column is the forked run", style=DIM)
    return line


def build_skew_header_line(header: ReplayHeader) -> Text:
    """The snapshot's build is not the given agent's: what differs (the headless report's
    ``build skew:`` line has both builds whole; this line, short, has what differs)."""
    skew = header.build_skew
    line = Text()
    line.append(
        f"build skew: {', '.join(skew)} {'differs' if len(skew) == 1 else 'differ'}",
        style="bold yellow",
    )
    # The source digest only when the code differs (the report's line has both whole).
    code = "code" in skew
    for name, build in (("snapshot", header.snapshot_build), ("given", header.agent_build)):
        line.append(f"   {name}: ", style=LABEL)
        line.append(literal_text(describe_build(build, code=code) if build is not None else "?"))
    return line
