"""The support-desk example agent, run Beam-free through the DoFn's own per-key step.

The stream is played per key in arrival order through ``PipelineKey`` (SEQ,
commit, inbox, timer as ``AgentDoFn`` handles them); the demo's pipeline and replay tests (tests/test_demo.py)
cover the same agent end to end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from beam_agents import AgentConfig
from beam_agents._protos import AgentEnvelope, LlmRequest, TraceEvent
from beam_agents.activation import (
    ActivationCommit,
    ActivationFailure,
    ActivationResult,
    ReplayHooks,
    run_activation,
)
from beam_agents.agent import Agent
from beam_agents.dead_letter import ErrorRecord
from beam_agents.key_state import KeyState
from beam_agents.provider import UnservableProvider
from beam_agents.testing import PipelineKey, ScriptedProvider, event_envelope
from beam_agents.trace_events import attributes_dict
from examples.support_desk import agent as v1
from examples.support_desk import agent_v2 as v2
from examples.support_desk.conversation import turn_key
from examples.support_desk.model import PROVIDER_NAME, make_provider, respond
from examples.support_desk.orders import T0_MS
from examples.support_desk.prompts import triage_request
from examples.support_desk.stream import (
    BOB,
    BOB_REFUND_INTENT,
    BOB_REFUND_MESSAGE,
    CAROL,
    CAROL_TYPO_MESSAGE,
    FIRST_SEQ,
    INCIDENTS,
    STREAM,
)
from examples.support_desk.tracking import TrackingService


@dataclass
class Desk:
    """Every key's committed state and SEQ after playing a stream, and every result."""

    states: dict[bytes, KeyState] = field(default_factory=dict)
    seqs: dict[bytes, int] = field(default_factory=dict)
    results: dict[tuple[bytes, int], ActivationResult] = field(default_factory=dict)
    errors: list[ErrorRecord] = field(default_factory=list)


def play(stream: tuple[AgentEnvelope, ...], agent: Agent, provider: ScriptedProvider) -> Desk:
    """Each key's envelopes through ``PipelineKey``: the DoFn's own per-key step, without Beam."""
    desk = Desk()
    config = AgentConfig(provider_factory=lambda: provider)
    keys: dict[bytes, PipelineKey] = {}
    for envelope in stream:
        key = envelope.entity_key
        pipeline_key = keys.get(key)
        if pipeline_key is None:
            pipeline_key = keys[key] = PipelineKey(agent, v1.TOOLS, config, entity_key=key)
        step = pipeline_key.send(envelope)
        desk.errors.extend(step.errors)
        for result in step.activations:
            desk.results[(key, result.seq)] = result
        desk.seqs[key] = pipeline_key.seq
        desk.states[key] = pipeline_key.state
    return desk


@pytest.fixture(scope="module")
def desk() -> Desk:
    return play(STREAM, v1.AGENT, make_provider())


def kinds(result: ActivationResult) -> list[str]:
    return [TraceEvent.Kind.Name(event.kind) for event in result.trace]


def test_the_scripted_model_triages_from_the_message_text() -> None:
    answer = respond(triage_request("My order #B-2001 arrived broken, refund please"))
    assert json.loads(answer.text) == {"intent": "refund", "order_id": "B-2001"}
    assert answer.usage.input_tokens > 0 and answer.usage.output_tokens > 0


def test_the_scripted_model_is_deterministic() -> None:
    request = triage_request("Where is my order A-1001?")
    assert respond(request).SerializeToString(deterministic=True) == respond(
        LlmRequest.FromString(request.SerializeToString())
    ).SerializeToString(deterministic=True)


def test_every_envelope_is_accepted_and_carols_typo_is_dead_lettered(desk: Desk) -> None:
    """Nothing is refused; the one activation that fails (agent code raised on Carol's
    typo) has its envelope on .errors, with its seq, to fix and re-send."""
    [record] = desk.errors
    assert (record.code, record.envelope_id, record.seq) == (
        "activation_failed",
        CAROL_TYPO_MESSAGE.envelope_id,
        FIRST_SEQ + 1,
    )
    assert record.error_type == "examples.support_desk.agent.MalformedOrderIdError"
    assert record.raw == CAROL_TYPO_MESSAGE.SerializeToString() and record.resendable


