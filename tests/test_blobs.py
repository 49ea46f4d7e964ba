"""State cell bytes <-> typed values: versioned, deterministic, corrupt input always named."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents import canonical_json
from beam_agents._protos import (
    Continuation,
    LlmRequest,
    LlmResponse,
    PendingIntents,
    ResumeHistory,
    ResumeRecord,
    ToolIntent,
    VersionedBlob,
)
from beam_agents.blobs import (
    MAX_RESUME_RECORDS,
    decode_blob,
    dump_continuation,
    dump_llm_cache,
    dump_memory,
    dump_pending,
    dump_resume_history,
    encode_blob,
    encode_memory,
    load_continuation,
    load_hold,
    load_llm_cache,
    load_memory,
    load_memory_cell,
    load_pending,
    load_resume_history,
    load_tool_cache,
    split_fields,
)
from beam_agents.cache_key import cache_key_and_fingerprint
from beam_agents.errors import (
    BlobTooNewError,
    CorruptBlobError,
    MemoryValueError,
    MigrationGapError,
    StateError,
)
from beam_agents.llm_cache import CachePolicy, LookupStatus, ReplayCache
from beam_agents.memory_writes import MemoryProvenance
from beam_agents.migrations import CURRENT_VERSIONS

GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "blobs"
T0 = 1_734_000_000_000

MEMORY: dict[str, Any] = {
    "customer": {"name": "Zoë", "city": "東京"},
    "orders": [{"id": "A1", "cents": 500, "paid": True}, {"id": "A2", "cents": 1250.5}],
    "note": None,
}


def wrap(kind: str, version: int, body: bytes) -> bytes:
    return VersionedBlob(kind=kind, schema_version=version, body=body).SerializeToString()


def continuation(seq: int = 3) -> Continuation:
    return Continuation(
        suspended_seq=seq,
        step_index=1,
        adapter_snapshot=canonical_json.dumps({"step": "await", "seq": seq}),
        awaiting_intent_ids=[f"intent-{seq}-0"],
        deadline_ms=T0 + 3_600_000,
    )


def intent(seq: int, ordinal: int) -> ToolIntent:
    return ToolIntent(
        intent_id=f"intent-{seq}-{ordinal}",
        entity_key=b"customer-42",
        seq=seq,
        tool="issue_refund",
        args=canonical_json.dumps({"order_id": "A1", "amount_cents": 500}),
        created_ms=T0,
        expires_at_ms=T0 + 86_400_000,
        requires_approval=ordinal == 0,
        approval_channel="refunds" if ordinal == 0 else "",
    )


# --- the envelope -----------------------------------------------------------------------


def test_encode_stamps_the_kind_and_its_current_version() -> None:
    for kind, version in CURRENT_VERSIONS.items():
        blob = VersionedBlob.FromString(encode_blob(kind, b"body"))

        assert (blob.kind, blob.schema_version, blob.body) == (kind, version, b"body")


def test_encode_is_deterministic_and_decode_inverts_it() -> None:
    raw = encode_blob("memory", b'{"a":1}')

    assert raw == encode_blob("memory", b'{"a":1}')
    assert decode_blob("memory", raw) == (b'{"a":1}', [])


@pytest.mark.parametrize(
    ("kind", "empty"),
    [
        ("memory", b'{"memory":{},"provenance":{"deleted":{},"since":0,"written":{}}}'),
        ("llm_cache", b""),
        ("continuation", b""),
        ("pending", b""),
        ("resume_history", b""),
    ],
)
def test_an_empty_cell_decodes_to_the_kinds_empty_body(kind: str, empty: bytes) -> None:
    assert decode_blob(kind, b"") == (empty, [])


def test_a_blob_of_another_kind_is_corrupt_naming_both() -> None:
    raw = encode_blob("pending", b"")

    with pytest.raises(CorruptBlobError, match="'pending'") as raised:
        decode_blob("memory", raw)

    assert raised.value.kind == "memory"


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(StateError, match="unknown blob kind"):
        encode_blob("inbox", b"")


def test_a_blob_newer_than_the_package_is_refused_by_the_loader() -> None:
    with pytest.raises(BlobTooNewError) as raised:
        load_llm_cache(wrap("llm_cache", 3, b""))

    assert (raised.value.kind, raised.value.found, raised.value.supported) == ("llm_cache", 3, 2)


def test_a_blob_without_a_version_is_a_gap() -> None:
    with pytest.raises(MigrationGapError):
        load_pending(wrap("pending", 0, b""))


# --- memory -----------------------------------------------------------------------------


def test_memory_round_trips_as_canonical_json() -> None:
    raw = dump_memory(MEMORY)

    assert VersionedBlob.FromString(raw).body == canonical_json.dumps(
        {"memory": MEMORY, "provenance": {"deleted": {}, "since": 0, "written": {}}}
    )
    assert load_memory(raw) == (MEMORY, [])
    assert encode_memory(MEMORY, MemoryProvenance()).memory_json == canonical_json.dumps(MEMORY)


def test_memory_provenance_round_trips_with_the_memory() -> None:
    provenance = MemoryProvenance(
        written={"note": 4, "orders": 2}, deleted={"draft": 3, "old": 1}, since=1
    )

    loaded = load_memory_cell(dump_memory(MEMORY, provenance))

    assert (loaded.memory, loaded.provenance, loaded.steps) == (MEMORY, provenance, [])


def test_memory_as_deep_as_the_writer_allows_loads_back_from_its_v3_cell() -> None:
    """The v3 body wraps the memory in one more object; that level is not the memory's."""
    deepest: Any = 0
    for _ in range(canonical_json.MAX_JSON_DEPTH - 1):
        deepest = [deepest]
    memory = {"deep": deepest}

    assert load_memory(dump_memory(memory, MemoryProvenance(written={"deep": 3}, since=1))) == (
        memory,
        [],
    )
    with pytest.raises(CorruptBlobError, match="'deep' is nested deeper than"):
        too_deep = {"memory": {"deep": [deepest]}, "provenance": {"deleted": {}, "since": 0, "written": {}}}
        load_memory(wrap("memory", 3, canonical_json.dumps(too_deep)))


