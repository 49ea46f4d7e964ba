"""engine.replay on histories played through run_activation as the DoFn does: one test per verdict
and per reason (the end-to-end tests repeat the main ones through a real pipeline)."""

from __future__ import annotations

import hashlib
import json
import select
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import AgentEnvelope, StateSnapshot, ToolResult, TraceEvent, VersionedBlob
from beam_agents.activation import ActivationCommit, ActivationFailure
from beam_agents.blobs import load_memory
from beam_agents.llm_cache import CachePolicy
from beam_agents.provider import UnservableProvider
from beam_agents.replay import engine
from beam_agents.replay.engine import replay
from beam_agents.replay.result import EntryStatus, Mark, ReplayResult, Verdict
from beam_agents.testing import (
    approval_envelope,
    event_envelope,
    export_request_envelope,
    tool_result_envelope,
)
from beam_agents.trace_events import ATTR_CACHE_KEY

HOUR_MS = 3_600_000


def ask(text: str = "where is A1?", *, at: int = T0, type: str = "ask") -> AgentEnvelope:
    return event_envelope(KEY, type, text.encode(), time_ms=at)


@pytest.fixture
def history() -> KeyHistory:
    return KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_usage_error(result: ReplayResult, *needles: str) -> None:
    assert result.verdict is Verdict.USAGE_ERROR, result.reason
    assert result.exit_code == 2
    for needle in needles:
        assert needle in result.error, result.error


def suspend_for_refund(history: KeyHistory) -> tuple[AgentEnvelope, str]:
    refund = ask("refund please", type="refund")
    result = history.send(refund)
    assert isinstance(result, ActivationCommit) and result.suspended
    return refund, result.approval_requests[0].intent_id


# --------------------------------------------------------------------------- reproduced


def test_a_completed_start_reproduces_with_no_provider_call(history: KeyHistory) -> None:
    event = ask()
    original = history.send(event)
    assert isinstance(original, ActivationCommit)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.REPRODUCED and result.exit_code == 0
    assert result.provider_calls == 0
    h = result.header
    assert (h.entity_key, h.seq, h.now_ms, h.kind, h.trigger) == (KEY, 1, T0, "start", "event")
    assert (h.provider, h.envelope_id, h.snapshot_seq) == (ra.PROVIDER_NAME, event.envelope_id, 1)
    assert h.hitl_source == "default" and "intent_ttl_ms=86400000" in h.hitl_policy
    assert [o.sha256 for o in result.outputs] == [sha(o) for o in original.outputs]
    # The re-run starts from the snapshot's post-image and writes again: its memory is the
    # committed one (digest of its canonical JSON, not of the cell), and so are its writes.
    assert result.memory is not None and result.memory.sha256 == sha(result.memory.payload)
    assert result.memory.sha256 != sha(original.cells.memory)
    assert result.memory.mark is Mark.VERIFIED
    assert result.memory_writes is not None and result.memory_writes.mark is Mark.VERIFIED
    assert len(result.events) == 4 and not any(p.differs for p in result.events)
    assert result.state is not None and result.state.memory["asked.0001"] == "where is A1?"
    assert [e.hit_in_activation for e in result.state.cache_entries] == [True]
    assert [e.status for e in result.state.cache_entries] == [EntryStatus.SERVABLE]
    # The original was billed, the re-run was served: the engine names both flags as
    # normalized on the LLM_CALL, and nothing else anywhere.
    normalized = {p.index: p.normalized_fields for p in result.events if p.normalized_fields}
    call = next(p.index for p in result.events if p.traced and p.traced.kind == TraceEvent.LLM_CALL)
    assert normalized == {
        call: ("attributes['beam_agents.billed']", "attributes['beam_agents.cache_hit']")
    }


def test_a_failure_before_any_model_call_reproduces_fully(history: KeyHistory) -> None:
    event = ask(type="boom")
    assert isinstance(history.send(event), ActivationFailure)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.events[-1].traced is not None
    assert result.events[-1].traced.kind == TraceEvent.ACTIVATION_FAILED
    assert result.memory is None and result.outputs == ()
    assert "fails with builtins.ValueError" not in result.reason  # builtins are unqualified
    assert "fails with ValueError, as traced" in result.reason


