"""Blob migrations: every golden of every version reaches the current layout with its content.

The goldens in tests/fixtures/blobs/ are frozen (see make_golden_blobs.py); the
expected content below is written out by hand so that a migration that loses or
invents data fails here, not only one that raises.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from beam_agents import canonical_json
from beam_agents._protos import (
    AgentEnvelope,
    Continuation,
    LlmCacheBody,
    LlmRequest,
    PendingIntents,
    ResumeHistory,
    ToolCacheBody,
    VersionedBlob,
)
from beam_agents.blobs import (
    dump_memory,
    dump_tool_cache,
    load_llm_cache,
    load_memory_cell,
    load_tool_cache,
)
from beam_agents.cache_key import FINGERPRINT_UNAVAILABLE, cache_key_and_fingerprint
from beam_agents.errors import BlobTooNewError, CorruptBlobError, MigrationGapError, StateError
from beam_agents.llm_cache import LookupStatus
from beam_agents.memory_writes import MemoryProvenance
from beam_agents.migrations import (
    CURRENT_VERSIONS,
    REGISTRY,
    STATE_SCHEMA_VERSION,
    MigrationRegistry,
    migrate,
    parse_json_object,
)
from beam_agents.tool_cache import decode_result, tool_cache_key

GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "blobs"
T0 = 1_734_000_000_000
HOUR_MS = 3_600_000
KEY_HEX = b"customer-42".hex()

EXPECTED_MEMORY = {
    "attempts": 3,
    "customer": {"city": "東京", "name": "Zoë Ångström", "tier": "gold"},
    "escalation": None,
    "last_order": {
        "items": [
            {"price": 19.99, "qty": 2, "sku": "X-1"},
            {"price": 5.0, "qty": 1, "sku": "Y-2"},
        ],
        "order_id": "A1",
        "status": "shipped",
    },
    "notes": ["asked about a refund 💸", "prefers e-mail", 'line\nbreak "quoted"'],
    "refund_issued": False,
}


def golden(kind: str, version: int) -> VersionedBlob:
    blob = VersionedBlob.FromString((GOLDEN_DIR / f"{kind}-v{version}.bin").read_bytes())
    assert (blob.kind, blob.schema_version) == (kind, version)
    return blob


def golden_request(question: str) -> LlmRequest:
    request = LlmRequest(model="gpt-test-1")
    request.messages.add(role="system", content="You are a support agent.")
    request.messages.add(role="user", content=question)
    request.tools.add(
        name="lookup_order", description="Find an order", parameters_json='{"type":"object"}'
    )
    request.params.temperature = 0.0
    return request


WHERE_KEY, WHERE_FP = cache_key_and_fingerprint(
    golden_request("Where is order A1?"), provider="scripted"
)
REFUND_KEY, REFUND_FP = cache_key_and_fingerprint(
    golden_request("Can I get a refund for A1?"), provider="scripted"
)
ESSAY_KEY, ESSAY_FP = cache_key_and_fingerprint(
    golden_request("Tell me everything about A1."), provider="scripted"
)


def test_current_versions_and_state_schema_version() -> None:
    assert dict(CURRENT_VERSIONS) == {
        "memory": 3,
        "llm_cache": 2,
        "continuation": 1,
        "pending": 1,
        "resume_history": 1,
        "tool_cache": 1,
        "hold": 1,
    }
    assert STATE_SCHEMA_VERSION == 2


@pytest.mark.parametrize("kind", sorted(CURRENT_VERSIONS))
def test_every_version_of_every_kind_has_a_golden_and_a_path_to_current(kind: str) -> None:
    for version in range(1, CURRENT_VERSIONS[kind] + 1):
        assert (GOLDEN_DIR / f"{kind}-v{version}.bin").is_file(), f"no golden {kind}-v{version}"
        if version < CURRENT_VERSIONS[kind]:
            assert (kind, version) in REGISTRY.steps


def test_memory_v1_golden_migrates_to_canonical_json_of_the_same_object() -> None:
    blob = golden("memory", 1)
    assert b"\\u00eb" in blob.body and b", " in blob.body  # really the old json.dumps layout

    body, steps = migrate("memory", 1, blob.body)

    assert steps == ["memory v1→v2", "memory v2→v3"]
    assert body == canonical_json.dumps({"memory": EXPECTED_MEMORY, "provenance": UNKNOWN})
    assert "Zoë Ångström".encode() in body


UNKNOWN = {"deleted": {}, "since": None, "written": {}}
"""The provenance of a memory migrated from before v3: nothing recorded who wrote what."""


def test_memory_v2_golden_gains_an_unknown_provenance_and_keeps_its_memory() -> None:
    blob = golden("memory", 2)
    assert blob.body == canonical_json.dumps(EXPECTED_MEMORY)

    body, steps = migrate("memory", 2, blob.body)

    assert steps == ["memory v2→v3"]
    assert body == canonical_json.dumps({"memory": EXPECTED_MEMORY, "provenance": UNKNOWN})
    memory, provenance, load_steps = load_memory_cell(blob.SerializeToString())
    assert memory == EXPECTED_MEMORY and load_steps == ["memory v2→v3"]
    assert provenance == MemoryProvenance(since=None)


def test_memory_v3_golden_is_current_and_keeps_who_wrote_each_key() -> None:
    blob = golden("memory", 3)

    body, steps = migrate("memory", 3, blob.body)

    assert steps == []
    assert body == blob.body
    memory, provenance, _ = load_memory_cell(blob.SerializeToString())
    assert memory == EXPECTED_MEMORY
    assert provenance == MemoryProvenance(
        written={"attempts": 7, "last_order": 5, "notes": 9}, deleted={"draft": 8}, since=4
    )
    # Dumped again as it was loaded, the cell is byte for byte the golden (canonical JSON).
    assert dump_memory(memory, provenance) == blob.SerializeToString(deterministic=True)


def test_llm_cache_v1_golden_gains_the_v2_fields() -> None:
    body, steps = migrate("llm_cache", 1, golden("llm_cache", 1).body)

    assert steps == ["llm_cache v1→v2"]
    migrated = {entry.cache_key: entry for entry in LlmCacheBody.FromString(body).entries}
    assert set(migrated) == {WHERE_KEY, REFUND_KEY, ESSAY_KEY}
    for entry in migrated.values():
        assert entry.ttl_ms == 6 * HOUR_MS
        assert entry.inserted_seq == -1
        assert not entry.HasField("fingerprint")
        assert entry.provider == "scripted" and entry.model == "gpt-test-1"
    # Ticks follow last_used_ms (refund T0+1000 first), the T0+5000 tie broken by cache key.
    tied = sorted([WHERE_KEY, ESSAY_KEY])
    assert migrated[REFUND_KEY].last_used_tick == 1
    assert migrated[tied[0]].last_used_tick == 2
    assert migrated[tied[1]].last_used_tick == 3
    assert LlmCacheBody.FromString(body).tick == 3
    # The payloads and the v1 facts are kept as they were.
    where = migrated[WHERE_KEY]
    assert where.response.tool_calls[0].arguments_json == '{"order_id":"A1"}'
    assert where.response.usage.input_tokens == 112
    assert (where.inserted_ms, where.last_used_ms) == (T0, T0 + 5_000)
    refund = migrated[REFUND_KEY]
    assert refund.response.text == "Ihre Rückerstattung über 5,00 € ist unterwegs."
    assert (
        refund.response_sha256
        == hashlib.sha256(refund.response.SerializeToString(deterministic=True)).digest()
    )
    essay = migrated[ESSAY_KEY]
    assert essay.digest_only and not essay.HasField("response") and essay.response_size > 6000


def test_a_migrated_v1_cache_serves_hits_and_cannot_explain_misses() -> None:
    cache, steps = load_llm_cache(golden("llm_cache", 1).SerializeToString())

    assert steps == ["llm_cache v1→v2"]
    refund = cache.lookup(REFUND_KEY, now_ms=T0 + 10_000, visible_through_seq=0)
    assert refund.status is LookupStatus.HIT
    assert refund.response is not None and refund.response.stop_reason == "stop"
    assert cache.lookup(ESSAY_KEY, now_ms=T0 + 10_000).status is LookupStatus.DIGEST_ONLY
    assert cache.lookup(WHERE_KEY, now_ms=T0 + 6 * HOUR_MS).status is LookupStatus.EXPIRED
    nearest = cache.nearest(REFUND_FP)
    assert nearest is not None and nearest[1] == [FINGERPRINT_UNAVAILABLE]


def test_llm_cache_v2_golden_is_current_and_keeps_its_fingerprints() -> None:
    blob = golden("llm_cache", 2)

    body, steps = migrate("llm_cache", 2, blob.body)

    assert steps == [] and body == blob.body
    entries = {entry.cache_key: entry for entry in LlmCacheBody.FromString(body).entries}
    assert entries[WHERE_KEY].fingerprint == WHERE_FP
    assert entries[REFUND_KEY].inserted_seq == 6
    assert entries[ESSAY_KEY].digest_only


def test_continuation_v1_golden_is_current() -> None:
    body, steps = migrate("continuation", 1, golden("continuation", 1).body)

    assert steps == []
    continuation = Continuation.FromString(body)
    assert continuation.schema_version == 1
    assert continuation.suspended_seq == 7 and continuation.step_index == 1
    assert list(continuation.awaiting_intent_ids) == [f"{KEY_HEX}-7-0"]
    assert continuation.deadline_ms == T0 + 7_000 + HOUR_MS
    assert canonical_json.loads(continuation.adapter_snapshot) == {
        "awaiting": [f"{KEY_HEX}-7-0"],
        "reason": "refund für Zoë",
        "step": "await_refund",
    }


def test_pending_v1_golden_is_current() -> None:
    body, steps = migrate("pending", 1, golden("pending", 1).body)

    assert steps == []
    intents = PendingIntents.FromString(body).intents
    assert [(i.intent_id, i.tool, i.requires_approval) for i in intents] == [
        (f"{KEY_HEX}-7-0", "issue_refund", True),
        (f"{KEY_HEX}-7-1", "send_email", False),
    ]
    assert canonical_json.loads(intents[0].args) == {"amount_cents": 500, "order_id": "A1"}
    assert intents[0].approval_channel == "refunds"
    assert intents[0].expires_at_ms == T0 + 7_000 + 24 * HOUR_MS


def test_resume_history_v1_golden_is_current() -> None:
    body, steps = migrate("resume_history", 1, golden("resume_history", 1).body)

    assert steps == []
    records = ResumeHistory.FromString(body).records
    assert [r.seq for r in records] == [4, 6]
    assert [r.continuation.suspended_seq for r in records] == [3, 5]
    assert all(r.continuation.schema_version == 1 for r in records)
    assert [len(r.pending) for r in records] == [1, 2]


def test_tool_cache_v1_golden_is_current_and_serves_its_entries() -> None:
    raw = golden("tool_cache", 1).SerializeToString()
    body, steps = migrate("tool_cache", 1, golden("tool_cache", 1).body)
    assert steps == []
    entries = {e.tool + ":" + e.args_sha256[:8]: e for e in ToolCacheBody.FromString(body).entries}
    assert len(entries) == 3
    cache, load_steps = load_tool_cache(raw)
    assert load_steps == [] and len(cache) == 3
    assert dump_tool_cache(cache) == raw, "a current golden is dumped back byte for byte"
    by_tool = sorted((e.tool, e.digest_only, e.result_is_bytes) for e in cache.entries_by_recency())
    assert by_tool == [
        ("read_invoice_pdf", False, True),
        ("read_order", False, False),
        ("search_kb", True, False),
    ]
    order = next(e for e in cache.entries_by_recency() if e.tool == "read_order")
    args_sha = hashlib.sha256(canonical_json.dumps({"order_id": "A1"})).hexdigest()
    assert order.args_sha256 == args_sha
    found = cache.lookup(
        tool_cache_key("read_order", args_sha), now_ms=T0 + 8_000, visible_through_seq=8
    )
    assert found.status is LookupStatus.HIT and found.entry is not None
    assert decode_result(found.entry) == {"order_id": "A1", "status": "versandt", "note": "für Zoë"}
    assert hashlib.sha256(found.entry.result).digest() == found.entry.result_sha256
    digest_only = next(e for e in cache.entries_by_recency() if e.tool == "search_kb")
    assert (
        cache.lookup(digest_only.cache_key, now_ms=T0 + 8_000, visible_through_seq=8).status
        is LookupStatus.DIGEST_ONLY
    )


@pytest.mark.parametrize("kind", sorted(CURRENT_VERSIONS))
def test_a_blob_stamped_version_99_is_refused_naming_both_versions(kind: str) -> None:
    with pytest.raises(BlobTooNewError) as raised:
        migrate(kind, 99, b"")

    assert (raised.value.kind, raised.value.found) == (kind, 99)
    assert raised.value.supported == CURRENT_VERSIONS[kind]
    assert "99" in str(raised.value) and f"version {CURRENT_VERSIONS[kind]}" in str(raised.value)


@pytest.mark.parametrize("version", [0, -1])
def test_version_zero_or_below_is_a_gap_never_guessed(version: int) -> None:
    with pytest.raises(MigrationGapError) as raised:
        migrate("memory", version, b"{}")

    assert raised.value.found == version and raised.value.current == CURRENT_VERSIONS["memory"]


def test_a_removed_step_is_a_gap_naming_the_missing_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(REGISTRY.steps, ("llm_cache", 1))

    with pytest.raises(MigrationGapError) as raised:
        load_llm_cache(golden("llm_cache", 1).SerializeToString())

    error = raised.value
    assert (error.kind, error.found, error.current, error.missing_step) == ("llm_cache", 1, 2, 1)
    assert "from version 1 to 2" in str(error)


def _fake_registry() -> MigrationRegistry:
    registry = MigrationRegistry({"fake": 4})

    @registry.register("fake", 1)
    def one_to_two(body: bytes) -> bytes:
        return body + b"|2"

    @registry.register("fake", 3)
    def three_to_four(body: bytes) -> bytes:
        return body + b"|4"

    return registry


def test_a_chain_with_a_hole_fails_at_the_hole() -> None:
    with pytest.raises(MigrationGapError) as raised:
        _fake_registry().migrate("fake", 1, b"v1")

    assert (raised.value.found, raised.value.current, raised.value.missing_step) == (1, 4, 2)


def test_steps_run_in_order_from_the_stamped_version() -> None:
    registry = _fake_registry()

    @registry.register("fake", 2)
    def two_to_three(body: bytes) -> bytes:
        return body + b"|3"

    assert registry.migrate("fake", 1, b"v1") == (
        b"v1|2|3|4",
        ["fake v1→v2", "fake v2→v3", "fake v3→v4"],
    )
    assert registry.migrate("fake", 3, b"v3") == (b"v3|4", ["fake v3→v4"])
    assert registry.migrate("fake", 4, b"v4") == (b"v4", [])


@pytest.mark.parametrize(("kind", "version"), [("fake", 4), ("fake", 0), ("other", 1)])
def test_a_step_that_cannot_exist_is_refused_at_registration(kind: str, version: int) -> None:
    with pytest.raises(ValueError, match=kind):
        _fake_registry().register(kind, version)


def test_a_step_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        _fake_registry().register("fake", 1)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(StateError, match="unknown blob kind 'nope'"):
        migrate("nope", 1, b"")


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'"text"', b"{not json", b'{"x": NaN}', b'{"x": Infinity}', b"\xff\xfe{}", b""],
)
def test_a_memory_v1_body_that_is_not_a_json_object_is_corrupt(body: bytes) -> None:
    with pytest.raises(CorruptBlobError) as raised:
        migrate("memory", 1, body)

    assert raised.value.kind == "memory"


def test_a_llm_cache_v1_body_that_does_not_parse_is_corrupt() -> None:
    with pytest.raises(CorruptBlobError) as raised:
        migrate("llm_cache", 1, b"\x0a\xff\xff\xff")

    assert raised.value.kind == "llm_cache"


def test_migrating_is_pure() -> None:
    body = golden("llm_cache", 1).body

    assert migrate("llm_cache", 1, body) == migrate("llm_cache", 1, body)


def test_a_memory_body_starting_with_a_bom_is_corrupt_as_json_says() -> None:
    body = "\ufeff{}".encode()
    with pytest.raises(ValueError) as json_says:
        json.loads(body.decode("utf-8"))

    with pytest.raises(CorruptBlobError) as raised:
        parse_json_object("memory", body)

    assert str(json_says.value) in str(raised.value)


@pytest.mark.parametrize("body", [b'{"a": [1, 2.5, "\\u00fc"], "b": {"c": null}}', b"{}", b" {} "])
def test_a_memory_body_parses_as_json_loads_parses_it(body: bytes) -> None:
    assert parse_json_object("memory", body) == json.loads(body)


def test_hold_v1_golden_is_current_and_loads_its_retry() -> None:
    from beam_agents.blobs import dump_hold, load_hold

    raw = golden("hold", 1).SerializeToString()
    hold, steps = load_hold(raw)
    assert steps == [] and hold is not None
    assert [a.seq for a in hold.retry.attempts] == [8, 9]
    assert hold.retry.due_ms == 1_734_000_030_000 and hold.deferred_after == 1
    assert AgentEnvelope.FromString(hold.envelope).envelope_id == "msg-zoë-7"
    assert dump_hold(hold) == raw, "a current golden is dumped back byte for byte"