def test_memory_provenance_round_trips_when_the_writer_passes_mappings_of_its_own() -> None:
    provenance = MemoryProvenance(written=MappingProxyType({"note": 4}), since=1)

    assert load_memory_cell(dump_memory(MEMORY, provenance)).provenance == MemoryProvenance(
        written={"note": 4}, since=1
    )


def test_memory_provenance_is_kept_to_what_it_can_say_of_the_memory() -> None:
    """A writer of a key the memory no longer holds, or a deletion of one it holds, is
    never written: the loader would refuse it as corrupt."""
    provenance = MemoryProvenance(written={"gone": 4, "note": 2}, deleted={"orders": 3})

    loaded = load_memory_cell(dump_memory(MEMORY, provenance))

    assert loaded.provenance == MemoryProvenance(written={"note": 2})


@pytest.mark.parametrize(
    ("provenance", "why"),
    [
        ({"deleted": {}, "since": 0}, "provenance is not an object"),
        ({"deleted": {}, "since": 0, "written": {"note": "4"}}, "'written' is not an object of seqs"),
        ({"deleted": {}, "since": 0, "written": {"note": True}}, "'written' is not an object of seqs"),
        ({"deleted": {"x": -1}, "since": 0, "written": {}}, "'deleted' is not an object of seqs"),
        ({"deleted": {}, "since": "0", "written": {}}, "'since' is '0'"),
        ({"deleted": {}, "since": 0, "written": {"nobody": 2}}, "key 'nobody', which it does not"),
        ({"deleted": {"note": 2}, "since": 0, "written": {}}, "key 'note' was deleted, but it"),
    ],
)
def test_a_memory_blob_whose_provenance_no_writer_wrote_is_corrupt(
    provenance: dict[str, Any], why: str
) -> None:
    body = canonical_json.dumps({"memory": MEMORY, "provenance": provenance})

    with pytest.raises(CorruptBlobError, match=why) as raised:
        load_memory_cell(encode_blob("memory", body))

    assert raised.value.kind == "memory"