def test_seq_picks_an_older_activation(history: KeyHistory) -> None:
    first, second = ask("one"), ask("two", at=T0 + 1000)
    history.send(first)
    history.send(second)
    snapshot, traces = history.export(), history.trace_bytes()
    older = replay(options(snapshot, traces, event=first, seq=1))
    assert older.verdict is Verdict.REPRODUCED and older.header.seq == 1
    assert older.header.now_ms == T0
    newest = replay(options(snapshot, traces, event=second))
    assert newest.verdict is Verdict.REPRODUCED and newest.header.seq == 2


def test_old_blob_versions_are_migrated_in_memory_and_reported(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    memory, _ = load_memory(snapshot.memory)
    snapshot.memory = VersionedBlob(
        kind="memory", schema_version=1, body=json.dumps(memory, indent=1).encode()
    ).SerializeToString()
    result = replay(options(snapshot.SerializeToString(), history.trace_bytes(), event=event))
    # A v1 blob records no provenance; the snapshot is the activation's own (seq 1) and its
    # writes are the traced ones, so what it read is still told key by key.
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.header.migrations_applied == ("memory v1→v2", "memory v2→v3")
    assert result.state is not None and result.state.blob_versions["memory"] == 1


# --------------------------------------------------------------------------- resumes


def test_a_completed_resume_replays_as_resume_from_resumed_from(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    history.send(approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000))
    result_env = tool_result_envelope(KEY, intent, time_ms=T0 + 2000, payload=b"{}")
    history.send(result_env)
    snapshot, traces = history.export(), history.trace_bytes()
    result = replay(options(snapshot, traces, event=result_env))
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert (result.header.kind, result.header.trigger, result.header.seq) == (
        "resume",
        "tool_result",
        3,
    )
    assert result.header.continuation_source == "snapshot.resumed_from[seq=3]"
    assert result.state is not None and result.state.continuation is None
    assert result.state.resumed_continuation is not None
    assert result.state.resumed_continuation.awaiting_intent_ids == (intent,)
    approval = approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000)
    released = replay(options(snapshot, traces, event=approval, seq=2))
    assert released.verdict is Verdict.REPRODUCED, released.reason
    assert [(r.intent_id, r.traced_released, r.replayed_released) for r in released.intents] == [
        (intent, True, True)
    ]


