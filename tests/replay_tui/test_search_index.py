"""``/``'s index finds what a straightforward scan of every row's values finds.

``SearchIndex`` answers from one casefolded string built on the first search, from
values the engine derives without digests (``search_texts``/``search_rows``). These
tests compare it, for every query and every starting row, with ``reference`` below:
the search as it was before the index (build each pair, read each event's values,
casefold each name, kind name, path and text).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pytest
import tui_results

from beam_agents.capture import CapturedValue, CaptureKind, ValueCapture
from beam_agents.replay.judging.values import ReplayValues
from beam_agents.replay.result import EventPair, ReplayResult, Value
from beam_agents.trace_events import kind_name
from replay_tui.render.detail import ValuesIndex, values_by_event
from replay_tui.render.search import SearchIndex, search_position

HOSTILE = 'Straße \x1b[31mRED\x1b[0m\n\t"quoted" back\\slash \u202eevil\u202c ǅ İ ﬃ'
"""Folds to more characters (ß, ﬃ, İ), escapes in JSON (quote, backslash, controls), bidi."""


def reference(result: ReplayResult, values: ValuesIndex, query: str, after: int) -> int | None:
    """The search before the index: every row's pair and values, read on each search."""
    needle = query.casefold()
    total = len(result.events)
    for step in range(1, total + 1):
        position = (after + step) % total
        pair: EventPair = result.events[position]
        found: Sequence[Value] = values.get(pair.index, ())
        for event in (pair.replayed, pair.traced):
            if event is not None and (
                needle in event.name.casefold() or needle in kind_name(event.kind).casefold()
            ):
                return position
        if any(needle in v.text.casefold() or needle in v.path.casefold() for v in found):
            return position
    return None


def _hostile(value: object) -> object:
    if isinstance(value, dict):
        return {**value, "note": HOSTILE}
    if isinstance(value, str):
        return f"{value} {HOSTILE}"
    return value


def with_hostile_values(result: ReplayResult) -> ReplayResult:
    """``result`` (the engine's) with ``HOSTILE`` in every tool argument and result."""
    values = result.values
    assert isinstance(values, ReplayValues)
    capture = ValueCapture(
        values=[
            CapturedValue(c.event_index, c.what, _hostile(c.value))
            if c.what in (CaptureKind.ARGS, CaptureKind.RESULT)
            else c
            for c in values._captured
        ]
    )
    derived = ReplayValues(
        values._traced,
        values._replayed,
        capture=capture,
        trigger=values._trigger,
        provider=values._provider,
        cache=None,
        outputs=values._outputs,
        memory=values._memory,
    )
    derived.check()
    return dataclasses.replace(result, values=derived)


