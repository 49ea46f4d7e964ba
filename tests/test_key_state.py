"""Cells, state, snapshots: one conversion for the DoFn and replay; export copies, load migrates."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents import canonical_json
from beam_agents._protos import (
    Continuation,
    LlmRequest,
    LlmResponse,
    ResumeRecord,
    StateSnapshot,
    ToolIntent,
    VersionedBlob,
)
from beam_agents.blobs import LARGE_CELL_BYTES, dump_continuation, encode_blob
from beam_agents.cache_key import cache_key_and_fingerprint
from beam_agents.context import digest_value
from beam_agents.errors import BlobTooNewError, CorruptBlobError, MigrationGapError, StateError
from beam_agents.key_state import (
    KeyState,
    StateCells,
    dump_key_state,
    load_key_state,
    load_snapshot,
    load_snapshot_for_replay,
    make_snapshot,
)
from beam_agents.llm_cache import CachePolicy, LookupStatus, ReplayCache
from beam_agents.migrations import CURRENT_VERSIONS, STATE_SCHEMA_VERSION
from beam_agents.tool_cache import ToolCache, ToolCachePolicy, arg_digests, encode_result

GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "blobs"
T0 = 1_734_000_000_000
KEY = b"customer-42"


def golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.bin").read_bytes()


def intent(seq: int, ordinal: int) -> ToolIntent:
    return ToolIntent(
        intent_id=f"intent-{seq}-{ordinal}",
        entity_key=KEY,
        seq=seq,
        tool="issue_refund",
        args=canonical_json.dumps({"order_id": "A1"}),
        created_ms=T0,
        expires_at_ms=T0 + 86_400_000,
        requires_approval=True,
        approval_channel="refunds",
    )


def continuation(seq: int) -> Continuation:
    return Continuation(
        suspended_seq=seq,
        step_index=2,
        adapter_snapshot=canonical_json.dumps({"step": "await", "note": "für Zoë"}),
        awaiting_intent_ids=[f"intent-{seq}-0"],
        deadline_ms=T0 + 3_600_000,
        schema_version=1,
    )


def suspended_state() -> KeyState:
    cache = ReplayCache.empty()
    for n in range(3):
        request = LlmRequest(model="gpt-test-1")
        request.messages.add(role="user", content=f"question {n}")
        key, fingerprint = cache_key_and_fingerprint(request, provider="scripted")
        cache.insert(
            key,
            fingerprint,
            LlmResponse(text=f"answer {n}"),
            model="gpt-test-1",
            provider="scripted",
            now_ms=T0 + n,
            seq=n + 1,
            policy=CachePolicy(),
        )
    tools = ToolCache()
    for n in range(2):
        args = {"order_id": f"A{n}"}
        data, is_bytes = encode_result("read_order", {"status": f"s{n}"}, ToolCachePolicy())
        tools.record(
            tool="read_order",
            args_sha256=digest_value(args, "args"),
            digests=arg_digests(args),
            result=data,
            result_is_bytes=is_bytes,
            now_ms=T0 + n,
            seq=n + 1,
            policy=ToolCachePolicy(),
        )
    return KeyState(
        tool_cache=tools,
        memory={"customer": {"name": "Zoë", "orders": ["A1", "A2"]}, "attempts": 2},
        cache=cache,
        continuation=continuation(5),
        pending=[intent(5, 0), intent(5, 1)],
        resume_history=[ResumeRecord(seq=3, continuation=continuation(2), pending=[intent(2, 0)])],
    )


def assert_same_state(left: KeyState, right: KeyState) -> None:
    assert left.memory == right.memory
    assert left.cache.to_body().SerializeToString(
        deterministic=True
    ) == right.cache.to_body().SerializeToString(deterministic=True)
    assert left.continuation == right.continuation
    assert left.pending == right.pending
    assert left.resume_history == right.resume_history
    assert left.tool_cache.body_bytes() == right.tool_cache.body_bytes()
    assert left.migrations_applied == right.migrations_applied


def snapshot_of(cells: StateCells, seq: int = 6) -> StateSnapshot:
    return make_snapshot(
        cells, entity_key=KEY, seq=seq, snapshot_at_ms=T0 + 99, request_id="incident-1734"
    )


# --- cells <-> state --------------------------------------------------------------------


def test_state_round_trips_through_cells_byte_for_byte() -> None:
    cells = dump_key_state(suspended_state())

    reloaded = load_key_state(cells)

    assert_same_state(reloaded, suspended_state())
    assert dump_key_state(reloaded) == cells


def test_an_empty_key_loads_as_empty_state() -> None:
    state = load_key_state(StateCells())

    assert state.memory == {} and len(state.cache) == 0
    assert state.continuation is None and state.pending == [] and state.resume_history == []
    assert state.migrations_applied == []


def test_old_cells_are_migrated_on_load_and_written_current_on_dump() -> None:
    cells = StateCells(memory=golden("memory-v1"), llm_cache=golden("llm_cache-v1"))

    state = load_key_state(cells)
    dumped = dump_key_state(state)

    assert state.migrations_applied == ["memory v1→v2", "memory v2→v3", "llm_cache v1→v2"]
    assert VersionedBlob.FromString(dumped.memory).schema_version == CURRENT_VERSIONS["memory"]
    assert VersionedBlob.FromString(dumped.llm_cache).schema_version == 2
    assert load_key_state(dumped).migrations_applied == []


def test_loading_does_not_change_the_cells() -> None:
    cells = StateCells(memory=golden("memory-v1"), llm_cache=golden("llm_cache-v1"))
    before = (cells.memory, cells.llm_cache)

    load_key_state(cells)

    assert (
        (cells.memory, cells.llm_cache) == before == (golden("memory-v1"), golden("llm_cache-v1"))
    )


# --- snapshots --------------------------------------------------------------------------


def test_a_snapshot_carries_the_seed_fields_and_the_cells_exactly() -> None:
    cells = dump_key_state(suspended_state())

    snapshot = snapshot_of(cells)

    assert snapshot.state_schema_version == STATE_SCHEMA_VERSION == 2
    assert (snapshot.entity_key, snapshot.seq) == (KEY, 6)
    assert snapshot.snapshot_at_ms == T0 + 99
    assert snapshot.request_id == "incident-1734"
    assert snapshot.memory == cells.memory and snapshot.llm_cache == cells.llm_cache
    assert snapshot.HasField("continuation") and snapshot.continuation == continuation(5)
    assert list(snapshot.pending) == [intent(5, 0), intent(5, 1)]
    assert snapshot.pending_schema_version == 1
    assert [record.seq for record in snapshot.resumed_from] == [3]
    assert snapshot.tool_cache == cells.tool_cache != b""


def test_cells_to_snapshot_to_state_is_the_state_of_the_cells() -> None:
    cells = dump_key_state(suspended_state())
    data = snapshot_of(cells).SerializeToString(deterministic=True)

    parsed, state = load_snapshot(data)

    assert parsed == StateSnapshot.FromString(data)
    assert_same_state(state, load_key_state(cells))
    assert dump_key_state(state) == cells


def test_snapshot_bytes_are_deterministic() -> None:
    cells = dump_key_state(suspended_state())

    assert snapshot_of(cells).SerializeToString(deterministic=True) == snapshot_of(
        dump_key_state(suspended_state())
    ).SerializeToString(deterministic=True)


def test_an_empty_key_snapshot() -> None:
    snapshot = snapshot_of(StateCells(), seq=0)

    assert not snapshot.HasField("continuation")
    assert snapshot.memory == b"" and snapshot.llm_cache == b"" and snapshot.tool_cache == b""
    assert list(snapshot.pending) == [] and list(snapshot.resumed_from) == []
    _, state = load_snapshot(snapshot.SerializeToString(deterministic=True))
    assert_same_state(state, KeyState())


def test_a_snapshot_of_a_key_not_suspended_has_no_continuation() -> None:
    state = suspended_state()
    state.continuation = None

    snapshot = snapshot_of(dump_key_state(state))

    assert not snapshot.HasField("continuation")
    assert load_snapshot(snapshot.SerializeToString())[1].continuation is None


def test_old_version_cells_are_exported_unchanged_and_migrated_on_load() -> None:
    cells = StateCells(
        memory=golden("memory-v1"),
        llm_cache=golden("llm_cache-v1"),
        continuation=golden("continuation-v1"),
        pending=golden("pending-v1"),
        resume_history=golden("resume_history-v1"),
    )

    snapshot = snapshot_of(cells)
    _, state = load_snapshot(snapshot.SerializeToString(deterministic=True))

    assert snapshot.memory == golden("memory-v1")
    assert snapshot.llm_cache == golden("llm_cache-v1")
    assert state.migrations_applied == ["memory v1→v2", "memory v2→v3", "llm_cache v1→v2"]
    assert state.memory["customer"]["name"] == "Zoë Ångström"
    assert len(state.cache) == 3 and all(e.ttl_ms > 0 for e in state.cache.to_body().entries)
    assert state.continuation is not None and state.continuation.suspended_seq == 7
    assert [i.tool for i in state.pending] == ["issue_refund", "send_email"]
    assert [r.seq for r in state.resume_history] == [4, 6]
    assert_same_state(state, load_key_state(cells))


def test_a_replayed_cache_from_a_snapshot_serves_its_entries() -> None:
    data = snapshot_of(dump_key_state(suspended_state())).SerializeToString()
    _, state = load_snapshot(data)
    request = LlmRequest(model="gpt-test-1")
    request.messages.add(role="user", content="question 1")
    key, _ = cache_key_and_fingerprint(request, provider="scripted")

    found = state.cache.lookup(key, now_ms=T0 + 10, visible_through_seq=2)

    assert found.status is LookupStatus.HIT
    assert found.response is not None and found.response.text == "answer 1"


def test_a_snapshot_newer_than_the_package_is_refused_naming_both_versions() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.state_schema_version = 3

    with pytest.raises(BlobTooNewError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert (raised.value.kind, raised.value.found, raised.value.supported) == ("snapshot", 3, 2)
    assert "version 3" in str(raised.value) and "version 2" in str(raised.value)


def test_an_older_snapshot_schema_still_loads() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.state_schema_version = 1

    _, state = load_snapshot(snapshot.SerializeToString())

    assert state.memory == suspended_state().memory


def test_an_embedded_llm_cache_newer_than_the_package_is_refused_naming_it() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.llm_cache = VersionedBlob(kind="llm_cache", schema_version=3).SerializeToString()

    with pytest.raises(BlobTooNewError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert (raised.value.kind, raised.value.found, raised.value.supported) == ("llm_cache", 3, 2)
    assert "llm_cache" in str(raised.value)


def test_an_embedded_continuation_newer_than_the_package_is_refused() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.continuation.schema_version = 2

    with pytest.raises(BlobTooNewError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert (raised.value.kind, raised.value.found) == ("continuation", 2)


def test_embedded_pending_newer_than_the_package_is_refused_even_when_empty() -> None:
    state = suspended_state()
    state.pending = []
    snapshot = snapshot_of(dump_key_state(state))
    snapshot.pending_schema_version = 2

    with pytest.raises(BlobTooNewError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert (raised.value.kind, raised.value.found) == ("pending", 2)


def test_unstamped_pending_intents_are_a_gap() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.pending_schema_version = 0

    with pytest.raises(MigrationGapError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert raised.value.kind == "pending"


def test_an_embedded_continuation_without_a_version_is_a_gap() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.continuation.schema_version = 0

    with pytest.raises(MigrationGapError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert raised.value.kind == "continuation"


@pytest.mark.parametrize("data", [b"", b"\xff\xff\xff", b"\x0a\x05abc"])
def test_bytes_that_are_not_a_snapshot_are_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptBlobError) as raised:
        load_snapshot(data)

    assert raised.value.kind == "snapshot"


def test_a_corrupt_embedded_memory_blob_is_named() -> None:
    snapshot = snapshot_of(dump_key_state(suspended_state()))
    snapshot.memory = encode_blob("memory", b"[not an object]")

    with pytest.raises(CorruptBlobError) as raised:
        load_snapshot(snapshot.SerializeToString())

    assert raised.value.kind == "memory"


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_never_escape_as_another_error(data: bytes) -> None:
    # Random bytes may happen to be a valid snapshot (b"\x08\x01" is an empty one) or
    # one with odd versions (then a version error is right); anything else is a bug.
    try:
        snapshot, _ = load_snapshot(data)
    except StateError:
        return
    assert 1 <= snapshot.state_schema_version <= STATE_SCHEMA_VERSION


def test_export_refuses_a_continuation_that_disagrees_with_its_stamp() -> None:
    body = Continuation(suspended_seq=1, schema_version=7).SerializeToString()
    cells = StateCells(
        continuation=VersionedBlob(
            kind="continuation", schema_version=1, body=body
        ).SerializeToString()
    )

    with pytest.raises(CorruptBlobError, match="stamped version 1"):
        snapshot_of(cells)


def test_export_refuses_a_resume_history_newer_than_the_package() -> None:
    cells = StateCells(
        resume_history=VersionedBlob(kind="resume_history", schema_version=2).SerializeToString()
    )

    with pytest.raises(BlobTooNewError) as raised:
        snapshot_of(cells)

    assert (raised.value.kind, raised.value.found) == ("resume_history", 2)


def test_a_continuation_cell_is_exported_with_its_stamped_version() -> None:
    cells = StateCells(continuation=dump_continuation(continuation(5)))

    snapshot = snapshot_of(cells)

    assert snapshot.continuation.schema_version == 1
    assert snapshot.continuation.suspended_seq == 5


def test_an_embedded_tool_cache_newer_than_the_package_is_refused_naming_it() -> None:
    cells = dump_key_state(suspended_state())
    snapshot = snapshot_of(cells)
    snapshot.tool_cache = VersionedBlob(
        kind="tool_cache", schema_version=9, body=b""
    ).SerializeToString()

    with pytest.raises(BlobTooNewError) as raised:
        load_snapshot(snapshot.SerializeToString(deterministic=True))

    assert (raised.value.kind, raised.value.found) == ("tool_cache", 9)


def test_a_key_without_recorded_tools_keeps_an_empty_tool_cache_cell() -> None:
    state = suspended_state()
    state.tool_cache = ToolCache()
    cells = dump_key_state(state)
    assert cells.tool_cache == b""
    snapshot = snapshot_of(cells)
    assert "tool_cache" not in {field.name for field, _ in snapshot.ListFields()}
    _, loaded = load_snapshot(snapshot.SerializeToString(deterministic=True))
    assert len(loaded.tool_cache) == 0 and loaded.migrations_applied == []


# --- load_snapshot_for_replay: the cache blobs parsed in place, never copied out (issue 14) --


def large_state() -> KeyState:
    """``suspended_state`` with cache cells over ``LARGE_CELL_BYTES`` (the in-place path)."""
    state = suspended_state()
    request = LlmRequest(model="gpt-test-1")
    request.messages.add(role="user", content="a long answer")
    key, fingerprint = cache_key_and_fingerprint(request, provider="scripted")
    state.cache.insert(
        key,
        fingerprint,
        LlmResponse(text="long " * 40_000),
        model="gpt-test-1",
        provider="scripted",
        now_ms=T0 + 5,
        seq=5,
        policy=CachePolicy(max_payload_bytes=1 << 20),
    )
    for n in range(3):
        args = {"order_id": f"L{n}"}
        data, is_bytes = encode_result("read_order", {"note": "x" * 30_000}, ToolCachePolicy())
        state.tool_cache.record(
            tool="read_order",
            args_sha256=digest_value(args, "args"),
            digests=arg_digests(args),
            result=data,
            result_is_bytes=is_bytes,
            now_ms=T0 + n,
            seq=n + 1,
            policy=ToolCachePolicy(),
        )
    return state


# What replay did before the in-place load: the snapshot fuzz target's reference (one home).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
from targets import load_snapshot_whole as load_the_old_way  # noqa: E402


def outcome(load: Any, data: bytes) -> Any:
    try:
        snapshot, state, versions = load(data)
    except (StateError, CorruptBlobError) as exc:
        return type(exc).__name__, str(exc)
    return snapshot, dump_key_state(state), state.migrations_applied, versions


LARGE_CELLS = dump_key_state(large_state())


@pytest.mark.parametrize(
    "cells",
    [
        LARGE_CELLS,
        dump_key_state(suspended_state()),  # small: loaded whole
        StateCells(),
        replace(LARGE_CELLS, llm_cache=golden("llm_cache-v1")),  # migrated from a copy
        replace(LARGE_CELLS, tool_cache=b""),
    ],
    ids=["large", "small", "empty", "old-llm-cache", "no-tool-cache"],
)
def test_load_snapshot_for_replay_gives_what_load_snapshot_gives(cells: StateCells) -> None:
    data = snapshot_of(cells).SerializeToString(deterministic=True)

    snapshot, state, _ = load_snapshot_for_replay(data)

    assert outcome(load_snapshot_for_replay, data) == outcome(load_the_old_way, data)
    assert snapshot.llm_cache == snapshot.tool_cache == b""
    assert_same_state(state, load_snapshot(data)[1])
    if cells is LARGE_CELLS:
        assert (
            len(cells.llm_cache) >= LARGE_CELL_BYTES and len(cells.tool_cache) >= LARGE_CELL_BYTES
        )


def _field(number: int, value: bytes) -> bytes:
    """One length-delimited field, as the wire format writes it."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


