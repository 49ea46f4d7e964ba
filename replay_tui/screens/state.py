"""The snapshot's state: memory tree, replay cache, pending intents, continuation, versions,
and the tool cache (recorded tool results)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from beam_agents.replay.result import ReplayResult
from replay_tui.render.state import (
    CACHE_COLUMNS,
    PENDING_COLUMNS,
    TOOL_CACHE_COLUMNS,
    cache_entry_text,
    cache_rows,
    continuation_text,
    memory_delta_text,
    memory_image_text,
    pending_rows,
    tool_cache_rows,
    versions_text,
)
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import VerdictBanner
from replay_tui.widgets.json_tree import JsonTree
from replay_tui.widgets.keyed import KeyedDataTable


class StateScreen(Screen[None]):
    """The pre-replay picture of the key, as loaded from the snapshot (migrated in memory)."""

    FOOTER_FIRST = ("app.pop_screen",)
    """Back comes right after q and ? in the footer (``KeysFooter``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("1", "tab('memory')", "Memory", show=False),
        Binding("2", "tab('cache')", "Cache", show=False),
        Binding("3", "tab('pending')", "Pending", show=False),
        Binding("4", "tab('continuation')", "Continuation", show=False),
        Binding("5", "tab('versions')", "Versions", show=False),
        Binding("6", "tab('tools')", "Tool cache", show=False),
    ]

    def __init__(self, result: ReplayResult) -> None:
        super().__init__()
        self.result = result

    def compose(self) -> ComposeResult:
        yield VerdictBanner(self.result, id="verdict")
        state = self.result.state
        if state is None:
            yield Static(
                Text("This result carries no snapshot state.", style="dim"), id="state-empty"
            )
            yield KeysFooter()
            return
        with TabbedContent(id="state-tabs"):
            with TabPane("1 memory", id="memory"):
                yield Static(memory_image_text(self.result), id="memory-image")
                yield JsonTree(state.memory, id="memory-tree")
                yield Static(memory_delta_text(self.result), id="memory-delta")
            with TabPane(f"2 cache ({len(state.cache_entries)})", id="cache"):
                yield KeyedDataTable(id="cache-table", cursor_type="row", zebra_stripes=True)
                with VerticalScroll(id="cache-entry"):
                    yield Static(id="cache-entry-text")
            with TabPane(f"3 pending ({len(state.pending)})", id="pending"):
                yield KeyedDataTable(id="pending-table", cursor_type="row", zebra_stripes=True)
                if not state.pending:
                    yield Static(
                        Text("  no pending intents: the snapshot holds none", style="dim"),
                        id="pending-empty",
                    )
            with TabPane("4 continuation", id="continuation"), VerticalScroll():
                yield Static(continuation_text(state.continuation, self.result.header.now_ms))
                if state.resumed_continuation is not None:
                    yield Static(Text("\nconsumed by this resume", style="bold underline"))
                    yield Static(
                        continuation_text(state.resumed_continuation, self.result.header.now_ms)
                    )
            with TabPane("5 versions", id="versions"), VerticalScroll():
                yield Static(versions_text(self.result, state))
            with TabPane(f"6 tools ({len(state.tool_cache_entries)})", id="tools"):
                yield KeyedDataTable(id="tool-cache-table", cursor_type="row", zebra_stripes=True)
                if not state.tool_cache_entries:
                    yield Static(
                        Text("  nothing recorded: the snapshot's tool cache is empty", style="dim"),
                        id="tools-empty",
                    )
        yield KeysFooter()

    def on_mount(self) -> None:
        state = self.result.state
        if state is None:
            return
        cache = self.query_one("#cache-table", DataTable)
        cache.add_columns(*CACHE_COLUMNS)
        cache.add_rows(cache_rows(state.cache_entries))
        self._show_cache_entry(0)
        pending = self.query_one("#pending-table", DataTable)
        pending.add_columns(*PENDING_COLUMNS)
        pending.add_rows(pending_rows(state.pending))
        tools = self.query_one("#tool-cache-table", DataTable)
        tools.add_columns(*TOOL_CACHE_COLUMNS)
        tools.add_rows(tool_cache_rows(state.tool_cache_entries))
        self.query_one(JsonTree).focus()

    @on(DataTable.RowHighlighted, "#cache-table")
    def _cache_row(self, event: DataTable.RowHighlighted) -> None:
        self._show_cache_entry(event.cursor_row)

    def _show_cache_entry(self, row: int) -> None:
        """The highlighted entry whole under the table: its key and the response's text."""
        state = self.result.state
        assert state is not None
        entries = sorted(state.cache_entries, key=lambda e: e.lru_rank)
        shown = self.query_one("#cache-entry-text", Static)
        if 0 <= row < len(entries):
            shown.update(cache_entry_text(entries[row]))
        else:
            shown.update(Text("the snapshot's replay cache is empty", style="dim"))

    def action_tab(self, tab: str) -> None:
        if self.result.state is not None:
            self.query_one(TabbedContent).active = tab