def test_a_v3_memory_body_of_another_shape_is_corrupt() -> None:
    with pytest.raises(CorruptBlobError, match="not \\['memory', 'provenance'\\]"):
        load_memory_cell(encode_blob("memory", canonical_json.dumps(MEMORY)))


def test_memory_bytes_do_not_depend_on_insertion_order() -> None:
    reordered = {
        "note": None,
        "orders": MEMORY["orders"],
        "customer": {"city": "東京", "name": "Zoë"},
    }

    assert dump_memory(reordered) == dump_memory(MEMORY)


def test_an_empty_memory_cell_is_an_empty_object() -> None:
    assert load_memory(b"") == ({}, [])


def test_a_v1_memory_cell_is_migrated_on_load() -> None:
    memory, steps = load_memory((GOLDEN_DIR / "memory-v1.bin").read_bytes())

    assert steps == ["memory v1→v2", "memory v2→v3"]
    assert memory["customer"]["name"] == "Zoë Ångström"
    assert memory["last_order"]["items"][0]["price"] == 19.99


@pytest.mark.parametrize(
    ("memory", "path"),
    [
        ({"order": {"items": [1, 2, {3}]}}, "['order']['items'][2]"),
        ({"when": object()}, "['when']"),
        ({"score": math.nan}, "['score']"),
        ({"nested": {1: "int key"}}, "['nested']"),
        ({"raw": b"bytes"}, "['raw']"),
    ],
)
def test_a_non_json_memory_value_is_refused_naming_its_path(
    memory: dict[str, Any], path: str
) -> None:
    with pytest.raises(MemoryValueError) as raised:
        dump_memory(memory)

    assert raised.value.path == path
    assert f"ctx.memory{path}:" in str(raised.value)