LARGE_SNAPSHOT = snapshot_of(LARGE_CELLS).SerializeToString(deterministic=True)
LLM_CACHE_FIELD = StateSnapshot.DESCRIPTOR.fields_by_name["llm_cache"].number


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.tuples(st.just("cut"), st.integers(0, len(LARGE_SNAPSHOT) - 1)),
        st.tuples(st.just("flip"), st.integers(0, len(LARGE_SNAPSHOT) - 1), st.integers(1, 255)),
        st.tuples(st.just("head-flip"), st.integers(0, 200), st.integers(1, 255)),
        st.tuples(st.just("again"), st.binary(max_size=40)),
    )
)
def test_load_snapshot_for_replay_fails_or_succeeds_exactly_like_load_snapshot(
    mutation: tuple[Any, ...],
) -> None:
    data = bytearray(LARGE_SNAPSHOT)
    if mutation[0] == "cut":
        del data[mutation[1] :]
    elif mutation[0] in ("flip", "head-flip"):
        data[mutation[1]] ^= mutation[2]
    else:
        # A second llm_cache field after the first: the last occurrence is the value.
        data += _field(LLM_CACHE_FIELD, mutation[1])
    mutated = bytes(data)

    expected = outcome(load_the_old_way, mutated)
    assert outcome(load_snapshot_for_replay, mutated) == expected
    assert outcome(load_snapshot_for_replay, bytearray(mutated)) == expected


