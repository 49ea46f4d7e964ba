"""``ls``: one row per traced activation, and whether the snapshot can replay it (the engine agrees)."""

from __future__ import annotations

import json

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import AgentEnvelope
from beam_agents.activation import ActivationCommit
from beam_agents.llm_cache import CachePolicy
from beam_agents.replay.engine import replay
from beam_agents.replay.incidents import listing as ls
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import Verdict
from beam_agents.testing import approval_envelope, event_envelope, tool_result_envelope

OTHER = b"customer-other"
HOUR_MS = 3_600_000


def ask(text: str, at: int, type: str = "ask", key: bytes = KEY) -> AgentEnvelope:
    return event_envelope(key, type, text.encode(), time_ms=at)


def history(**kw: object) -> KeyHistory:
    return KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), **kw)  # type: ignore[arg-type]


def replay_verdict(h: KeyHistory, seq: int, event: AgentEnvelope | None) -> Verdict:
    return replay(options(h.export(), h.trace_bytes(), event=event, seq=seq)).verdict


def test_every_key_with_its_count_and_the_columns() -> None:
    a = history()
    refund = ask("refund please", T0, "refund")
    first = a.send(refund)
    assert isinstance(first, ActivationCommit)
    intent = first.approval_requests[0].intent_id
    approve = approval_envelope(KEY, intent, approved=True, time_ms=T0 + 1000)
    a.send(approve)
    a.send(tool_result_envelope(KEY, intent, time_ms=T0 + 2000, payload=b"{}"))
    a.send(ask("crash", T0 + 3000, "boom"))
    b = history(key=OTHER)
    b.send(ask("hi", T0, key=OTHER))
    listing = ls.list_activations([a.trace_bytes(), b.trace_bytes()])
    assert listing.keys == [KEY, OTHER]
    got = [
        (r.entity_key, r.seq, r.kind, r.trigger, r.outcome, r.model_calls, r.staged_intents)
        for r in listing.rows
    ]
    assert got == [
        (KEY, 1, "start", "event", "suspended", 1, 1),
        (KEY, 2, "resume", "approval", "released", 0, 0),
        (KEY, 3, "resume", "tool_result", "done", 1, 0),
        (KEY, 4, "start", "event", "failed", 0, 0),
        (OTHER, 1, "start", "event", "done", 1, 0),
    ]
    assert listing.rows[0].envelope_id == refund.envelope_id
    assert listing.rows[3].error_type == "ValueError"
    text = ls.render_listing(listing)
    assert "key 637573746f6d65722d3432 (customer-42): 4 traced activation(s)" in text
    assert "5 traced activation(s) of 2 key(s)" in text
    doc = ls.listing_json(listing)
    assert json.loads(json.dumps(doc))["rows"][4]["entity_key"] == OTHER.hex()
    assert all(r.replay is None for r in listing.rows)  # no snapshot, no judgement


@pytest.mark.parametrize(
    ("text", "expected"),
    [("637573746f6d65722d3432", KEY), ("customer-42", KEY), ("customer-other", OTHER)],
)
def test_key_by_hex_or_text(text: str, expected: bytes) -> None:
    a, b = history(), history(key=OTHER)
    a.send(ask("x", T0))
    b.send(ask("y", T0, key=OTHER))
    listing = ls.list_activations([a.trace_bytes(), b.trace_bytes()], key=text)
    assert {r.entity_key for r in listing.rows} == {expected}


def test_an_unknown_or_ambiguous_key_is_refused() -> None:
    a = history(key=b"ab")
    a.send(ask("x", T0, key=b"ab"))
    with pytest.raises(InputError, match="no activation of that key"):
        ls.list_activations([a.trace_bytes()], key="nope")
    both = history(key=bytes.fromhex("ab"))
    both.send(ask("y", T0, key=bytes.fromhex("ab")))
    with pytest.raises(InputError, match="names two traced keys"):
        ls.list_activations([a.trace_bytes(), both.trace_bytes()], key="ab")


