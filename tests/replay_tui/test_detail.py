"""The detail pane's content: aligned fields, marked differences, the diff and the miss."""

from __future__ import annotations

from collections.abc import Callable

import tui_results

from beam_agents import trace_events as te
from beam_agents.replay.result import ReplayResult
from replay_tui.render.detail import detail_lines, detail_rows


def rendered(result: ReplayResult, index: int, width: int = 120) -> str:
    lines = detail_lines(result, result.events[index], width)
    assert all(line.cell_len <= width for line in lines)
    return "\n".join(line.plain for line in lines)


def test_differing_fields_are_the_results_and_are_marked(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    assert result.first_divergence is not None
    pair = result.events[result.first_divergence.index]
    rows = detail_rows(pair)
    marked = {row.field for row in rows if row.differs}
    assert marked == set(pair.differing_fields)
    differing = next(row for row in rows if row.differs)
    assert differing.traced != differing.replayed


def test_fields_line_up_traced_beside_replayed() -> None:
    result = tui_results.reproduced_result()
    rows = detail_rows(result.events[2])
    by_label = {row.label: row for row in rows}
    assert by_label["kind"].traced == by_label["kind"].replayed == "TOOL_CALL"
    assert by_label[te.ATTR_TOOL_NAME].traced == "lookup_order"
    # Identity fields come after the attributes.
    labels = [row.label for row in rows]
    assert labels.index(te.ATTR_TOOL_NAME) < labels.index("trace_id")


def test_normalized_llm_flags_are_shown_but_not_marked_as_differences() -> None:
    result = tui_results.reproduced_result()
    rows = {row.label: row for row in detail_rows(result.events[1])}
    hit = rows[te.ATTR_CACHE_HIT]
    assert (hit.traced, hit.replayed) == ("false", "true")
    assert hit.normalized and not hit.differs
    assert rows[te.ATTR_BILLED].normalized


def test_first_divergence_shows_the_structured_diff(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    div = result.first_divergence
    assert div is not None
    text = rendered(result, div.index)
    assert "First divergence" in text
    for diff in div.fields:
        assert diff.path in text
    assert div.detail.splitlines()[0][:40] in text


def test_cache_miss_shows_the_key_and_the_nearest_entry(real: Callable[[str], ReplayResult]) -> None:
    result = real("cache-miss")
    miss = result.cache_miss
    assert miss is not None and miss.nearest is not None
    text = rendered(result, miss.event_index, width=160)
    assert "Cache miss" in text and miss.status in text
    assert miss.cache_key in text
    assert miss.nearest.cache_key in text
    assert "messages[0]" in text


def test_a_missing_replayed_event_says_so(real: Callable[[str], ReplayResult]) -> None:
    result = real("cache-miss")
    last = len(result.events) - 1
    assert result.events[last].replayed is None
    assert "missing: the re-run stopped before this traced event" in rendered(result, last)


def test_what_if_has_nothing_to_compare(real: Callable[[str], ReplayResult]) -> None:
    result = real("what-if")
    text = rendered(result, 0)
    assert "what-if: nothing traced to compare with" in text
    assert "≠" not in text and "traced" not in text.replace("nothing traced", "")
    assert "? unverifiable" in text  # the envelope: nothing traced to verify it with
    assert "ACTIVATION_START" in text


def test_narrow_panes_stack_fields_instead_of_squeezing_columns(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    assert result.first_divergence is not None
    text = rendered(result, result.first_divergence.index, width=50)
    assert "    traced    " in text and "    replayed  " in text
    assert "beam_agents.result_sha256" in text


def test_wide_layout_lines_up_the_value_columns(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    lines = detail_lines(result, result.events[0], 120)
    heading = next(line.plain for line in lines if line.plain.lstrip().startswith("field"))
    traced_at, replayed_at = heading.index("traced"), heading.index("replayed")
    kind = next(line.plain for line in lines if line.plain[2:].startswith("kind "))
    assert kind[traced_at:].startswith("ACTIVATION_START")
    assert kind[replayed_at:].startswith("ACTIVATION_START")


def test_the_cache_miss_shows_the_replayed_request_with_the_differing_component(
    real: Callable[[str], ReplayResult],
) -> None:
    result = real("cache-miss")
    assert result.cache_miss is not None
    text = rendered(result, result.cache_miss.event_index)
    assert "Replayed request" in text
    lines = text.splitlines()
    flagged = next(i for i, line in enumerate(lines) if line.startswith("≠ request.messages[0]"))
    assert "You are a terse" in " ".join(lines[flagged : flagged + 2])
    assert any(line.startswith("  request.messages[1]") for line in lines)  # not flagged


def test_a_memory_replay_does_not_judge_is_marked_not_judged_not_differs(
    real: Callable[[str], ReplayResult],
) -> None:
    """From a later snapshot the committed memory differs from the traced digest by
    construction; the detail pane must not show that as a difference of a reproduced run."""
    result = real("reproduced-later")
    assert result.verdict.value == "reproduced" and result.memory_not_judged
    end = result.events[-1]
    text = "\n".join(line.plain for line in detail_lines(result, end, 200))
    assert "~ not judged   memory " in text
    assert f"not judged: {result.memory_not_judged}" in text
    assert "≠ differs" not in text