def test_a_status_question_triages_looks_up_tracks_and_drafts(desk: Desk) -> None:
    result = desk.results[(b"customer-alice", FIRST_SEQ)]
    assert isinstance(result, ActivationCommit)
    assert kinds(result) == [
        "ACTIVATION_START",
        "LLM_CALL",
        "TOOL_CALL",
        "TOOL_CALL",
        "LLM_CALL",
        "ACTIVATION_END",
    ]
    track = result.trace[3]
    assert track.name == "track_shipment"
    assert track.attributes["beam_agents.tool.recorded"].bool_value is True
    reply = json.loads(result.outputs[0])["text"]
    assert "A-1001" in reply and "UPS" in reply
    assert "departed facility, Louisville, KY" in reply, "the live scan the service answered"
    assert result.cells.tool_cache, "the answer is recorded in Alice's state"


def test_the_recorded_tool_reads_the_real_http_service(tracking_service: TrackingService) -> None:
    before = tracking_service.requests
    result = play(STREAM, v1.AGENT, make_provider()).results[(b"customer-carol", FIRST_SEQ)]
    assert isinstance(result, ActivationCommit)
    # Alice's and Carol's status questions each asked the running service once.
    assert tracking_service.requests - before == 2
    assert "weather delay, Denver, CO" in json.loads(result.outputs[0])["text"]


def test_a_refund_stages_an_approval_gated_intent_and_suspends(desk: Desk) -> None:
    result = desk.results[(BOB, FIRST_SEQ)]
    assert isinstance(result, ActivationCommit) and result.suspended
    (refund,) = result.approval_requests
    assert refund.intent_id == BOB_REFUND_INTENT  # the id the bundled approval names
    assert json.loads(refund.args)["amount_cents"] == 8_900 + 799  # gold tier: with shipping
    assert [i.tool for i in result.released_intents] == ["send_message"]


def test_the_approval_round_trip_ends_with_a_confirmation(desk: Desk) -> None:
    released = desk.results[(BOB, FIRST_SEQ + 1)]
    assert isinstance(released, ActivationCommit)
    assert [i.intent_id for i in released.released_intents] == [BOB_REFUND_INTENT]
    confirmed = desk.results[(BOB, FIRST_SEQ + 2)]
    assert isinstance(confirmed, ActivationCommit) and not confirmed.suspended
    assert "R-" in json.loads(confirmed.outputs[0])["text"]


def test_a_refund_outside_the_window_stages_nothing(desk: Desk) -> None:
    result = desk.results[(b"customer-dan", FIRST_SEQ)]
    assert isinstance(result, ActivationCommit)
    assert result.approval_requests == () and result.released_intents == ()
    assert "30-day" in json.loads(result.outputs[0])["text"]


def test_a_mistyped_order_id_fails_after_a_billed_triage_call(desk: Desk) -> None:
    result = desk.results[(CAROL, FIRST_SEQ + 1)]
    assert isinstance(result, ActivationFailure)
    assert result.error_type.endswith("MalformedOrderIdError")
    assert kinds(result) == ["ACTIVATION_START", "LLM_CALL", "ACTIVATION_FAILED"]
    assert attributes_dict(result.trace[1])["beam_agents.billed"] is True


def test_memory_keeps_a_seq_stamped_turn_log_across_messages(desk: Desk) -> None:
    memory = desk.states[b"customer-alice"].memory
    # One key per turn, each written once by its own activation (replay judges per key).
    assert sorted(memory) == [turn_key(FIRST_SEQ + i) for i in range(3)]
    turns = [memory[key] for key in sorted(memory)]
    assert [t["seq"] for t in turns] == [FIRST_SEQ, FIRST_SEQ + 1, FIRST_SEQ + 2]
    # The third message names no order: the agent took the last one from memory.
    assert turns[-1]["order_id"] == "A-1002"


