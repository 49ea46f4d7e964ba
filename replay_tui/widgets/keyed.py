"""The same movement keys in every list: ``j``/``k`` down/up, ``g``/``G`` first/last.

The timeline has them (``widgets/timeline.py``); the state, intents and outputs
tables use ``KeyedDataTable``, the memory tree is a ``KeyedTree`` (``JsonTree``),
and the help screen scrolls with them, so a key learnt once works everywhere.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Tree

T = TypeVar("T")

ROW_KEYS: list[BindingType] = [
    Binding("j", "cursor_down", "Down", show=False),
    Binding("k", "cursor_up", "Up", show=False),
    Binding("g", "first", "First", show=False),
    Binding("G", "last", "Last", show=False),
]


class KeyedDataTable(DataTable[Any]):
    """A ``DataTable`` that also moves with ``j``/``k``/``g``/``G``."""

    BINDINGS: ClassVar[list[BindingType]] = ROW_KEYS

    def action_first(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)


class KeyedTree(Tree[T]):
    """A ``Tree`` that also moves with ``j``/``k``/``g``/``G`` (over the visible lines)."""

    BINDINGS: ClassVar[list[BindingType]] = ROW_KEYS

    def action_first(self) -> None:
        self.cursor_line = 0

    def action_last(self) -> None:
        self.cursor_line = self.last_line
