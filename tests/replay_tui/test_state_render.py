"""State, intents and outputs as rows: what the tables and the memory tree show."""

from __future__ import annotations

import re
from collections.abc import Callable

import tui_results

from beam_agents.replay.result import ReplayResult
from replay_tui.render.state import (
    CACHE_COLUMNS,
    INTENT_COLUMNS,
    JsonNode,
    cache_rows,
    continuation_text,
    hexdump_lines,
    intent_rows,
    json_tree,
    output_rows,
    payload_as_hex,
    payload_as_text,
    versions_text,
)

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e]")


def plains(row: tuple[object, ...]) -> list[str]:
    return [getattr(cell, "plain", str(cell)) for cell in row]


def test_cache_rows_in_lru_order_with_age_ttl_digest_only_and_hit() -> None:
    state = tui_results.state_view()
    rows = [plains(row) for row in cache_rows(state.cache_entries)]
    assert len(rows[0]) == len(CACHE_COLUMNS)
    assert [row[0] for row in rows] == ["1", "2", "3"]
    first, _, expired = rows
    assert first[2] == tui_results.cache_key("plan")[:16] + "…"  # whole in the entry's pane
    assert (first[4], first[5], first[1]) == ("1h 35m", "4h 25m", "hit")
    assert expired[5] == "expired 1h 00m ago" and expired[6] == "digest-only" and expired[1] == "no"


def test_real_cache_view_marks_the_entries_the_rerun_was_served(real: Callable[[str], ReplayResult]) -> None:
    result = real("reproduced")
    assert result.state is not None
    rows = [plains(row) for row in cache_rows(result.state.cache_entries)]
    hits = {row[2] for row in rows if row[1] == "hit"}
    served = {e.cache_key[:16] + "…" for e in result.state.cache_entries if e.hit_in_activation}
    assert hits == served and served


def leaves(node: JsonNode) -> list[str]:
    if node.children is None:
        return [node.label.plain]
    return [leaf for child in node.children for leaf in leaves(child)]


def test_memory_tree_has_a_node_per_key_and_literal_labels(injection: ReplayResult) -> None:
    assert injection.state is not None
    tree = json_tree(injection.state.memory)
    assert tree.children is not None and len(tree.children) == 2
    for label in leaves(tree):
        assert not UNSAFE.search(label)
    assert any(label.startswith("[bold red]x[/] \\x1b[2J") for label in leaves(tree))
    nested = next(c for c in tree.children if c.label.plain.startswith("nested"))
    assert nested.children is not None
    assert nested.children[0].label.plain.startswith("[link=http://evil]y[/link]")


def test_json_tree_summarizes_containers() -> None:
    tree = json_tree({"a": [1, 2], "b": {"c": None}})
    assert tree.label.plain == "memory  {} 2 keys"
    assert tree.children is not None
    assert tree.children[0].label.plain == "a  [] 2 items"
    assert tree.children[1].label.plain == "b  {} 1 key"
    assert tree.children[1].children is not None
    assert tree.children[1].children[0].label.plain == "c = null"


def test_continuation_and_versions_text() -> None:
    result = tui_results.reproduced_result()
    assert result.state is not None
    text = continuation_text(result.state.continuation, result.header.now_ms).plain
    assert tui_results.REFUND_INTENT in text and "step index       0" in text
    assert "1h 00m after now_ms" in text and '"asked_at"' in text
    assert "not suspended" in continuation_text(None, None).plain
    versions = versions_text(result, result.state).plain
    assert "snapshot schema  v2" in versions and "llm_cache v1→v2" in versions


def test_intent_rows_mark_disagreements() -> None:
    agree = [plains(row) for row in intent_rows(tui_results.intents_ledger())]
    assert len(agree[0]) == len(INTENT_COLUMNS)
    assert all(row[0] == "" for row in agree)
    disagree = [plains(row) for row in intent_rows(tui_results.intents_ledger(replayed_staged=False))]
    assert all(row[0] == "≠" for row in disagree)
    assert disagree[1][5:7] == ["yes", "no"]


def test_outputs_list_digests_and_the_memory_blob(real: Callable[[str], ReplayResult]) -> None:
    result = tui_results.what_if_result()
    rows = [plains(row) for row in output_rows(result)]
    assert rows[0][:3] == ["outputs[0]", f"{result.outputs[0].size} bytes", result.outputs[0].sha256]
    assert rows[-1][0] == "memory blob" and "reported, not diffed" in rows[-1][3]


def test_payload_as_text_escapes_controls_and_as_hex_is_a_dump() -> None:
    blob = tui_results.blob(b"hello\n\x1b[2Jworld\xff")
    text = payload_as_text(blob).plain
    assert text == "hello\n\\x1b[2Jworld\\xff"
    dump = payload_as_hex(blob).plain
    assert dump.startswith("00000000  68 65 6c 6c 6f 0a 1b 5b")
    assert dump.endswith("hello..[2Jworld.")


def test_payload_views_cap_what_they_show() -> None:
    blob = tui_results.blob(b"x" * 100)
    assert payload_as_text(blob, limit=10).plain.endswith("… 90 more bytes not shown")
    assert len(list(hexdump_lines(blob.payload, limit=32))) == 2


def test_minted_later_is_the_engines_status_not_the_clock() -> None:
    import dataclasses

    from beam_agents.replay.result import EntryStatus

    first = tui_results.state_view().cache_entries[0]
    later = dataclasses.replace(first, status=EntryStatus.MINTED_LATER, inserted_seq=9)
    assert plains(cache_rows((later,))[0])[4] == "minted later (seq 9)"
    # A clock ahead of now_ms alone proves nothing about which activation minted it.
    ahead = dataclasses.replace(first, age_ms=-21 * 60_000)
    assert plains(cache_rows((ahead,))[0])[4] == "21m 00s after the clock"


def test_the_memory_tab_names_its_image_and_the_replayed_delta(
    real: Callable[[str], ReplayResult],
) -> None:
    from replay_tui.render.state import memory_delta_text, memory_image_text

    result = real("reproduced")  # seq 2 from its own snapshot: blind writes, a key per seq
    image = memory_image_text(result).plain
    assert f"snapshot post-image at seq {result.header.snapshot_seq}" in image
    assert f"the re-run of seq {result.header.seq} started from it" in image
    delta = memory_delta_text(result).plain
    # What is judged is what the re-run wrote, named key by key, against the traced digest.
    assert "memory writes: 2 key(s) set, 0 deleted (matches the traced digest)" in delta
    assert "set 'asked.0002', set 'last'" in delta
    assert "no change: the re-run wrote back what the snapshot holds" in delta
    assert "not judged" not in delta


def test_the_memory_tab_names_a_read_it_could_not_judge(
    real: Callable[[str], ReplayResult],
) -> None:
    from replay_tui.render.state import memory_delta_text

    result = real("memory-unseen")  # turns += 1 read from the post-image: its own write
    assert result.verdict.value == "irreproducible" and result.unseen_reads
    delta = memory_delta_text(result).plain
    assert f"not judged: {result.unseen_reads[0].text}" in delta
    assert "'turns'" in result.unseen_reads[0].text
    # The post-image already held seq 2's count; the re-run counted once more on top.
    assert result.state is not None and result.replayed_memory is not None
    before, after = result.state.memory["turns"], result.replayed_memory["turns"]
    assert (before, after) == (2, 3)
    assert f'["turns"]: {before} → {after}' in delta