def test_a_pending_resume_is_a_what_if(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    snapshot, traces = history.export(), history.trace_bytes()
    rejection = approval_envelope(KEY, intent, approved=False, time_ms=T0 + 5000)
    result = replay(options(snapshot, traces, event=rejection, what_if=True))
    assert result.verdict is Verdict.WHAT_IF and result.exit_code == 0, result.reason
    assert (result.header.seq, result.header.now_ms, result.header.kind) == (2, T0 + 5000, "resume")
    assert "no traced outcome to diff" in result.reason
    assert all(p.traced is None and p.replayed is not None for p in result.events)
    assert result.cache_miss is None and result.provider_calls == 0
    assert result.header.continuation_source == "snapshot.continuation"


def test_a_pending_resume_without_what_if_is_refused_naming_the_flag(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    snapshot, traces = history.export(), history.trace_bytes()
    rejection = approval_envelope(KEY, intent, approved=False, time_ms=T0 + 5000)
    result = replay(options(snapshot, traces, event=rejection))
    assert_usage_error(result, "what_if=True", "never traced", "seq 2")
    assert result.values == () and result.events == ()
    # The timeout of the same pending key, asked for with --seq, is refused the same way.
    assert_usage_error(replay(options(snapshot, traces, seq=2)), "what_if=True")


def test_a_pending_resume_that_needs_an_unminted_response_is_irreproducible(
    history: KeyHistory,
) -> None:
    _, intent = suspend_for_refund(history)
    history.send(approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000))
    snapshot, traces = history.export(), history.trace_bytes()
    pending = tool_result_envelope(KEY, intent, time_ms=T0 + 5000, payload=b"{}")
    result = replay(options(snapshot, traces, event=pending, what_if=True))
    # A pending resume's responses are not minted yet: it runs up to its first model call,
    # and a what-if that could not run to its end is not reported as exit 0.
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3
    assert result.reason.startswith("what-if:") and "not minted yet" in result.reason
    assert result.cache_miss is not None and result.provider_calls == 1


def test_a_pending_timeout_is_a_what_if_run_with_seq(history: KeyHistory) -> None:
    suspend_for_refund(history)
    snapshot, traces = history.export(), history.trace_bytes()
    result = replay(options(snapshot, traces, seq=2, what_if=True))
    # The timeout's resume asks the model for a summary that was never minted.
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.error
    assert result.reason.startswith("what-if:")
    assert (result.header.trigger, result.header.now_ms) == ("timeout", T0 + HOUR_MS)


def test_a_timeout_resume_replays_without_an_event(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    history.fire_timeout()
    snapshot, traces = history.export(), history.trace_bytes()
    result = replay(options(snapshot, traces))
    assert result.verdict is Verdict.REPRODUCED, result.error or result.reason
    assert (result.header.trigger, result.header.kind, result.header.now_ms) == (
        "timeout",
        "resume",
        T0 + HOUR_MS,
    )
    late = tool_result_envelope(KEY, intent, time_ms=T0 + 2 * HOUR_MS)
    assert_usage_error(replay(options(snapshot, traces, event=late)), "HITL timeout")


def test_a_failed_resume_replays_from_the_live_continuation(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    history.send(approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000))
    failing = tool_result_envelope(
        KEY, intent, time_ms=T0 + 2000, status=ToolResult.ERROR, error="timeout"
    )
    assert isinstance(history.send(failing), ActivationFailure)
    live = replay(options(history.export(), history.trace_bytes(), event=failing))
    assert live.verdict is Verdict.REPRODUCED, live.error or live.reason
    assert live.header.continuation_source == "snapshot.continuation"
    # The executor retries; a later resume consumes the continuation the failure left.
    history.send(tool_result_envelope(KEY, intent, time_ms=T0 + 3000, payload=b"{}"))
    later = replay(options(history.export(), history.trace_bytes(), event=failing, seq=3))
    assert later.verdict is Verdict.REPRODUCED, later.error or later.reason
    assert later.header.continuation_source == "snapshot.resumed_from[seq=4]"


def test_a_resume_whose_continuation_is_gone_is_irreproducible(history: KeyHistory) -> None:
    _, intent = suspend_for_refund(history)
    result_env = tool_result_envelope(KEY, intent, time_ms=T0 + 2000, payload=b"{}")
    history.send(approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000))
    history.send(result_env)
    snapshot = StateSnapshot.FromString(history.export())
    del snapshot.resumed_from[:]
    result = replay(options(snapshot.SerializeToString(), history.trace_bytes(), event=result_env))
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3
    assert "no longer in the snapshot" in result.reason
    assert (result.header.seq, result.header.kind, result.header.now_ms) == (3, "resume", T0 + 2000)


# --------------------------------------------------------------------------- diverged


def test_a_changed_read_only_tool_result_diverges_at_that_tool_call(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            registry="replay_agents:TOOLS_CHANGED_LOOKUP",
        )
    )
    assert result.verdict is Verdict.DIVERGED and result.exit_code == 1
    divergence = result.first_divergence
    assert divergence is not None
    assert (divergence.index, divergence.kind, divergence.name) == (1, "TOOL_CALL", "lookup_order")
    assert [f.path for f in divergence.fields] == ["attributes['beam_agents.result_sha256']"]
    assert result.cache_miss is None


