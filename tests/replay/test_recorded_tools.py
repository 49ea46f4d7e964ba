"""Recorded tools in replay: a read-only tool that reads a real HTTP service is recorded by the
activation and served from the snapshot's tool cache, never executed, with the service stopped."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import recorded_agents as rec
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import (
    AgentEnvelope,
    StateSnapshot,
    ToolCacheBody,
    TraceEvent,
    VersionedBlob,
)
from beam_agents.activation import ActivationCommit, ActivationFailure
from beam_agents.context import derive_intent_id
from beam_agents.key_state import StateCells
from beam_agents.replay.engine import replay
from beam_agents.replay.reporting.json_doc import render_json
from beam_agents.replay.reporting.text import render_report
from beam_agents.replay.result import Mark, ReplayResult, Verdict
from beam_agents.testing import approval_envelope, event_envelope
from beam_agents.tool_cache import (
    MAX_TOOL_CACHE_ENTRIES,
    MAX_TOOL_CACHE_TOTAL_BYTES,
    ToolCachePolicy,
    tool_cache_key,
)
from beam_agents.trace_events import (
    ATTR_ARGS_SHA256,
    ATTR_RESULT_SHA256,
    ATTR_TOOL_DIGEST_ONLY,
    ATTR_TOOL_NAME,
    ATTR_TOOL_RECORDED,
    ATTR_TOOL_RESULT_IS_BYTES,
)

AGENT = "recorded_agents:AGENT"
REGISTRY = "recorded_agents:TOOLS"


@pytest.fixture
def service() -> Iterator[rec.OrderService]:
    running = rec.OrderService()
    running.orders["A1"] = {"order_id": "A1", "status": "shipped", "items": [1, 2]}
    running.orders["A1-X"] = {"order_id": "A1-X", "status": "pending"}
    rec.SERVICE_URL = running.url
    try:
        yield running
    finally:
        running.stop()
        rec.SERVICE_URL = ""


@pytest.fixture
def history() -> KeyHistory:
    return KeyHistory(rec.AGENT, rec.TOOLS, rec.make_provider())


def ask(order_id: str = "A1", *, at: int = T0, type: str = "ask") -> AgentEnvelope:
    return event_envelope(KEY, type, order_id.encode(), time_ms=at)


def run_replay(
    history: KeyHistory,
    event: AgentEnvelope,
    *,
    seq: int | None = None,
    agent: str = AGENT,
    registry: str = REGISTRY,
) -> ReplayResult:
    return replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent=agent,
            registry=registry,
            seq=seq,
        )
    )


def tool_calls(events: tuple[TraceEvent, ...] | list[TraceEvent]) -> list[TraceEvent]:
    return [e for e in events if e.kind == TraceEvent.TOOL_CALL]


def test_reproduces_with_the_service_stopped(
    history: KeyHistory, service: rec.OrderService
) -> None:
    event = ask()
    result = history.send(event)
    assert isinstance(result, ActivationCommit)
    assert service.requests == 1
    (call,) = tool_calls(result.trace)
    assert call.attributes[ATTR_TOOL_RECORDED].bool_value is True
    assert ATTR_TOOL_DIGEST_ONLY not in call.attributes
    assert result.cells.tool_cache, "the commit holds the recorded result"
    service.stop()

    replayed = run_replay(history, event)

    assert replayed.verdict is Verdict.REPRODUCED, replayed.reason
    assert replayed.exit_code == 0
    assert service.requests == 1, "replay never runs a recorded tool"
    assert replayed.network_attempts == ()
    (served,) = replayed.served_tool_events
    pair = replayed.events[served]
    assert pair.replayed is not None and pair.replayed.kind == TraceEvent.TOOL_CALL
    assert pair.replayed.attributes[ATTR_RESULT_SHA256] == call.attributes[ATTR_RESULT_SHA256]
    assert replayed.state is not None
    (entry,) = replayed.state.tool_cache_entries
    assert (entry.tool, entry.status, entry.served_in_activation) == (
        "read_order",
        "servable",
        True,
    )
    assert replayed.state.blob_versions["tool_cache"] == 1
    (value,) = [v for v in replayed.values if v.event_index == served and v.path == "result"]
    assert value.mark is Mark.VERIFIED and value.value == service.orders["A1"]
    report = render_report(replayed)
    assert "1 call(s) served from the tool cache" in report
    assert f"event {served} TOOL_CALL 'read_order'  cache hit" in report
    assert "[verified]" in report.split("recorded tools:")[1].split("registry:")[0]
    document = json.loads(render_json(replayed))
    assert document["served_tool_events"] == [served]
    assert document["state"]["tool_cache_entries"][0]["status"] == "servable"


def test_a_tampered_recorded_result_diverges_and_is_never_verified(
    history: KeyHistory, service: rec.OrderService
) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    blob = VersionedBlob.FromString(snapshot.tool_cache)
    body = ToolCacheBody.FromString(blob.body)
    body.entries[0].result = b'{"order_id":"A1","status":"refunded"}'  # its digest kept as recorded
    blob.body = body.SerializeToString(deterministic=True)
    snapshot.tool_cache = blob.SerializeToString(deterministic=True)
    result = replay(
        options(
            snapshot.SerializeToString(deterministic=True),
            history.trace_bytes(),
            event=event,
            agent=AGENT,
            registry=REGISTRY,
        )
    )
    assert result.verdict is Verdict.DIVERGED, result.reason
    divergence = result.first_divergence
    assert divergence is not None and divergence.kind == "TOOL_CALL"
    assert [row.path for row in divergence.fields] == [f"attributes[{ATTR_RESULT_SHA256!r}]"]
    (value,) = [
        v for v in result.values if v.event_index == divergence.index and v.path == "result"
    ]
    assert value.mark is Mark.DIFFERS


@pytest.mark.parametrize("flipped_tool", ["read_order", "read_label"])
def test_a_flipped_result_kind_diverges_at_the_tool_call(
    history: KeyHistory, service: rec.OrderService, flipped_tool: str
) -> None:
    # The same bytes served as bytes instead of the JSON value (or the reverse) hash alike;
    # an agent that only tests truthiness would replay "reproduced" with a value production
    # never saw unless the trace covers the result's kind.
    event = ask(type="peek")
    recorded = history.send(event)
    assert isinstance(recorded, ActivationCommit)
    kinds = {
        c.attributes[ATTR_TOOL_NAME].string_value: ATTR_TOOL_RESULT_IS_BYTES in c.attributes
        for c in tool_calls(recorded.trace)
    }
    assert kinds == {"read_order": False, "read_label": True}
    assert run_replay(history, event).verdict is Verdict.REPRODUCED
    snapshot = StateSnapshot.FromString(history.export())
    blob = VersionedBlob.FromString(snapshot.tool_cache)
    body = ToolCacheBody.FromString(blob.body)
    (entry,) = [e for e in body.entries if e.tool == flipped_tool]
    entry.result_is_bytes = not entry.result_is_bytes  # data and its digest kept as recorded
    blob.body = body.SerializeToString(deterministic=True)
    snapshot.tool_cache = blob.SerializeToString(deterministic=True)
    result = replay(
        options(
            snapshot.SerializeToString(deterministic=True),
            history.trace_bytes(),
            event=event,
            agent=AGENT,
            registry=REGISTRY,
        )
    )
    assert result.verdict is Verdict.DIVERGED, result.reason
    divergence = result.first_divergence
    assert divergence is not None and divergence.kind == "TOOL_CALL"
    assert [row.path for row in divergence.fields] == [
        f"attributes[{ATTR_TOOL_RESULT_IS_BYTES!r}]"
    ]
    values = [v for v in result.values if v.event_index == divergence.index and v.path == "result"]
    assert all(v.mark is not Mark.VERIFIED for v in values)


@pytest.mark.parametrize(
    "result",
    [
        b'{"order_id":"A1","status":"\\ud800"}',  # a lone surrogate: no UTF-8 for its digest
        b'{"order_id":"A1","status":"\\u001b]0;owned\\u0007\\u202e"}',
    ],
)
def test_a_tampered_result_no_pipeline_could_record_diverges_not_internal_error(
    history: KeyHistory, service: rec.OrderService, result: bytes
) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    blob = VersionedBlob.FromString(snapshot.tool_cache)
    body = ToolCacheBody.FromString(blob.body)
    body.entries[0].result = result
    blob.body = body.SerializeToString(deterministic=True)
    snapshot.tool_cache = blob.SerializeToString(deterministic=True)
    replayed = replay(
        options(
            snapshot.SerializeToString(deterministic=True),
            history.trace_bytes(),
            event=event,
            agent=AGENT,
            registry=REGISTRY,
        )
    )
    assert replayed.verdict is Verdict.DIVERGED, replayed.reason
    divergence = replayed.first_divergence
    assert divergence is not None and divergence.kind == "TOOL_CALL"
    report = render_report(replayed, full_values=True)
    assert "\x1b" not in report and "\u202e" not in report and "\ud800" not in report
    report.encode("utf-8")  # printable: no lone surrogate reaches the terminal


def test_the_same_tool_not_recorded_is_blocked_by_the_network_guard(
    history: KeyHistory, service: rec.OrderService
) -> None:
    plain = KeyHistory(rec.AGENT, rec.TOOLS_PLAIN, rec.make_provider())
    event = ask()
    assert isinstance(plain.send(event), ActivationCommit)
    (call,) = tool_calls(plain.trace)
    assert ATTR_TOOL_RECORDED not in call.attributes, "plain tools' events are unchanged"
    assert not plain.cells.tool_cache, "a key that records nothing keeps an empty cell"
    result = run_replay(plain, event, registry="recorded_agents:TOOLS_PLAIN")
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert "network blocked" in result.reason and "read_order" in result.reason


def test_a_changed_argument_misses_naming_the_tool_digest_and_argument(
    history: KeyHistory, service: rec.OrderService
) -> None:
    event = ask()
    history.send(event)
    result = run_replay(history, event, agent="recorded_agents:AGENT_OTHER_ARGS")
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.exit_code == 3
    miss = result.tool_miss
    assert miss is not None
    assert miss.tool == "read_order" and miss.status == "absent"
    assert miss.differences == ("argument 'order_id' differs",)
    (traced_call,) = tool_calls(history.trace)
    assert miss.traced_args_sha256 == traced_call.attributes[ATTR_ARGS_SHA256].string_value
    assert miss.args_sha256 != miss.traced_args_sha256
    for needle in (
        "read_order",
        miss.args_sha256,
        "argument 'order_id' differs",
        "arguments changed",
    ):
        assert needle in result.reason, result.reason
    assert service.requests == 1


def test_a_changed_argument_that_was_recorded_too_diverges_at_the_tool_call(
    history: KeyHistory, service: rec.OrderService
) -> None:
    history.send(ask("A1-X"))  # records read_order(order_id="A1-X")
    second = ask(at=T0 + 1_000)
    history.send(second)
    result = run_replay(history, second, seq=2, agent="recorded_agents:AGENT_OTHER_ARGS")
    assert result.verdict is Verdict.DIVERGED, result.reason
    divergence = result.first_divergence
    assert divergence is not None and divergence.kind == "TOOL_CALL"
    paths = {row.path for row in divergence.fields}
    assert f"attributes[{ATTR_ARGS_SHA256!r}]" in paths, paths


def test_digest_only_entries_are_irreproducible(service: rec.OrderService) -> None:
    history = KeyHistory(
        rec.AGENT,
        rec.TOOLS,
        rec.make_provider(),
        tool_cache_policy=ToolCachePolicy(retain_payloads=False),
    )
    event = ask()
    result = history.send(event)
    (call,) = tool_calls(result.trace)
    assert call.attributes[ATTR_TOOL_DIGEST_ONLY].bool_value is True
    replayed = run_replay(history, event)
    assert replayed.verdict is Verdict.IRREPRODUCIBLE, replayed.reason
    assert replayed.tool_miss is not None and replayed.tool_miss.status == "digest_only"
    assert "digest-only" in replayed.reason


def test_a_later_different_answer_makes_the_earlier_activation_irreproducible(
    history: KeyHistory, service: rec.OrderService
) -> None:
    first = ask()
    history.send(first)
    service.orders["A1"] = {"order_id": "A1", "status": "delivered"}
    second = ask(at=T0 + 1_000)
    history.send(second)
    older = run_replay(history, first, seq=1)
    assert older.verdict is Verdict.IRREPRODUCIBLE, older.reason
    assert older.tool_miss is not None and older.tool_miss.status == "minted_later"
    assert "later activation (seq 2)" in older.reason, older.reason
    newer = run_replay(history, second, seq=2)
    assert newer.verdict is Verdict.REPRODUCED, newer.reason


def test_a_later_identical_answer_keeps_the_earlier_activation_replayable(
    history: KeyHistory, service: rec.OrderService
) -> None:
    first = ask()
    history.send(first)
    history.send(ask(at=T0 + 1_000))
    history.send(ask(at=T0 + 2_000))
    for seq in (1, 2, 3):
        event = first if seq == 1 else ask(at=T0 + (seq - 1) * 1_000)
        result = run_replay(history, event, seq=seq)
        assert result.verdict is Verdict.REPRODUCED, (seq, result.reason)


def test_two_answers_within_one_activation_are_ambiguous(
    history: KeyHistory, service: rec.OrderService
) -> None:
    answers = iter(["shipped", "delivered"])
    original = rec._get_order

    def flipping(order_id: str) -> dict[str, object]:
        return {"order_id": order_id, "status": next(answers)}

    rec._get_order = flipping  # type: ignore[assignment]
    try:
        event = ask(type="twice")
        assert isinstance(history.send(event), ActivationCommit)
    finally:
        rec._get_order = original
    result = run_replay(history, event)
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.tool_miss is not None and result.tool_miss.status == "ambiguous"
    assert "two different results" in result.reason


@pytest.mark.parametrize("event_type", ["bad", "catch"])
def test_a_non_json_recorded_result_fails_the_activation_and_commits_nothing(
    history: KeyHistory, service: rec.OrderService, event_type: str
) -> None:
    history.send(ask())
    before = history.cells
    result = history.send(ask(at=T0 + 1_000, type=event_type))
    assert isinstance(result, ActivationFailure)
    assert result.error_type == "beam_agents.errors.RecordedResultError"
    assert "read_order_raw" in str(result.error) and "set" in str(result.error)
    assert history.cells == before, "a failed activation commits nothing"
    assert result.trace[-1].kind == TraceEvent.ACTIVATION_FAILED


def test_an_oversize_recorded_result_fails_the_activation(service: rec.OrderService) -> None:
    service.orders["A1"] = {"order_id": "A1", "status": "shipped", "blob": "x" * 500}
    history = KeyHistory(
        rec.AGENT,
        rec.TOOLS,
        rec.make_provider(),
        tool_cache_policy=ToolCachePolicy(max_result_bytes=200),
    )
    result = history.send(ask())
    assert isinstance(result, ActivationFailure)
    assert result.error_type == "beam_agents.errors.RecordedResultError"
    assert "max_result_bytes (200)" in str(result.error)
    assert history.cells == StateCells()


def _with_tool_cache_blob(snapshot: bytes, blob: bytes) -> bytes:
    parsed = StateSnapshot.FromString(snapshot)
    parsed.tool_cache = blob
    return parsed.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("version", "body", "verdict", "needle"),
    [
        (2, b"", Verdict.USAGE_ERROR, "tool_cache"),
        (0, b"", Verdict.IRREPRODUCIBLE, "migration gap"),
        (1, b"\xff\xff\xff", Verdict.USAGE_ERROR, "corrupt tool_cache"),
    ],
)
def test_newer_gapped_or_corrupt_tool_cache_blobs(
    history: KeyHistory,
    service: rec.OrderService,
    version: int,
    body: bytes,
    verdict: Verdict,
    needle: str,
) -> None:
    event = ask()
    history.send(event)
    blob = VersionedBlob(kind="tool_cache", schema_version=version, body=body)
    snapshot = _with_tool_cache_blob(history.export(), blob.SerializeToString(deterministic=True))
    result = replay(
        options(snapshot, history.trace_bytes(), event=event, agent=AGENT, registry=REGISTRY)
    )
    assert result.verdict is verdict, result.reason
    assert needle in (result.error or result.reason), result.error or result.reason


def test_a_what_if_stops_at_a_recorded_call_that_was_never_recorded(
    history: KeyHistory, service: rec.OrderService
) -> None:
    history.send(ask(type="hold"))
    intent = derive_intent_id(KEY, 1, 0)
    approval = approval_envelope(KEY, intent, approved=False, time_ms=T0 + 5_000)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=approval,
            agent=AGENT,
            registry=REGISTRY,
            what_if=True,
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.exit_code == 3
    assert result.reason.startswith("what-if: seq 2")
    assert result.tool_miss is not None and result.tool_miss.status == "absent"
    assert "recorded tool 'read_order'" in result.reason
    assert service.requests == 0, "neither the hold nor its what-if read the service"


@pytest.mark.parametrize(
    ("field", "value"),
    [("tool", "read_label"), ("args_sha256", "0" * 64), ("args_sha256", "\u00e9" * 64)],
)
def test_an_entry_filed_under_another_calls_key_is_a_corrupt_blob(
    history: KeyHistory, service: rec.OrderService, field: str, value: str
) -> None:
    # Replay serves by cache key alone: an entry whose tool/args disagree with its key
    # would be served for a call it does not record (and name the wrong nearest call).
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    blob = VersionedBlob.FromString(snapshot.tool_cache)
    body = ToolCacheBody.FromString(blob.body)
    setattr(body.entries[0], field, value)
    key = body.entries[0].cache_key
    blob.body = body.SerializeToString(deterministic=True)
    snapshot.tool_cache = blob.SerializeToString(deterministic=True)
    result = replay(
        options(
            snapshot.SerializeToString(deterministic=True),
            history.trace_bytes(),
            event=event,
            agent=AGENT,
            registry=REGISTRY,
        )
    )
    assert result.verdict is Verdict.USAGE_ERROR, result.reason
    message = result.error or result.reason
    assert "corrupt tool_cache" in message and key in message, message


@pytest.mark.parametrize("over", ["entries", "bytes"])
def test_a_tool_cache_over_any_policys_bound_is_refused_naming_it(
    history: KeyHistory, service: rec.OrderService, over: str
) -> None:
    event = ask()
    history.send(event)
    snapshot = StateSnapshot.FromString(history.export())
    blob = VersionedBlob.FromString(snapshot.tool_cache)
    body = ToolCacheBody.FromString(blob.body)
    (entry,) = body.entries
    if over == "entries":
        for i in range(MAX_TOOL_CACHE_ENTRIES):
            extra = body.entries.add()
            extra.CopyFrom(entry)
            extra.args_sha256 = f"{i:064x}"
            extra.cache_key = tool_cache_key(extra.tool, extra.args_sha256)
        needle = f"over the {MAX_TOOL_CACHE_ENTRIES} any ToolCachePolicy allows (max_entries)"
    else:
        entry.result = b'"' + b"x" * MAX_TOOL_CACHE_TOTAL_BYTES + b'"'
        needle = (
            f"over the {MAX_TOOL_CACHE_TOTAL_BYTES} any ToolCachePolicy allows (max_total_bytes)"
        )
    blob.body = body.SerializeToString(deterministic=True)
    snapshot.tool_cache = blob.SerializeToString(deterministic=True)
    result = replay(
        options(
            snapshot.SerializeToString(deterministic=True),
            history.trace_bytes(),
            event=event,
            agent=AGENT,
            registry=REGISTRY,
        )
    )
    assert result.verdict is Verdict.USAGE_ERROR, result.reason
    message = result.error or result.reason
    assert "corrupt tool_cache" in message and needle in message, message
