"""Deep memory in the state view: rendered without recursion, one depth limit with the loader.

Before: the state view recursed through the memory JSON, froze, then dumped an
85 MB traceback (with the memory in it) at nesting ~490, although the loader
accepted ~985. Now the loader refuses more than ``MAX_JSON_DEPTH`` levels and
the views render up to it iteratively (and cut anything deeper, if a result is
built by hand).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import tui_results

from beam_agents.canonical_json import MAX_JSON_DEPTH
from replay_tui.app import ReplayApp
from replay_tui.render.state import JsonNode, json_tree
from replay_tui.screens.state import StateScreen
from replay_tui.widgets.json_tree import JsonTree


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": value}
    return value


def tree_depth(node: JsonNode) -> int:
    deepest, stack = 0, [(node, 0)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in current.children or ())
    return deepest


def test_json_tree_at_the_limit_shows_every_level() -> None:
    root = json_tree(nested(MAX_JSON_DEPTH))
    assert tree_depth(root) == MAX_JSON_DEPTH
    assert "not shown" not in str(root.label)


def test_json_tree_far_past_the_recursion_limit_is_cut_with_a_note() -> None:
    root = json_tree(nested(sys.getrecursionlimit() * 5))
    assert tree_depth(root) == MAX_JSON_DEPTH
    node = root
    while node.children:
        node = node.children[0]
    assert f"nested deeper than {MAX_JSON_DEPTH} levels (not shown)" in node.label.plain


async def test_state_screen_opens_on_memory_at_the_depth_limit() -> None:
    result = tui_results.reproduced_result()
    assert result.state is not None
    deep = dataclasses.replace(result, state=dataclasses.replace(result.state, memory=nested(MAX_JSON_DEPTH)))
    app = ReplayApp(deep)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, StateScreen)
        tree = app.screen.query_one(JsonTree)
        tree.root.expand_all()
        await pilot.pause()
        assert tree.last_line >= MAX_JSON_DEPTH
        await pilot.press("q")


def test_the_loader_accepts_exactly_what_the_view_shows_in_full() -> None:
    import json

    from beam_agents.blobs import dump_memory, load_memory

    memory = nested(MAX_JSON_DEPTH)
    assert load_memory(dump_memory(memory))[0] == memory
    assert "not shown" not in json.dumps([n.label.plain for n in _walk(json_tree(memory))])


def _walk(node: JsonNode) -> list[JsonNode]:
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(current.children or ())
    return out