def test_memory_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(MemoryValueError, match="list"):
        dump_memory([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("body", [b"[1]", b"null", b"{", b'{"a": NaN}', b"\xc3\x28"])
def test_a_current_memory_body_that_is_not_a_json_object_is_corrupt(body: bytes) -> None:
    with pytest.raises(CorruptBlobError) as raised:
        load_memory(wrap("memory", 2, body))

    assert raised.value.kind == "memory"


# --- llm_cache --------------------------------------------------------------------------


def _cache() -> ReplayCache:
    cache = ReplayCache.empty()
    for n in range(3):
        request = LlmRequest(model="m")
        request.messages.add(role="user", content=f"q{n}")
        key, fingerprint = cache_key_and_fingerprint(request, provider="p")
        cache.insert(
            key,
            fingerprint,
            LlmResponse(text=f"a{n}"),
            model="m",
            provider="p",
            now_ms=T0 + n,
            seq=n,
            policy=CachePolicy(retain_payloads=n != 2),
        )
    return cache


def test_llm_cache_round_trips_byte_for_byte() -> None:
    raw = dump_llm_cache(_cache())
    cache, steps = load_llm_cache(raw)

    assert steps == []
    assert dump_llm_cache(cache) == raw == dump_llm_cache(_cache())
    assert [e.cache_key for e in cache.entries_by_recency()] == [
        e.cache_key for e in _cache().entries_by_recency()
    ]


def test_an_empty_llm_cache_cell_is_an_empty_cache() -> None:
    cache, steps = load_llm_cache(b"")

    assert len(cache) == 0 and steps == []


def test_a_v1_llm_cache_cell_is_migrated_on_load() -> None:
    cache, steps = load_llm_cache((GOLDEN_DIR / "llm_cache-v1.bin").read_bytes())

    assert steps == ["llm_cache v1→v2"]
    assert len(cache) == 3
    statuses = sorted(
        cache.lookup(e.cache_key, now_ms=T0).status.value for e in cache.to_body().entries
    )
    assert statuses == sorted([LookupStatus.HIT.value] * 2 + [LookupStatus.DIGEST_ONLY.value])


# --- continuation -----------------------------------------------------------------------


def test_no_continuation_is_the_empty_cell() -> None:
    assert dump_continuation(None) == b""
    assert load_continuation(b"") == (None, [])


def test_continuation_round_trips_stamped_with_its_version() -> None:
    original = continuation()
    raw = dump_continuation(original)
    loaded, steps = load_continuation(raw)

    assert steps == []
    assert loaded is not None and loaded.schema_version == 1
    expected = Continuation()
    expected.CopyFrom(original)
    expected.schema_version = 1
    assert loaded == expected
    assert original.schema_version == 0, "dumping must not change the caller's message"


def test_a_continuation_whose_body_disagrees_with_its_stamp_is_corrupt() -> None:
    body = continuation().SerializeToString()  # schema_version 0 inside, stamped 1 outside

    with pytest.raises(CorruptBlobError, match="schema_version 0"):
        load_continuation(wrap("continuation", 1, body))


def test_the_continuation_golden_loads() -> None:
    loaded, steps = load_continuation((GOLDEN_DIR / "continuation-v1.bin").read_bytes())

    assert steps == [] and loaded is not None and loaded.suspended_seq == 7


# --- pending ----------------------------------------------------------------------------


def test_pending_round_trips_in_order() -> None:
    intents = [intent(5, 1), intent(5, 0), intent(4, 0)]

    loaded, steps = load_pending(dump_pending(intents))

    assert steps == [] and loaded == intents


def test_no_pending_intents() -> None:
    assert load_pending(b"") == ([], [])
    assert load_pending(dump_pending([])) == ([], [])


# --- resume_history ---------------------------------------------------------------------


def record(seq: int) -> ResumeRecord:
    return ResumeRecord(seq=seq, continuation=continuation(seq - 1), pending=[intent(seq - 1, 0)])


def test_resume_history_keeps_the_newest_eight_oldest_first() -> None:
    records = [record(seq) for seq in range(2, 14)]

    loaded, steps = load_resume_history(dump_resume_history(records))

    assert steps == []
    assert [r.seq for r in loaded] == list(range(14 - MAX_RESUME_RECORDS, 14))
    assert all(r.continuation.schema_version == 1 for r in loaded)
    assert loaded[-1].pending[0] == intent(12, 0)
    assert records[-1].continuation.schema_version == 0, "the caller's records are untouched"


def test_an_empty_resume_history() -> None:
    assert load_resume_history(b"") == ([], [])


def test_the_resume_history_golden_loads() -> None:
    loaded, steps = load_resume_history((GOLDEN_DIR / "resume_history-v1.bin").read_bytes())

    assert steps == [] and [r.seq for r in loaded] == [4, 6]


def test_a_resume_record_with_a_too_new_continuation_is_refused() -> None:
    newer = record(4)
    newer.continuation.schema_version = 5
    raw = wrap("resume_history", 1, _history_body([newer]))

    with pytest.raises(BlobTooNewError) as raised:
        load_resume_history(raw)

    assert (raised.value.kind, raised.value.found) == ("continuation", 5)


def _history_body(records: list[ResumeRecord]) -> bytes:
    return ResumeHistory(records=records).SerializeToString()


# --- corrupt input never escapes as another exception -----------------------------------

LOADERS: dict[str, Callable[[bytes], object]] = {
    "memory": load_memory,
    "llm_cache": load_llm_cache,
    "continuation": load_continuation,
    "pending": load_pending,
    "resume_history": load_resume_history,
    "tool_cache": load_tool_cache,
    "hold": load_hold,
}


def _is_a_blob_of(kind: str, raw: bytes) -> bool:
    try:
        return VersionedBlob.FromString(raw).kind == kind
    except DecodeError:
        return False


@pytest.mark.parametrize("kind", sorted(LOADERS))
@settings(max_examples=300, deadline=None)
@given(raw=st.binary(min_size=1, max_size=300))
def test_random_bytes_are_corrupt_for_every_loader(kind: str, raw: bytes) -> None:
    if _is_a_blob_of(kind, raw):
        # Vanishingly rare: the bytes really are a blob of this kind; then only the
        # version errors are allowed besides "corrupt".
        with contextlib.suppress(CorruptBlobError, BlobTooNewError, MigrationGapError):
            LOADERS[kind](raw)
        return
    with pytest.raises(CorruptBlobError) as raised:
        LOADERS[kind](raw)
    assert raised.value.kind == kind


@pytest.mark.parametrize(
    ("kind", "version"),
    [
        (kind, v)
        for kind, current in sorted(CURRENT_VERSIONS.items())
        for v in range(1, current + 1)
    ],
)
@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300))
def test_random_bodies_at_every_version_load_or_are_corrupt(
    kind: str, version: int, body: bytes
) -> None:
    try:
        LOADERS[kind](wrap(kind, version, body))
    except CorruptBlobError as error:
        assert error.kind in {kind, "continuation"}  # a history record holds continuations
    except BlobTooNewError as error:
        # Only a continuation embedded in a resume record carries its own version.
        assert kind == "resume_history" and error.kind == "continuation"
    except MigrationGapError as error:
        assert kind == "resume_history" and error.kind == "continuation"


