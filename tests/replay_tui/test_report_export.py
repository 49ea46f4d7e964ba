"""``e``'s report files: Markdown for the ticket, JSON identical to ``--json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from beam_agents.replay.reporting.json_doc import pair_document, render_json
from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.result import ReplayResult
from replay_tui.export import export_report, report_basename


def test_export_writes_markdown_and_the_headless_json(
    real: Callable[[str], ReplayResult], tmp_path: Path
) -> None:
    result = real("diverged")
    (tmp_path / "reports").mkdir()
    md_path, json_path = export_report(result, tmp_path / "reports")
    assert md_path.parent == json_path.parent == (tmp_path / "reports").resolve()
    assert md_path.name == f"{report_basename(result)}.md"
    assert json_path.read_text(encoding="utf-8") == render_json(result)
    document = json.loads(json_path.read_text(encoding="utf-8"))
    assert document["exit_code"] == 1
    markdown = md_path.read_text(encoding="utf-8")
    assert markdown.startswith("# beam-agents-replay: DIVERGED (exit 1)")


def test_markdown_names_the_divergence_the_miss_and_the_outputs(real: Callable[[str], ReplayResult]) -> None:
    diverged = report_markdown(real("diverged"))
    assert "## First divergence" in diverged and "beam_agents.result_sha256" in diverged
    missed = real("cache-miss")
    assert missed.cache_miss is not None
    text = report_markdown(missed)
    assert f"## Cache miss at event {missed.cache_miss.event_index}" in text
    assert missed.cache_miss.cache_key in text and "messages[0]" in text
    reproduced = report_markdown(real("reproduced"))
    assert "## Outputs and memory" in reproduced
    assert "- memory blob: " in reproduced and "(matches the traced digest)" in reproduced
    unseen = real("memory-unseen")
    text = report_markdown(unseen)
    assert "## Memory reads not judged" in text
    assert f"- before event {unseen.unseen_reads[0].event_index}: " in text and "'turns'" in text
    assert "(differs: traced sha256=" not in reproduced


def test_markdown_of_hostile_strings_holds_no_escape_sequences(injection: ReplayResult) -> None:
    text = report_markdown(injection)
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text


def test_copied_event_is_both_sides_as_data(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    assert result.first_divergence is not None
    index = result.first_divergence.index
    data = pair_document(result.events[index])
    assert data["differs"] is True
    assert data["traced"]["kind"] == data["replayed"]["kind"] == "TOOL_CALL"
    assert data["differing_fields"] == list(result.events[index].differing_fields)
    # The one encoding of a pair: what `c` copies is the --json document's entry (the TUI's
    # copy had drifted: it left out normalized_fields).
    assert json.loads(json.dumps(data)) == json.loads(render_json(result))["events"][index]
    assert "normalized_fields" in data


def test_the_copied_event_of_a_cache_hit_names_its_normalized_fields(
    real: Callable[[str], ReplayResult],
) -> None:
    result = real("reproduced")
    normalized = [p for p in result.events if p.normalized_fields]
    assert normalized, "the reproduced fixture has an LLM_CALL whose cache_hit was normalized"
    assert pair_document(normalized[0])["normalized_fields"] == list(normalized[0].normalized_fields)


def test_export_into_an_unwritable_place_raises_oserror(
    real: Callable[[str], ReplayResult], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        export_report(real("reproduced"), blocker / "sub")