def test_a_large_snapshot_loads_its_caches_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    import beam_agents.blobs
    import beam_agents.key_state

    def whole(*args: Any) -> Any:
        raise AssertionError("a well-formed large snapshot was parsed whole")

    plain_unwrap = beam_agents.blobs.unwrap_blob

    def unwrap(kind: str, raw: bytes) -> Any:
        if kind in ("llm_cache", "tool_cache"):
            raise AssertionError(f"the {kind} blob was copied into a parsed VersionedBlob")
        return plain_unwrap(kind, raw)

    expected = load_the_old_way(LARGE_SNAPSHOT)
    monkeypatch.setattr(beam_agents.key_state, "load_snapshot", whole)
    monkeypatch.setattr(beam_agents.blobs, "unwrap_blob", unwrap)

    assert outcome(load_snapshot_for_replay, LARGE_SNAPSHOT) == outcome(
        lambda data: expected, LARGE_SNAPSHOT
    )


def test_a_large_bytearray_is_emptied_once_its_cache_bodies_are_copied_out() -> None:
    data = bytearray(LARGE_SNAPSHOT)

    loaded = outcome(load_snapshot_for_replay, data)

    assert data == bytearray()
    assert loaded == outcome(load_the_old_way, LARGE_SNAPSHOT)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 4096),
    st.one_of(
        st.tuples(st.just("none"), st.just(0)),
        st.tuples(st.just("cut"), st.integers(0, len(LARGE_SNAPSHOT) - 1)),
        st.tuples(st.just("flip"), st.integers(0, len(LARGE_SNAPSHOT) - 1), st.integers(1, 255)),
    ),
)
def test_cache_bodies_parsed_in_pieces_of_any_size_load_what_a_whole_parse_loads(
    piece: int, mutation: tuple[Any, ...]
) -> None:
    # Merging the pieces is the whole parse: the same caches, the same errors word for word.
    import beam_agents.blobs

    data = bytearray(LARGE_SNAPSHOT)
    if mutation[0] == "cut":
        del data[mutation[1] :]
    elif mutation[0] == "flip":
        data[mutation[1]] ^= mutation[2]
    mutated = bytes(data)
    expected = outcome(load_the_old_way, mutated)
    with patch.object(beam_agents.blobs, "PIECE_BYTES", piece):
        assert outcome(load_snapshot_for_replay, mutated) == expected
        assert outcome(load_snapshot_for_replay, bytearray(mutated)) == expected


