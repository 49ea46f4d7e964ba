"""A collapsible tree of a JSON value whose every label is literal text.

Textual's own ``Tree.add_json`` builds labels with markup around the keys, so a
memory key like ``[bold red]x[/]`` would be styled; this tree never parses markup.
"""

from __future__ import annotations

from typing import Any

from textual.widgets.tree import TreeNode

from replay_tui.render.state import JsonNode, json_tree
from replay_tui.widgets.keyed import KeyedTree

EXPAND_DEPTH = 2
"""Levels open on first show; deeper ones open on demand."""


class JsonTree(KeyedTree[None]):
    """The working memory (or any JSON value) as a tree."""

    def __init__(self, value: Any, *, name: str = "memory", id: str | None = None) -> None:
        root = json_tree(value, name)
        super().__init__(root.label, id=id)
        self._fill(self.root, root, depth=0)
        self.root.expand()

    def _fill(self, node: TreeNode[None], data: JsonNode, depth: int) -> None:
        # Iterative: the tree may be as deep as the loader allows (MAX_JSON_DEPTH).
        stack = [(node, data, depth)]
        while stack:
            parent, parent_data, level = stack.pop()
            for child in parent_data.children or ():
                if child.children is None:
                    parent.add_leaf(child.label)
                else:
                    branch = parent.add(child.label, expand=level + 1 < EXPAND_DEPTH)
                    stack.append((branch, child, level + 1))