def test_replayability_words_agree_with_the_engine() -> None:
    h = history(cache_policy=CachePolicy(max_entries=2))
    sent = [
        ask("q1", T0),  # seq 1: evicted by seqs 3 and 4 (LRU 2)
        ask("q2", T0 + 1000),  # seq 2: evicted
        ask("crash later", T0 + 2000, "boom_late"),  # seq 3: failed after a billed call
        ask("q3", T0 + 3000),  # seq 4: cached
        ask("q4", T0 + 4000),  # seq 5: cached
        ask("crash", T0 + 5000, "boom"),  # seq 6: failed before any call: cached (0 of 0)
    ]
    for envelope in sent:
        h.send(envelope)
    listing = ls.list_activations([h.trace_bytes()], snapshot=h.export())
    words = [r.replay for r in listing.rows]
    assert words == [ls.EVICTED, ls.EVICTED, ls.NOT_COMMITTED, ls.CACHED, ls.CACHED, ls.CACHED]
    expected = {
        ls.CACHED: Verdict.REPRODUCED,
        ls.EVICTED: Verdict.IRREPRODUCIBLE,
        ls.NOT_COMMITTED: Verdict.IRREPRODUCIBLE,
    }
    for row, envelope in zip(listing.rows, sent, strict=True):
        assert replay_verdict(h, row.seq, envelope) is expected[row.replay], row  # type: ignore[index]


def test_minted_later_after_snapshot_and_pending_resume() -> None:
    h = history()
    first = ask("q", T0)
    h.send(first)
    h.send(ask("q", T0 + 7 * HOUR_MS))  # expired, re-inserted by seq 2
    snapshot_at_2 = h.export()
    refund = ask("refund please", T0 + 8 * HOUR_MS, "refund")
    h.send(refund)  # seq 3, suspends
    listing = ls.list_activations([h.trace_bytes()], snapshot=snapshot_at_2)
    assert [r.replay for r in listing.rows] == [ls.MINTED_LATER, ls.CACHED, ls.AFTER_SNAPSHOT]
    assert replay_verdict(h, 1, first) is Verdict.IRREPRODUCIBLE
    pending = ls.list_activations([h.trace_bytes()], snapshot=h.export())
    last = pending.rows[-1]
    assert (last.seq, last.outcome, last.replay) == (4, "pending", ls.PENDING_RESUME)
    assert "awaiting" in last.replay_detail
    assert "4 traced" not in ls.render_listing(pending)  # the pending row is not counted
    with pytest.raises(InputError, match="not the snapshot's key"):
        ls.list_activations([h.trace_bytes()], snapshot=snapshot_at_2, key="customer-other")


def test_control_characters_in_ids_are_escaped() -> None:
    h = history()
    h.send(event_envelope(KEY, "ask", b"x", time_ms=T0, envelope_id="evil\x1b[2Jid"))
    text = ls.render_listing(ls.list_activations([h.trace_bytes()]))
    assert "\x1b" not in text and "evil\\x1b[2Jid" in text


def test_recorded_tool_results_are_judged_like_responses() -> None:
    """A later, different answer of a recorded tool: the earlier activation is minted-later."""
    import recorded_agents as rec

    service = rec.OrderService()
    service.orders["A1"] = {"order_id": "A1", "status": "shipped"}
    rec.SERVICE_URL = service.url
    try:
        h = KeyHistory(rec.AGENT, rec.TOOLS, rec.make_provider())
        first = event_envelope(KEY, "ask", b"A1", time_ms=T0)
        h.send(first)
        service.orders["A1"] = {"order_id": "A1", "status": "delivered"}
        second = event_envelope(KEY, "ask", b"A1", time_ms=T0 + 1000)
        h.send(second)
    finally:
        service.stop()
        rec.SERVICE_URL = ""
    listing = ls.list_activations([h.trace_bytes()], snapshot=h.export())
    assert [r.replay for r in listing.rows] == [ls.MINTED_LATER, ls.CACHED]
    assert "recorded tool call 'read_order'" in listing.rows[0].replay_detail
    assert "1 of 1 recorded tool results" in listing.rows[1].replay_detail
    for row, event in zip(listing.rows, (first, second), strict=True):
        result = replay(
            options(h.export(), h.trace_bytes(), event=event, seq=row.seq,
                    agent="recorded_agents:AGENT", registry="recorded_agents:TOOLS")
        )  # fmt: skip
        expected = Verdict.REPRODUCED if row.replay == ls.CACHED else Verdict.IRREPRODUCIBLE
        assert result.verdict is expected, result.reason


def test_a_key_is_labelled_as_every_surface_labels_it() -> None:
    """ls showed a key's text only when it was ASCII; the TUI and the Markdown report when it
    is printable UTF-8. One label set now (``reporting.labels``)."""
    from beam_agents.replay.reporting.labels import key_label

    key = "café-7".encode()
    h = history(key=key)
    h.send(ask("bonjour", T0, key=key))
    text = ls.render_listing(ls.list_activations([h.trace_bytes()]))
    assert f"key {key.hex()} (café-7): 1 traced activation(s)" in text
    assert key_label(key) == f"{key.hex()} (café-7)"
