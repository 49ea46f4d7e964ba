"""Timeline rows as data and as laid-out lines: marks, cells, widths, filter, navigation."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import tui_results

from beam_agents._protos import TraceEvent
from beam_agents.replay.result import ReplayResult
from replay_tui.render.timeline import (
    SEPARATOR,
    RowMark,
    TimelineModel,
    build_rows,
    filter_positions,
    index_width,
    pair_search_text,
    render_heading,
    render_row,
)

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e]")


def test_diverged_rows_mark_the_first_divergence_and_later_differences(
    real: Callable[[str], ReplayResult],
) -> None:
    result = real("diverged")
    rows = build_rows(result)
    assert result.first_divergence is not None
    first = result.first_divergence.index
    assert rows[first].mark is RowMark.FIRST_DIVERGENCE
    assert all(row.mark is RowMark.SAME for row in rows[:first])
    assert any(row.mark in (RowMark.DIFFERS, RowMark.MISSING) for row in rows[first + 1 :])


def test_reproduced_rows_are_all_unmarked_and_show_both_sides(real: Callable[[str], ReplayResult]) -> None:
    rows = build_rows(real("reproduced"))
    assert rows and all(row.mark is RowMark.SAME for row in rows)
    assert all(row.traced is not None and row.replayed is not None for row in rows)


def test_cache_miss_row_is_marked_and_carries_the_missing_key(real: Callable[[str], ReplayResult]) -> None:
    result = real("cache-miss")
    assert result.cache_miss is not None
    row = build_rows(result)[result.cache_miss.event_index]
    assert row.mark is RowMark.CACHE_MISS
    assert row.miss_key == result.cache_miss.cache_key
    assert row.replayed is not None and row.replayed.cache == "MISS"
    assert f"missing key {result.cache_miss.cache_key}" == row.replayed.extra
    line = render_row(row, 200).plain
    assert f"missing key {result.cache_miss.cache_key[:16]}" in line


def test_llm_row_shows_hit_miss_and_billing_per_side() -> None:
    rows = build_rows(tui_results.reproduced_result())
    llm = next(row for row in rows if row.traced is not None and row.traced.kind_code == TraceEvent.LLM_CALL)
    assert llm.traced is not None and llm.replayed is not None
    # The pipeline paid for the first call; the re-run was served from the cache.
    assert (llm.traced.cache, llm.traced.billed) == ("live", "$")  # it went to the provider
    assert (llm.replayed.cache, llm.replayed.billed) == ("hit", "")
    assert llm.traced.extra.startswith("k=")


def test_intent_and_suspension_rows_name_the_intent_ids() -> None:
    rows = build_rows(tui_results.reproduced_result())
    staged = [r for r in rows if r.traced is not None and r.traced.kind == "STAGED"]
    assert staged[0].traced is not None and tui_results.REFUND_INTENT in staged[0].traced.extra
    assert "(approval)" in staged[0].traced.extra
    suspended = next(r for r in rows if r.traced is not None and r.traced.kind == "SUSPEND")
    assert suspended.traced is not None and tui_results.REFUND_INTENT in suspended.traced.extra


def test_what_if_rows_are_not_marked_as_extra(real: Callable[[str], ReplayResult]) -> None:
    result = real("what-if")
    rows = build_rows(result)
    assert rows and all(row.traced is None for row in rows)
    assert all(row.mark is RowMark.SAME for row in rows)
    assert "what-if" in render_row(rows[0], 120).plain
    assert TimelineModel(result).notable == []


@pytest.mark.parametrize("width", [60, 99, 100, 157, 200])
def test_rows_fill_exactly_the_width_and_align_with_the_heading(
    real: Callable[[str], ReplayResult], width: int
) -> None:
    result = real("diverged")
    idx = index_width(len(result.events))
    heading = render_heading(width, idx_width=idx).plain
    assert len(heading) == width
    column = heading.index(SEPARATOR)
    for row in build_rows(result):
        line = render_row(row, width, idx_width=idx).plain
        assert len(line) == width
        assert line[column : column + len(SEPARATOR)] == SEPARATOR


def test_rows_of_hostile_strings_hold_no_control_characters(injection: ReplayResult) -> None:
    for row in build_rows(injection):
        line = render_row(row, 300)
        assert not UNSAFE.search(line.plain)
        assert "[bold red]x[/]" in line.plain or row.traced is None or row.traced.kind != "TOOL"


def test_model_navigates_between_notable_rows(real: Callable[[str], ReplayResult]) -> None:
    result = real("cache-miss")
    model = TimelineModel(result)
    assert result.cache_miss is not None
    miss = result.cache_miss.event_index
    assert model.initial_position() == miss
    assert miss in model.notable
    assert model.next_notable(-1) == model.notable[0]
    assert model.previous_notable(model.notable[0]) is None
    assert model.next_notable(model.notable[-1]) is None
    assert model.previous_notable(len(model)) == model.notable[-1]


def test_model_opens_on_the_first_divergence(real: Callable[[str], ReplayResult]) -> None:
    result = real("diverged")
    assert result.first_divergence is not None
    assert TimelineModel(result).initial_position() == result.first_divergence.index
    assert TimelineModel(real("reproduced")).initial_position() == 0


def test_row_cache_stays_bounded_while_rows_stay_correct() -> None:
    result = tui_results.large_result(5000)
    model = TimelineModel(result)
    for pos in range(len(model)):
        assert model.row(pos).index == pos
    assert len(model._rows) <= 2048


def test_filter_by_kind_keeps_rows_of_that_kind() -> None:
    result = tui_results.reproduced_result()
    model = TimelineModel(result)
    positions = filter_positions(model, "kind:LLM")
    assert positions == [
        pos for pos, pair in enumerate(result.events) if pair.traced is not None and pair.traced.kind == TraceEvent.LLM_CALL
    ]
    assert filter_positions(model, "kind:intent_") == [4, 5, 6]


def test_filter_by_text_matches_what_rows_show() -> None:
    model = TimelineModel(tui_results.reproduced_result())
    assert filter_positions(model, "send_email") == [5, 6]
    assert filter_positions(model, tui_results.REFUND_INTENT[:10]) == [4, 7]
    assert filter_positions(model, "MISS") == [1]
    assert filter_positions(model, "no such thing") == []


def test_filter_stops_when_superseded() -> None:
    model = TimelineModel(tui_results.large_result(20_000))
    calls: list[int] = []

    def progress(done: int) -> bool:
        calls.append(done)
        return False

    assert filter_positions(model, "lookup", progress=progress, chunk=1000) is None
    assert calls == [1000]


def test_search_text_includes_kinds_names_attributes_and_cache_words() -> None:
    result = tui_results.reproduced_result()
    text = pair_search_text(result.events[1])
    assert "llm_call" in text and "llm" in text and "m-1" in text
    # traced missed, replayed hit: the words themselves ("cache_hit" alone holds "hit")
    assert {"billed", "miss", "hit"} <= set(text.split())
    assert tui_results.cache_key("greeting") in text
    assert "differs" in pair_search_text(tui_results.diverged_result().events[2])
    assert "differs" not in text