def test_a_non_default_hitl_policy_diverges_unless_given(history: KeyHistory) -> None:
    custom = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), hitl=ra.HITL_SHORT)
    refund, _ = suspend_for_refund(custom)
    snapshot, traces = custom.export(), custom.trace_bytes()
    default = replay(options(snapshot, traces, event=refund))
    assert default.verdict is Verdict.DIVERGED
    assert default.first_divergence is not None and default.first_divergence.kind == "INTENT_STAGED"
    assert "attributes['beam_agents.expires_at_ms']" in [
        f.path for f in default.first_divergence.fields
    ]
    given = replay(options(snapshot, traces, event=refund, hitl="replay_agents:HITL_SHORT"))
    assert given.verdict is Verdict.REPRODUCED, given.reason
    assert given.header.hitl_source == "replay_agents:HITL_SHORT"
    assert [(r.traced_staged, r.replayed_staged, r.requires_approval) for r in given.intents] == [
        (True, True, True)
    ]


# --------------------------------------------------------------------------- irreproducible


def test_a_changed_prompt_is_a_cache_miss_naming_the_message(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    traced_key = history.trace[2].attributes[ATTR_CACHE_KEY].string_value
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:AGENT_NEW_PROMPT",
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3
    miss = result.cache_miss
    assert miss is not None
    assert (miss.event_index, miss.status, miss.traced_cache_key) == (2, "absent", traced_key)
    assert miss.cache_key != traced_key
    assert miss.nearest is not None and miss.nearest.cache_key == traced_key
    assert miss.nearest.differences == ("messages[0]",)
    assert "messages[0]" in result.reason and result.provider_calls == 1


def test_a_failure_after_a_model_call_replays_up_to_that_call(history: KeyHistory) -> None:
    event = ask(type="boom_late")
    assert isinstance(history.send(event), ActivationFailure)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert result.cache_miss is not None and result.cache_miss.event_index == 2
    assert result.cache_miss.traced_cache_key == result.cache_miss.cache_key
    assert "never committed" in result.reason


def test_a_digest_only_entry_is_irreproducible() -> None:
    history = KeyHistory(
        ra.AGENT, ra.TOOLS, ra.make_provider(), cache_policy=CachePolicy(retain_payloads=False)
    )
    event = ask()
    history.send(event)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert result.cache_miss is not None and result.cache_miss.status == "digest_only"
    assert "digest-only" in result.reason


def test_an_entry_minted_by_a_later_activation_is_not_served(history: KeyHistory) -> None:
    first = ask("same question")
    history.send(first)
    history.send(ask("same question", at=T0 + 7 * HOUR_MS))  # expired: asked again, re-minted
    result = replay(options(history.export(), history.trace_bytes(), event=first, seq=1))
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert result.cache_miss is not None and result.cache_miss.status == "minted_later"
    assert "later activation (seq 2)" in result.reason
    # The state table says what the lookup found, by the same rule.
    assert result.state is not None
    entry = next(e for e in result.state.cache_entries if e.cache_key == result.cache_miss.cache_key)
    assert entry.status is EntryStatus.MINTED_LATER and entry.age_ms < 0


def test_a_provider_error_the_agent_caught_is_still_a_miss() -> None:
    # The original itself reached a provider that failed, and the agent carried on:
    # the traces match event for event, yet nothing was served from the cache.
    history = KeyHistory(ra.AGENT_CATCHES_MISS, ra.TOOLS, UnservableProvider(ra.PROVIDER_NAME))
    event = ask()
    assert isinstance(history.send(event), ActivationCommit)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:AGENT_CATCHES_MISS",
        )
    )
    assert not result.events[2].differs  # the traces alone would say "reproduced"
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.provider_calls == 1
    assert "the original call failed here too (beam_agents.errors.CacheMissError)" in result.reason


def test_an_evicted_response_is_gone_whether_it_was_billed_or_a_hit() -> None:
    history = KeyHistory(
        ra.AGENT, ra.TOOLS, ra.make_provider(), cache_policy=CachePolicy(max_entries=1)
    )
    first, again = ask("same question"), ask("same question", at=T0 + 1000)
    history.send(first)  # billed: minted
    history.send(again)  # a hit on that entry
    history.send(ask("another question", at=T0 + 2000))  # evicts it (one entry only)
    snapshot, traces = history.export(), history.trace_bytes()
    billed = replay(options(snapshot, traces, event=first, seq=1))
    assert billed.verdict is Verdict.IRREPRODUCIBLE
    assert billed.cache_miss is not None and billed.cache_miss.status == "absent"
    assert "the response the original received here is no longer" in billed.reason
    hit = replay(options(snapshot, traces, event=again, seq=2))
    assert hit.verdict is Verdict.IRREPRODUCIBLE
    assert "the original was served this response from the cache" in hit.reason


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    host, port = server.getsockname()[:2]
    monkeypatch.setenv(ra.NETWORK_TARGET_ENV, f"{host}:{port}")
    try:
        yield server
    finally:
        server.close()


