"""Step mode's index: the activation after row N, on both sides, without rescanning."""

from __future__ import annotations

import threading
from collections.abc import Callable

import tui_results

from beam_agents.replay.result import ReplayResult
from replay_tui.render.step import StepIndex, step_lines


def test_picture_after_each_row_counts_what_happened_so_far() -> None:
    index = StepIndex(tui_results.reproduced_result().events)
    # Row 0 is ACTIVATION_START: nothing has happened yet.
    start = index.picture(0)
    assert (start.traced.model_calls, start.traced.tool_calls, start.traced.staged) == (0, 0, 0)
    assert start.traced.ending is None and start.traced.suspension is None
    # After row 1, the first model call: a billed miss traced, a cache hit replayed.
    first = index.picture(1)
    assert (first.traced.model_calls, first.traced.misses, first.traced.billed) == (1, 1, 1)
    assert (first.replayed.model_calls, first.replayed.hits, first.replayed.billed) == (1, 1, 0)
    assert first.traced.recent_calls[0].cache_key == tui_results.cache_key("greeting")
    # After row 5 both intents are staged; only send_email is released (at row 6).
    staged = index.picture(5)
    assert staged.traced.staged == 2 and staged.traced.released == 0
    assert [released for _, released in staged.traced.recent_staged] == [False, False]
    released = index.picture(6)
    assert [(r.tool, done) for r, done in released.traced.recent_staged] == [
        ("issue_refund", False),
        ("send_email", True),
    ]
    # Row 7 suspends awaiting the refund; row 8 ends the activation.
    suspended = index.picture(7)
    assert suspended.traced.suspension is not None
    assert suspended.traced.suspension.awaiting == (tui_results.REFUND_INTENT,)
    end = index.picture(8)
    assert end.traced.ending is not None and end.traced.ending.outcome == "suspended"
    assert end.traced.tool_calls == 1 and end.traced.model_calls == 2


def test_going_back_shows_the_earlier_picture() -> None:
    index = StepIndex(tui_results.reproduced_result().events)
    later = index.picture(8)
    earlier = index.picture(2)
    assert later.traced.model_calls == 2 and earlier.traced.model_calls == 1
    assert earlier.traced.ending is None


def test_the_index_reads_each_row_once_and_only_as_far_as_asked() -> None:
    index = StepIndex(tui_results.large_result(10_000).events)
    assert index.built == 0
    index.picture(10)
    assert index.built == 11
    index.picture(5)
    assert index.built == 11  # going back reads nothing
    index.picture(9_999)
    assert index.built == 10_000
    picture = index.picture(9_999)
    assert picture.traced.model_calls + picture.traced.tool_calls == 9_998
    assert len(picture.traced.recent_calls) == 5


def test_cache_miss_replay_stops_and_fails_on_the_replayed_side(real: Callable[[str], ReplayResult]) -> None:
    result = real("cache-miss")
    assert result.cache_miss is not None
    last = StepIndex(result.events).picture(len(result.events) - 1)
    assert last.replayed.misses == 1
    assert last.replayed.ending is not None and last.replayed.ending.failed
    assert last.traced.ending is not None and not last.traced.ending.failed


def test_what_if_has_no_traced_side(real: Callable[[str], ReplayResult]) -> None:
    result = real("what-if")
    picture = StepIndex(result.events).picture(len(result.events) - 1)
    assert not picture.traced.present
    assert picture.replayed.present and picture.replayed.released == 1


def test_extending_from_a_thread_while_pictures_are_read() -> None:
    index = StepIndex(tui_results.large_result(20_000).events)
    worker = threading.Thread(target=index.extend_to, args=(19_999,))
    worker.start()
    seen = [index.picture(min(index.built, 100)) for _ in range(50)]
    worker.join()
    assert all(p.position <= 100 for p in seen)
    assert index.built == 20_000
    assert index.try_extend_to(19_999)


def test_empty_result_has_an_empty_picture() -> None:
    picture = StepIndex(()).picture(3)
    assert picture.total == 0 and not picture.traced.present


def test_step_lines_name_both_sides_within_the_width() -> None:
    lines = step_lines(StepIndex(tui_results.reproduced_result().events).picture(7), 100)
    assert all(line.cell_len <= 100 for line in lines)
    text = "\n".join(line.plain for line in lines)
    assert "after event 7 of 9" in text
    assert "traced" in text and "replayed" in text
    assert "suspended" in text and tui_results.REFUND_INTENT in text