def test_a_cache_body_given_as_a_view_is_never_copied_whole() -> None:
    # upb copies any buffer but bytes before parsing it: a view of a 64 MB body would be
    # 64 MB more while it loads. The pieces are about PIECE_BYTES each.
    import tracemalloc

    from beam_agents._protos import LlmCacheBody
    from beam_agents.blobs import PIECE_BYTES, parse_in_pieces
    from beam_agents.migrations import parse_proto

    body = LlmCacheBody()
    for n in range(16):
        body.entries.add(cache_key=f"{n:064x}", response=LlmResponse(text=f"{n} " * 200_000))
    data = bytearray(body.SerializeToString(deterministic=True))
    assert len(data) > 6 * PIECE_BYTES

    def peak(parse: Any) -> tuple[int, Any]:
        tracemalloc.start()
        try:
            parsed = parse(LlmCacheBody, "llm_cache", memoryview(data))
            return tracemalloc.get_traced_memory()[1], parsed
        finally:
            tracemalloc.stop()

    whole_peak, whole = peak(parse_proto)
    pieces_peak, pieces = peak(parse_in_pieces)
    assert whole_peak >= len(data)  # the copy this avoids, seen by tracemalloc
    assert pieces_peak < 2 * PIECE_BYTES
    assert pieces == whole == LlmCacheBody.FromString(bytes(data))