def test_a_tool_reaching_the_network_is_irreproducible(
    history: KeyHistory, listener: socket.socket
) -> None:
    event = ask("rate?", type="rate")
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            registry="replay_agents:TOOLS_ONLINE_RATE",
        )
    )
    host, port = listener.getsockname()[:2]
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3
    assert "'fetch_rate'" in result.reason and f"{host}:{port}" in result.reason
    assert result.network_attempts and "fetch_rate" in result.network_attempts[0]
    assert select.select([listener], [], [], 0.3)[0] == []  # no connection reached it


# --------------------------------------------------------------------------- usage errors


def test_inputs_of_different_keys_are_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    other = event_envelope(b"customer-7", "ask", b"where is A1?", time_ms=T0)
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=other)),
        "key 637573746f6d65722d37",
        "snapshot is of key 637573746f6d65722d3432",
    )


def test_an_event_of_another_kind_than_traced_is_refused(history: KeyHistory) -> None:
    history.send(ask())
    wrong = tool_result_envelope(KEY, "in-nothing", time_ms=T0)
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=wrong)),
        "carries a tool_result",
        "triggered by an event",
    )


def test_an_event_with_another_envelope_id_is_refused(history: KeyHistory) -> None:
    history.send(ask())
    other = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0, envelope_id="ev-other")
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=other)),
        "envelope_id 'ev-other'",
    )


def test_an_event_with_other_bytes_under_the_traced_id_is_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    edited = AgentEnvelope()
    edited.CopyFrom(event)
    edited.event.payload = b"where is A2?"
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=edited)),
        "different bytes",
        "sha256",
    )


def test_a_missing_event_is_refused_for_an_envelope_triggered_target(history: KeyHistory) -> None:
    history.send(ask())
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes())), "event= is missing"
    )


def test_an_export_request_is_not_a_trigger(history: KeyHistory) -> None:
    history.send(ask())
    export = export_request_envelope(KEY, "x", time_ms=T0)
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=export)), "export_request"
    )


def test_a_seq_with_no_traced_activation_is_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=event, seq=5)),
        "seq=5",
        "traced seqs: 1",
    )


def test_a_snapshot_older_than_the_target_is_refused(history: KeyHistory) -> None:
    history.send(ask("one"))
    early = history.export()
    second = ask("two", at=T0 + 1000)
    history.send(second)
    assert_usage_error(
        replay(options(early, history.trace_bytes(), event=second)),
        "exported at seq 1, before the target activation (seq 2)",
    )


def test_an_event_of_an_older_activation_points_at_its_seq(history: KeyHistory) -> None:
    first = ask("one")
    history.send(first)
    history.send(ask("two", at=T0 + 1000))
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=first)), "seq=1"
    )


def test_conflicting_traces_are_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    forged = TraceEvent()
    forged.CopyFrom(history.trace[1])
    forged.name = "forged"
    traces = history.trace_bytes() + history.trace_bytes([forged])
    assert_usage_error(
        replay(options(history.export(), traces, event=event)), "two different events"
    )
    duplicated = history.trace_bytes() + history.trace_bytes()  # at-least-once delivery
    assert replay(options(history.export(), duplicated, event=event)).verdict is Verdict.REPRODUCED