def queries(result: ReplayResult, values: ValuesIndex) -> Iterator[str]:
    """Pieces of every name, kind, path and text the result shows, in several cases, and
    strings found nowhere."""
    seen: set[str] = set()
    for pair in result.events:
        texts = [t for v in values.get(pair.index, ()) for t in (v.path, v.text)]
        for event in (pair.replayed, pair.traced):
            if event is not None:
                texts += [event.name, kind_name(event.kind)]
        for text in texts:
            for piece in (text[:6], text[-9:], text[len(text) // 2 : len(text) // 2 + 5], text):
                if piece.strip() and len(piece) < 200:
                    seen.update((piece, piece.upper(), piece.swapcase()))
    seen.update(
        (
            "no such text anywhere",
            "STRASSE",
            "strasse",
            "\\n",  # a newline as JSON escapes it: only in a dict or list's text
            '\\"quoted\\"',
            "\x1b[31m",
            "\u202eevil",
            "ﬃ",
            "FFI",
            "i̇",
            "tool_call",
            "ACTIVATION_END",
            "",
        )
    )
    yield from sorted(seen)


def assert_same_answers(result: ReplayResult) -> int:
    values = values_by_event(result)
    index = SearchIndex(result, values)
    total = len(result.events)
    compared = 0
    for query in queries(result, values):
        for after in range(-1, total + 1):
            expected = reference(result, values, query, after)
            assert index.find(query, after) == expected, (query, after)
            assert search_position(result, values, query, after) == expected, (query, after)
            compared += 1
    return compared


@pytest.mark.parametrize("name", ["reproduced", "diverged", "cache-miss", "what-if"])
def test_the_index_finds_what_the_reference_finds_in_engine_results(real, name: str) -> None:
    result = real(name)
    assert isinstance(result.values, ReplayValues)
    assert assert_same_answers(result) > 100
    assert assert_same_answers(with_hostile_values(result)) > 100


def test_a_match_only_inside_a_value_and_only_as_json_escapes_it(real) -> None:
    result = with_hostile_values(real("diverged"))
    values = values_by_event(result)
    index = SearchIndex(result, values)
    tool = next(p.index for p in result.events if p.differs)  # lookup_order's TOOL_CALL
    # In the dict arguments' JSON text only: the quote and the newline are escaped there.
    found = index.find('"note": "straße \\u001b[31mred', -1)
    assert found is not None and found == reference(result, values, '"note": "STRASSE \\u001b', -1)
    # The result is a dict too (its text is JSON); a string result would hold a raw newline.
    assert index.find("\x1b[31mred", tool - 1) == reference(result, values, "\x1b[31mRED", tool - 1)
    assert index.find("NO SUCH", -1) is None


def test_hand_built_results_with_hostile_strings_and_tuple_values() -> None:
    for result in (tui_results.injection_result(), tui_results.diverged_result()):
        assert assert_same_answers(result) > 10


def test_rows_left_out_of_the_index_are_read_on_each_search(real, monkeypatch) -> None:
    # Long texts, and every text once the budget is spent, are read again per search.
    monkeypatch.setattr(SearchIndex, "LONG_TEXT", 40)
    monkeypatch.setattr(SearchIndex, "BUDGET", 300)
    result = with_hostile_values(real("diverged"))
    index = SearchIndex(result, values_by_event(result))
    index.find("x", -1)
    assert 0 < len(index._reread) < len(result.events)
    assert assert_same_answers(result) > 100


def test_the_budget_holds_for_texts_that_fold_to_more_characters(monkeypatch) -> None:
    """Hostile pass: the budget counted unfolded chars and the whole corpus was folded at
    the end, so 16 M chars of 'ﬃ' (folds to 'ffi') with one emoji peaked at 673 MB."""
    import tracemalloc
    from types import SimpleNamespace

    from beam_agents._protos import TraceEvent

    budget = 1 << 20
    monkeypatch.setattr(SearchIndex, "BUDGET", budget)
    text = "\ufb03" * 1364 + "\U0001f600"  # 4094 chars folded: within LONG_TEXT
    rows = 2 * budget // len(text)  # twice the budget's worth, unfolded
    event = TraceEvent(kind=TraceEvent.TOOL_CALL, name="t", index=0)
    result = SimpleNamespace(
        events=[SimpleNamespace(replayed=event, traced=None, index=i) for i in range(rows)]
    )
    value = SimpleNamespace(path="", text=text)
    values = SimpleNamespace(
        search_texts=lambda i: [text], search_rows=lambda: None, get=lambda i, d=(): [value]
    )
    index = SearchIndex(result, values)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        index.build()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    names = rows * len("\0".join(("tool_call", "t", "")))
    assert len(index._corpus) <= budget + rows + names  # folded chars, separators, names
    assert peak < 3 * 4 * (budget + names), peak  # UCS-4: the corpus and one copy, not 3x
    assert index.find("FFI\U0001f600", -1) == 0
    assert index._reread and index.find("FFI\U0001f600", rows - 2) == rows - 1


def test_search_texts_are_the_paths_and_texts_of_the_derived_values(real) -> None:
    for name in ("reproduced", "diverged", "cache-miss", "what-if"):
        result = with_hostile_values(real(name))
        values = result.values
        assert isinstance(values, ReplayValues)
        rows = list(values.search_rows())
        assert len(rows) == len(values._replayed)
        for position, (event, texts) in enumerate(rows):
            expected = [t for v in values.for_event(event.index) for t in (v.path, v.text)]
            assert texts == expected == values.search_texts(event.index), (name, position)
        assert values.search_texts(len(rows) + 5) == []


def test_a_stopped_build_leaves_no_index_and_the_next_search_builds_it(real) -> None:
    result = with_hostile_values(real("diverged"))
    values = values_by_event(result)
    index = SearchIndex(result, values)
    index.build(stop=lambda: True)
    assert not index._built and index._reread == [] and index._corpus == ""
    assert index.find("straße", -1) == reference(result, values, "STRASSE", -1) is not None
    assert index._built


async def test_slash_builds_the_index_while_the_query_is_typed(real) -> None:
    from replay_tui.app import ReplayApp

    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("slash")
        await app.workers.wait_for_complete()
        index = app.screen._search_index  # type: ignore[attr-defined]
        assert index is not None and index._built  # before enter
        await pilot.press(*"lost in transit", "enter")
        await app.workers.wait_for_complete()
        assert app.screen._search_index is index  # type: ignore[attr-defined]
