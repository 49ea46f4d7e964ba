"""The header (what was replayed) and the verdict banner (what replay concluded)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from beam_agents.replay.result import ReplayResult
from replay_tui.render.header import (
    build_skew_header_line,
    fork_header_line,
    header_lines,
    reference_header_line,
    verdict_banner,
)


class ReplayHeaderPanel(Static):
    """Version, agent and registry; key, seq, clock and kind; snapshot provenance."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        lines = header_lines(result.header)
        if result.header.build_skew:
            lines.append(build_skew_header_line(result.header))
        if result.reference is not None:
            lines.append(reference_header_line(result.reference))
        if result.fork is not None:
            lines.append(fork_header_line(result.fork))
        super().__init__(Text("\n").join(lines), id=id)


class VerdictBanner(Static):
    """The verdict, its exit code and the one-line reason, coloured by verdict."""

    def __init__(self, result: ReplayResult, *, id: str | None = None) -> None:
        super().__init__(verdict_banner(result), id=id)
        self.add_class(f"-{result.verdict.name.lower()}")