def test_an_incomplete_trace_is_refused_not_judged(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    snapshot = history.export()
    assert_usage_error(
        replay(options(snapshot, history.trace_bytes(history.trace[:-1]), event=event)),
        "incomplete",
    )
    assert_usage_error(
        replay(options(snapshot, history.trace_bytes(history.trace[1:]), event=event)),
        "no event at index 0",
    )


def test_traces_without_the_key_are_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    assert_usage_error(replay(options(history.export(), b"", event=event)), "hold no event of key")


def test_a_snapshot_newer_than_the_package_names_both_versions(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    snapshot.state_schema_version = 99
    assert_usage_error(
        replay(options(snapshot.SerializeToString(), history.trace_bytes(), event=event)),
        "version 99",
        "(version 2)",
        "upgrade beam-agents",
    )


def test_an_embedded_blob_newer_than_the_package_is_refused(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    snapshot.memory = VersionedBlob(kind="memory", schema_version=7, body=b"{}").SerializeToString()
    assert_usage_error(
        replay(options(snapshot.SerializeToString(), history.trace_bytes(), event=event)),
        "memory",
        "version 7",
        "upgrade",
    )


def test_a_migration_gap_is_irreproducible(history: KeyHistory) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    snapshot.memory = VersionedBlob(kind="memory", schema_version=0, body=b"{}").SerializeToString()
    result = replay(options(snapshot.SerializeToString(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3
    assert "migration gap" in result.reason


@pytest.mark.parametrize(
    ("agent", "needle"),
    [
        ("replay_agents", "not of the form module:ATTR"),
        ("no_such_module_xyz:AGENT", "ModuleNotFoundError"),
        ("replay_agents:NOPE", "no attribute 'NOPE'"),
        ("replay_agents:NOT_AN_AGENT", "is a dict, not an Agent instance"),
        ("replay_agents:SupportAgent", "is the class SupportAgent"),
    ],
)
def test_a_bad_agent_path_is_a_usage_error(history: KeyHistory, agent: str, needle: str) -> None:
    event = ask()
    history.send(event)
    assert_usage_error(
        replay(options(history.export(), history.trace_bytes(), event=event, agent=agent)), needle
    )


def test_a_bug_in_the_engine_is_reported_as_internal_never_as_a_verdict(
    history: KeyHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = ask()
    history.send(event)

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(engine, "judge", broken)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2
    assert "internal error" in result.error and "KeyError" in result.error


def test_the_result_says_what_stopped_it_as_a_typed_cause(history: KeyHistory) -> None:
    """``ReplayResult.stop``: what groups results (check's causes) reads this, never the
    reason's words."""
    from beam_agents.replay.result import StopCause

    event = ask()
    history.send(event)
    snapshot, traces = history.export(), history.trace_bytes()
    assert replay(options(snapshot, traces, event=event)).stop is None
    changed = replay(options(snapshot, traces, event=event, registry="replay_agents:TOOLS_CHANGED_LOOKUP"))
    assert changed.verdict is Verdict.DIVERGED and changed.stop is None
    missed = replay(options(snapshot, traces, event=event, agent="replay_agents:AGENT_NEW_PROMPT"))
    assert (missed.verdict, missed.stop) == (Verdict.IRREPRODUCIBLE, StopCause.CACHE_MISS)
    refused = replay(options(snapshot, b"", event=event))
    assert (refused.verdict, refused.stop) == (Verdict.USAGE_ERROR, StopCause.REFUSED)


def test_a_failed_call_whose_retry_succeeded_says_the_original_call_failed() -> None:
    # The rate limit fails the first attempt (seq 1); its retry (seq 2) asks the very same
    # request and succeeds, so the snapshot's entry under that key was minted by seq 2.
    # Seq 1 never had a response: replay must say so, not "the response is gone".
    from beam_agents.errors import ProviderRateLimitError
    from beam_agents.replay.incidents.listing import list_activations
    from beam_agents.replay.reporting.text import render_report
    from beam_agents.testing import ScriptedProvider

    refusals = [True]

    def limited(request: object) -> str:
        if refusals and refusals.pop():
            raise ProviderRateLimitError(ra.PROVIDER_NAME, "slow down", status=429)
        return "on its way"

    history = KeyHistory(ra.AGENT, ra.TOOLS, ScriptedProvider(limited, name=ra.PROVIDER_NAME))
    event = ask("same question")
    assert isinstance(history.send(event), ActivationFailure)
    assert isinstance(history._ran(history.pipeline_key.fire_retry(), "retry"), ActivationCommit)
    result = replay(options(history.export(), history.trace_bytes(), event=event, seq=1))
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert result.cache_miss is not None and result.cache_miss.status == "minted_later"
    assert result.cache_miss.traced_error_type == "beam_agents.errors.ProviderRateLimitError"
    assert "the original call failed here too (beam_agents.errors.ProviderRateLimitError)" in (
        result.reason
    )
    assert "cached later, by seq 2" in result.reason and "is gone" not in result.reason
    text = render_report(result)
    assert "(same key: the original call failed" in text and "the response is gone" not in text
    assert "this request's own entry, cached later by another activation" in text
    # ls says the same of seq 1 as of a failed call with nothing cached after it.
    rows = list_activations([history.trace_bytes()], snapshot=history.export()).rows
    assert [(r.seq, r.replay) for r in rows] == [(1, "call-failed"), (2, "cached")]


def test_a_snapshot_exported_while_the_key_waits_says_so_in_the_header_and_ls() -> None:
    from beam_agents.errors import ProviderRateLimitError
    from beam_agents.replay.incidents.listing import list_activations, render_listing
    from beam_agents.replay.reporting.text import render_report
    from beam_agents.testing import ScriptedProvider

    def limited(request: object) -> str:
        raise ProviderRateLimitError(ra.PROVIDER_NAME, "slow down", status=429)

    history = KeyHistory(ra.AGENT, ra.TOOLS, ScriptedProvider(limited, name=ra.PROVIDER_NAME))
    event = ask("where is A1?")
    history.send(event)
    history.pipeline_key.send(ask("and A2?", at=T0 + 1))  # waits behind the hold
    snapshot = history.export()
    said = (
        f"a retry of envelope {event.envelope_id!r} (1 failed attempt, the last "
        "beam_agents.errors.ProviderRateLimitError; next at event time"
    )
    result = replay(options(snapshot, history.trace_bytes(), event=event, seq=1))
    assert f"  waiting at export: {said}" in render_report(result)
    assert "1 envelope in its inbox" in render_report(result)
    listing = render_listing(list_activations([history.trace_bytes()], snapshot=snapshot))
    assert f"snapshot at seq 1; waiting: {said}" in listing.splitlines()[0]


def test_a_fork_provider_answers_only_after_the_fork_and_only_there_opens_the_network() -> None:
    # docs/replay.md, "A fork": before the forked event only the snapshot serves.
    from beam_agents._protos import LlmResponse
    from beam_agents.replay.engine import ForkProvider
    from beam_agents.replay.isolation import guard
    from beam_agents.testing import chat_request

    seen: list[bool] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    class Inner:
        name = "real"

        def complete(self, request: object) -> LlmResponse:
            with socket.create_connection(server.getsockname()[:2], timeout=5):
                seen.append(True)  # the guard let the provider's own connection through
            return LlmResponse(text="live")

    provider = ForkProvider("traced-name", Inner(), after=3)
    request = chat_request("m", ("user", "hi"))
    with guard.block_network() as attempts:
        _complete_at(provider, request, ((2, False), (3, False), (4, True)))
    server.close()
    assert attempts == []
    assert (provider.refused, provider.calls, seen) == (2, 1, [True])
    assert provider.name == "traced-name"  # the cache keys stay the trace's


def _complete_at(provider: Any, request: Any, calls: Any) -> None:
    """``provider.complete(request)`` as if the activation had recorded so many events."""
    from types import SimpleNamespace

    from beam_agents import _running
    from beam_agents.errors import CacheMissError as Miss

    for events, answered in calls:
        token = _running.ACTIVATION.set(SimpleNamespace(events=[None] * events))
        try:
            if answered:
                assert provider.complete(request).text == "live"
            else:
                with pytest.raises(Miss):
                    provider.complete(request)
        finally:
            _running.ACTIVATION.reset(token)
