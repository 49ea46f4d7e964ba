"""Recorded tools in the TUI: a served result is a cache hit like a served model response, a
tool-cache miss is marked like a cache miss, and the state view lists the tool cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import real_results  # noqa: F401  (puts tests/replay on sys.path)
import recorded_agents as rec
from replay_harness import KEY, T0, KeyHistory, options
from textual.widgets import DataTable, Static, TabbedContent

from beam_agents._protos import TraceEvent
from beam_agents.replay.engine import replay
from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.result import ReplayResult, Verdict
from beam_agents.testing import event_envelope
from replay_tui.app import ReplayApp
from replay_tui.render.state import TOOL_CACHE_COLUMNS, tool_cache_rows
from replay_tui.render.timeline import RowMark, TimelineModel

EVENT = event_envelope(KEY, "ask", b"A1", time_ms=T0)


@pytest.fixture(scope="module")
def history() -> Iterator[KeyHistory]:
    service = rec.OrderService()
    service.orders["A1"] = {"order_id": "A1", "status": "shipped"}
    rec.SERVICE_URL = service.url
    history = KeyHistory(rec.AGENT, rec.TOOLS, rec.make_provider())
    try:
        history.send(EVENT)
    finally:
        service.stop()
    yield history


def run(history: KeyHistory, agent: str) -> ReplayResult:
    return replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=EVENT,
            agent=agent,
            registry="recorded_agents:TOOLS",
        )
    )


def tool_position(result: ReplayResult) -> int:
    return next(
        pos
        for pos, pair in enumerate(result.events)
        if pair.traced is not None and pair.traced.kind == TraceEvent.TOOL_CALL
    )


def test_a_served_recorded_result_is_a_cache_hit_beside_the_recording(history: KeyHistory) -> None:
    result = run(history, "recorded_agents:AGENT")
    assert result.verdict is Verdict.REPRODUCED, result.reason
    row = TimelineModel(result).row(tool_position(result))
    assert row.mark is RowMark.SAME
    assert row.traced is not None and row.traced.cache == "rec"
    assert row.replayed is not None and row.replayed.cache == "hit"


def test_a_tool_cache_miss_is_marked_and_named_on_its_row(history: KeyHistory) -> None:
    result = run(history, "recorded_agents:AGENT_OTHER_ARGS")
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.tool_miss is not None
    model = TimelineModel(result)
    position = tool_position(result)
    assert model.initial_position() == position
    row = model.row(position)
    assert row.replayed is not None and row.replayed.cache == "MISS"
    assert f"missing tool result read_order args={result.tool_miss.args_sha256[:12]}" in (
        row.replayed.extra
    )
    markdown = report_markdown(result)
    assert "Tool cache miss at event" in markdown and "argument 'order_id' differs" in markdown


def test_the_tool_cache_rows_show_status_age_and_the_served_entry(history: KeyHistory) -> None:
    result = run(history, "recorded_agents:AGENT")
    assert result.state is not None
    (row,) = [
        [cell.plain for cell in cells] for cells in tool_cache_rows(result.state.tool_cache_entries)
    ]
    assert len(row) == len(TOOL_CACHE_COLUMNS)
    assert row[1] == "read_order" and row[3] == "servable" and row[7] == "hit" and row[8] == "1"
    assert row[4] == "0ms"  # recorded on the replayed activation's own clock


async def test_the_state_screen_has_a_tool_cache_tab(history: KeyHistory) -> None:
    result = run(history, "recorded_agents:AGENT")
    assert result.state is not None
    app = ReplayApp(result)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s", "6")
        assert app.screen.query_one(TabbedContent).active == "tools"
        table = app.screen.query_one("#tool-cache-table", DataTable)
        assert table.row_count == len(result.state.tool_cache_entries) == 1
        assert str(table.get_row_at(0)[1]) == "read_order"


async def test_empty_tabs_say_so_and_full_ones_do_not(history: KeyHistory) -> None:
    result = run(history, "recorded_agents:AGENT")
    assert result.state is not None and result.state.tool_cache_entries
    assert not result.state.pending
    app = ReplayApp(result)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s", "3")
        line = app.screen.query_one("#pending-empty", Static)
        assert "no pending intents" in str(line.render())
        # One recorded call: the tools tab holds its row and no "nothing recorded" line.
        assert not app.screen.query("#tools-empty")


async def test_an_empty_tool_cache_says_nothing_recorded(real: Callable[[str], ReplayResult]) -> None:
    result = real("reproduced")
    assert result.state is not None and not result.state.tool_cache_entries
    app = ReplayApp(result)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s", "6")
        line = app.screen.query_one("#tools-empty", Static)
        assert "nothing recorded" in str(line.render())
