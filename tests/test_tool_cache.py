"""The tool cache: which recorded result is the truth for which activation, and its bounds."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from beam_agents import ToolRegistry, tool
from beam_agents.context import digest_value
from beam_agents.entry_cache import LookupStatus
from beam_agents.errors import AgentDefinitionError, ConfigError, RecordedResultError
from beam_agents.tool_cache import (
    ToolCache,
    ToolCachePolicy,
    arg_digests,
    decode_result,
    encode_result,
    tool_cache_key,
)

T0 = 1_734_000_000_000
POLICY = ToolCachePolicy()


def record(
    cache: ToolCache,
    result: Any,
    *,
    seq: int,
    tool_name: str = "read_order",
    policy: ToolCachePolicy = POLICY,
    now_ms: int | None = None,
    **args: Any,
) -> str:
    args = args or {"order_id": "A1"}
    data, is_bytes = encode_result(tool_name, result, policy)
    args_sha = digest_value(args, "args")
    cache.record(
        tool=tool_name,
        args_sha256=args_sha,
        digests=arg_digests(args),
        result=data,
        result_is_bytes=is_bytes,
        now_ms=T0 + seq * 1_000 if now_ms is None else now_ms,
        seq=seq,
        policy=policy,
    )
    return tool_cache_key(tool_name, args_sha)


def status_at(cache: ToolCache, key: str, seq: int) -> LookupStatus:
    return cache.lookup(key, now_ms=T0 + seq * 1_000, visible_through_seq=seq).status


def test_a_recorded_result_is_served_as_the_same_json_value() -> None:
    cache = ToolCache()
    key = record(cache, {"b": [1, 2.5, "zoë"], "a": None}, seq=3)
    found = cache.lookup(key, now_ms=T0 + 3_000, visible_through_seq=3)
    assert found.status is LookupStatus.HIT and found.entry is not None
    assert decode_result(found.entry) == {"a": None, "b": [1, 2.5, "zoë"]}


def test_bytes_results_are_served_as_bytes() -> None:
    cache = ToolCache()
    key = record(cache, b"\x00\xffpdf", seq=1)
    entry = cache.get(key)
    assert entry is not None and entry.result_is_bytes
    assert decode_result(entry) == b"\x00\xffpdf"


def test_the_same_answer_later_keeps_the_first_seq_a_new_answer_restarts_it() -> None:
    cache = ToolCache()
    key = record(cache, {"status": "shipped"}, seq=2)
    record(cache, {"status": "shipped"}, seq=5)
    entry = cache.get(key)
    assert entry is not None and (entry.inserted_seq, entry.recorded_seq) == (2, 5)
    assert status_at(cache, key, 2) is LookupStatus.HIT
    record(cache, {"status": "delivered"}, seq=7)
    assert status_at(cache, key, 5) is LookupStatus.MINTED_LATER
    assert status_at(cache, key, 7) is LookupStatus.HIT


def test_two_answers_in_one_activation_are_ambiguous_until_a_later_recording() -> None:
    cache = ToolCache()
    key = record(cache, {"status": "a"}, seq=4)
    record(cache, {"status": "b"}, seq=4)
    assert status_at(cache, key, 4) is LookupStatus.AMBIGUOUS
    record(cache, {"status": "b"}, seq=6)
    assert status_at(cache, key, 4) is LookupStatus.MINTED_LATER
    assert status_at(cache, key, 6) is LookupStatus.HIT


def test_entries_are_bounded_by_count_bytes_and_ttl() -> None:
    small = ToolCachePolicy(max_entries=2, max_result_bytes=100, max_total_bytes=150)
    cache = ToolCache()
    first = record(cache, "x" * 60, seq=1, policy=small, order_id="1")
    second = record(cache, "y" * 60, seq=2, policy=small, order_id="2")
    assert len(cache) == 2
    third = record(cache, "z" * 60, seq=3, policy=small, order_id="3")
    assert first not in cache and {second, third} <= {
        e.cache_key for e in cache.entries_by_recency()
    }
    assert cache.stored_bytes() <= 150
    # Bytes: a 95-byte result pushes out the least recently used to stay within 150.
    record(cache, "w" * 93, seq=4, policy=small, order_id="4")
    assert second not in cache and cache.stored_bytes() <= 150
    short = ToolCachePolicy(ttl_ms=1_000)
    expiring = ToolCache()
    old = record(expiring, "old", seq=1, policy=short, order_id="old")
    assert status_at(expiring, old, 1) is LookupStatus.HIT
    record(expiring, "new", seq=5, policy=short, order_id="new")
    assert old not in expiring, "expired entries are purged on the next recording"


def test_payload_retention_off_keeps_digests_only() -> None:
    policy = ToolCachePolicy(retain_payloads=False)
    cache = ToolCache()
    key = record(cache, {"status": "shipped"}, seq=1, policy=policy)
    entry = cache.get(key)
    assert entry is not None and entry.digest_only and entry.result == b""
    assert entry.result_size > 0 and len(entry.result_sha256) == 32
    assert status_at(cache, key, 1) is LookupStatus.DIGEST_ONLY


def test_nearest_names_the_differing_argument() -> None:
    cache = ToolCache()
    record(cache, {"s": 1}, seq=1, order_id="A1", region="eu")
    wanted = arg_digests({"order_id": "A2", "region": "eu"})
    nearest = cache.nearest("read_order", wanted)
    assert nearest is not None and nearest[1] == ["argument 'order_id' differs"]
    extra = cache.nearest("read_order", arg_digests({"order_id": "A1", "region": "eu", "v": 2}))
    assert extra is not None and extra[1] == ["argument 'v' not in the recorded call"]
    assert cache.nearest("other_tool", wanted) is None


def test_copies_are_independent_and_pickle_through_their_bytes() -> None:
    cache = ToolCache()
    key = record(cache, {"s": 1}, seq=1)
    twin = cache.copy()
    record(twin, {"s": 2}, seq=2, order_id="B")
    assert len(cache) == 1 and len(twin) == 2
    for clone in (pickle.loads(pickle.dumps(twin)), copy.deepcopy(twin)):
        assert clone.body_bytes() == twin.body_bytes()
    assert key in cache


def test_a_hit_on_a_copy_ranks_its_entry_first_and_leaves_the_original_as_it_was() -> None:
    cache = ToolCache()
    older = record(cache, {"s": 1}, seq=1, order_id="A1", region="eu")
    newer = record(cache, {"s": 2}, seq=2, order_id="A2", region="eu")
    before = cache.body_bytes()
    wanted = arg_digests({"order_id": "A3", "region": "eu"})  # one argument off from both
    twin = cache.copy()

    assert twin.lookup(older, now_ms=T0 + 5_000, visible_through_seq=None).status is (
        LookupStatus.HIT
    )

    # Ties go to the most recently used: the hit counts on the copy, not on the original.
    assert [e.cache_key for e in twin.entries_by_recency()] == [older, newer]
    assert twin.nearest("read_order", wanted)[0].cache_key == older  # type: ignore[index]
    assert cache.nearest("read_order", wanted)[0].cache_key == newer  # type: ignore[index]
    assert cache.body_bytes() == before != twin.body_bytes()
    used = {e.cache_key: e.last_used_ms for e in twin.to_body().entries}
    assert used[older] == T0 + 5_000


@pytest.mark.parametrize(
    ("result", "needle"),
    [({1, 2}, "set"), ({"n": float("nan")}, "not finite"), ("x" * 70_000, "max_result_bytes")],
)
def test_unrecordable_results_are_refused_with_a_clear_error(result: Any, needle: str) -> None:
    with pytest.raises(RecordedResultError) as raised:
        encode_result("read_order", result, POLICY)
    assert raised.value.tool == "read_order"
    assert needle in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_entries": 0},
        {"ttl_ms": -1},
        {"max_result_bytes": True},
        {"retain_payloads": "yes"},
        {"max_result_bytes": 10, "max_total_bytes": 5},
        {"max_entries": 10_001},
        {"max_total_bytes": (32 << 20) + 1},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ToolCachePolicy(**kwargs)


def test_recorded_is_a_read_only_declaration() -> None:
    @tool(recorded=True)
    def read_order(order_id: str) -> dict[str, str]:
        return {"order_id": order_id}

    assert read_order.recorded and not read_order.side_effect
    assert ToolRegistry([read_order]).get("read_order").recorded
    with pytest.raises(AgentDefinitionError, match="recorded=True is for read-only"):
        tool(recorded=True, side_effect=True)(lambda: None)