def _replay(
    agent: Agent, desk: Desk, key: bytes, seq: int, envelope: AgentEnvelope
) -> ActivationResult:
    # What beam-agents-replay does at its core: the key's *later* state, a provider
    # that serves nothing, cache entries of later activations hidden.
    return run_activation(
        agent,
        v1.TOOLS,
        UnservableProvider(PROVIDER_NAME),
        desk.states[key],
        envelope,
        now_ms=envelope.event_time_ms,
        seq=seq,
        entity_key=key,
        replay=ReplayHooks(visible_through_seq=seq),
    )


def _identity(event: TraceEvent) -> tuple[int, str, dict[str, object]]:
    attributes = attributes_dict(event)
    for normalized in ("beam_agents.cache_hit", "beam_agents.billed"):
        attributes.pop(normalized, None)
    # A re-run from a later state commits that later memory plus its own writes: its memory
    # digest is not comparable with the traced one (docs/replay.md), everything else is.
    attributes.pop("beam_agents.memory_sha256", None)
    return event.kind, event.name, attributes


def test_v1_reruns_the_refund_identically_from_the_later_state(desk: Desk) -> None:
    traced = desk.results[(BOB, FIRST_SEQ)].trace
    rerun = _replay(v1.AGENT, desk, BOB, FIRST_SEQ, BOB_REFUND_MESSAGE).trace
    assert [_identity(e) for e in rerun] == [_identity(e) for e in traced]


def test_v2_reruns_the_refund_with_other_lookup_arguments(desk: Desk) -> None:
    traced = desk.results[(BOB, FIRST_SEQ)].trace
    rerun = _replay(v2.AGENT, desk, BOB, FIRST_SEQ, BOB_REFUND_MESSAGE).trace
    first = next(
        i
        for i, (a, b) in enumerate(zip(traced, rerun, strict=True))
        if _identity(a) != _identity(b)
    )
    assert (TraceEvent.Kind.Name(traced[first].kind), traced[first].name) == (
        "TOOL_CALL",
        "lookup_order",
    )
    differing = {
        k for k, v in _identity(traced[first])[2].items() if _identity(rerun[first])[2].get(k) != v
    }
    assert differing == {"beam_agents.args_sha256"}


def test_the_failed_activation_cannot_be_served_from_the_cache(desk: Desk) -> None:
    rerun = _replay(v1.AGENT, desk, CAROL, FIRST_SEQ + 1, CAROL_TYPO_MESSAGE)
    assert isinstance(rerun, ActivationFailure)
    assert rerun.error_type == "beam_agents.errors.CacheMissError"


def test_v2_answers_customers_exactly_like_v1() -> None:
    # The change is invisible in what customers see; only replay notices it.
    first = play(STREAM, v1.AGENT, make_provider())
    second = play(STREAM, v2.AGENT, make_provider())
    outputs = {k: r.outputs for k, r in first.results.items() if isinstance(r, ActivationCommit)}
    assert outputs == {
        k: r.outputs for k, r in second.results.items() if isinstance(r, ActivationCommit)
    }


def test_incidents_name_the_envelopes_of_the_stream() -> None:
    for incident in INCIDENTS:
        assert incident.event in STREAM and incident.export in STREAM
        assert STREAM.index(incident.event) < STREAM.index(incident.export)


def test_a_message_without_an_order_id_asks_for_it() -> None:
    message = event_envelope(
        b"customer-erin", "customer_message", b"Where is my parcel?", time_ms=T0_MS
    )
    desk = play((message,), v1.AGENT, make_provider())
    result = desk.results[(b"customer-erin", FIRST_SEQ)]
    assert isinstance(result, ActivationCommit)
    assert "order number" in json.loads(result.outputs[0])["text"]