# --- empty cells: recognized and written without parsing or encoding ---------------------


def test_empty_values_are_written_as_the_general_path_writes_them() -> None:
    assert dump_memory({}) == dump_memory(MappingProxyType({})) == encode_blob(
        "memory", b'{"memory":{},"provenance":{"deleted":{},"since":0,"written":{}}}'
    )
    assert dump_pending([]) == dump_pending(iter([])) == dump_pending(())
    assert dump_pending([]) == encode_blob("pending", PendingIntents().SerializeToString())
    assert dump_resume_history([]) == dump_resume_history(())
    assert dump_resume_history([]) == encode_blob(
        "resume_history", ResumeHistory().SerializeToString()
    )


def test_an_empty_cell_loads_as_a_new_object_each_time() -> None:
    memory, _ = load_memory(dump_memory({}))
    memory["changed"] = True
    pending, _ = load_pending(dump_pending([]))
    pending.append(intent(1, 0))
    history, _ = load_resume_history(dump_resume_history([]))
    history.append(record(2))

    assert load_memory(dump_memory({})) == ({}, [])
    assert load_pending(dump_pending([])) == ([], [])
    assert load_resume_history(dump_resume_history([])) == ([], [])


def test_an_empty_cell_of_another_kind_is_still_refused() -> None:
    with pytest.raises(CorruptBlobError, match="kind 'pending'"):
        load_resume_history(dump_pending([]))
    with pytest.raises(CorruptBlobError, match="kind 'memory'"):
        load_pending(dump_memory({}))


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 2**21 + 5])
def test_encode_blob_is_the_versioned_blob_serialization(size: int) -> None:
    # encode_blob writes the body's field by hand (no copy of a large body into a
    # message): the bytes must stay those of the message, serialized deterministically.
    from beam_agents._protos import VersionedBlob
    from beam_agents.blobs import CURRENT_VERSIONS, encode_blob

    body = bytes(i % 251 for i in range(size))
    for kind, version in CURRENT_VERSIONS.items():
        expected = VersionedBlob(kind=kind, schema_version=version, body=body)
        assert encode_blob(kind, body) == expected.SerializeToString(deterministic=True)


# --- split_fields: large cache blobs parsed in place (issue 14) ------------------------------


def test_split_fields_takes_the_last_occurrence_out_and_keeps_every_other_field() -> None:
    head = VersionedBlob(kind="llm_cache", schema_version=2).SerializeToString()
    fixed64, fixed32 = b"\x49" + b"\x01" * 8, b"\x55" + b"\x02" * 4  # fields 9 and 10, unknown
    data = head + b"\x1a\x01a" + fixed64 + b"\x1a\x02bc" + fixed32

    split = split_fields(data, frozenset({3}))

    assert split is not None
    rest, taken = split
    assert rest == head + fixed64 + fixed32
    assert bytes(taken[3]) == b"bc" == VersionedBlob.FromString(data).body


@pytest.mark.parametrize(
    "data",
    [
        b"\x1a\x05abc",  # a length past the end
        b"\x49\x01\x02",  # a fixed64 past the end
        b"\x08\x80",  # a varint cut short
        b"\x0b\x0c",  # a group: not written by this package, parsed whole
        b"\x00\x01",  # field number 0
        b"\x0e",  # wire type 6
    ],
)
def test_split_fields_gives_up_on_what_is_not_well_formed(data: bytes) -> None:
    assert split_fields(data, frozenset({3})) is None
