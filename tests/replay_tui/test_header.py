"""Header lines and the verdict banner read the result; every verdict has its title and code."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import tui_results

from beam_agents.replay.reporting.labels import VERDICT_TITLES
from beam_agents.replay.result import ReplayResult
from replay_tui.render.header import header_lines, verdict_banner


def test_header_shows_version_paths_key_seq_clock_and_kind(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    text = "\n".join(line.plain for line in header_lines(result.header))
    assert "beam-agents-replay 1.0.0a1" in text
    assert "agent: replay_agents:AGENT" in text and "registry: replay_agents:TOOLS_CHANGED_LOOKUP" in text
    assert "key: 637573746f6d65722d3432" in text and '"customer-42"' in text
    assert f"seq: {result.header.seq}" in text
    assert f"now_ms: {result.header.now_ms} (2024-12-12 10:41:00.000 UTC)" in text
    assert "kind: start (event)" in text


def test_unprintable_key_is_shown_in_hex_only() -> None:
    header = tui_results.header(entity_key=b"\x00\x01\xff")
    text = header_lines(header)[1].plain
    assert "key: 0001ff" in text and '"' not in text


@pytest.mark.parametrize(
    ("scenario", "title", "code"),
    [
        ("reproduced", "REPRODUCED", 0),
        ("diverged", "DIVERGED", 1),
        ("usage-error", "ERROR", 2),
        ("cache-miss", "IRREPRODUCIBLE", 3),
        ("what-if", "WHAT-IF", 0),
    ],
)
def test_banner_titles_the_verdict_with_its_exit_code_and_reason(
    real: Callable[[str], ReplayResult], scenario: str, title: str, code: int
) -> None:
    result = real(scenario)
    banner = verdict_banner(result).plain
    assert banner.startswith(f" {title} ")
    assert f"exit {code}" in banner
    assert result.reason[:30] in banner


def test_every_verdict_has_a_title() -> None:
    from beam_agents.replay.result import Verdict

    assert set(VERDICT_TITLES) == set(Verdict)
