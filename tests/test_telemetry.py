"""beam_agents.telemetry: wall times beside the trace, never in it."""

from __future__ import annotations

import time

from core_agents import AGENT, TOOLS, make_provider

from beam_agents import AgentConfig
from beam_agents.key_step import Emit
from beam_agents.telemetry import ActivationTelemetry, LlmCallDetails, measure_activation
from beam_agents.testing import PipelineKey, event_envelope

KEY = b"customer-42"
T0 = 1_734_000_000_000


def _trace_batches(measured: bool) -> tuple[list[object], list[ActivationTelemetry]]:
    key = PipelineKey(AGENT, TOOLS, AgentConfig(provider_factory=make_provider), entity_key=KEY)
    batches: list[object] = []
    measurements: list[ActivationTelemetry] = []
    for i, text in enumerate(["where is A1?", "refund A1 please"]):
        envelope = event_envelope(KEY, "msg", text.encode(), time_ms=T0 + i)
        if measured:
            with measure_activation(agent_name="SupportAgent", provider_name="scripted") as m:
                batches.extend(key.send(envelope).of(Emit.TRACE_BATCHES))
            measurements.append(m)
        else:
            batches.extend(key.send(envelope).of(Emit.TRACE_BATCHES))
    return batches, measurements


def test_a_measured_activation_traces_the_very_same_bytes() -> None:
    plain, _ = _trace_batches(measured=False)
    before = time.time_ns()
    measured, telemetry = _trace_batches(measured=True)
    after = time.time_ns()
    assert measured == plain
    for batch, each in zip(measured, telemetry, strict=True):
        events = batch[1]  # type: ignore[index]
        assert len(each.spans) == len(events)
        root = each.span_unix_ns(0)
        assert root is not None and before <= root[0] <= root[1] <= after
        assert 1 in each.llm_calls  # the model call, by its event index


def test_nothing_is_measured_outside_a_measurement() -> None:
    """Replay opens none: the hooks record nothing, and no measurement leaks to the next."""
    _trace_batches(measured=False)
    with measure_activation(agent_name="a", provider_name="p") as m:
        pass
    assert m.spans == [] and m.llm_calls == {}


def test_telemetry_round_trips_through_its_encoding() -> None:
    telemetry = ActivationTelemetry(
        started_unix_ns=1_800_000_000_000_000_000,
        agent_name="SupportAgent",
        provider_name="openai",
        spans=[(0, 10), (2, 8)],
        llm_calls={1: LlmCallDetails(response_id="r", temperature=0.5, stop_sequences=("x",))},
        finished_ns=12,
    )
    assert ActivationTelemetry.decode(telemetry.encode()) == telemetry
    assert telemetry.span_unix_ns(0) == (1_800_000_000_000_000_000, 1_800_000_000_000_000_012)
    assert telemetry.span_unix_ns(5) is None
    assert ActivationTelemetry.decode(b"") is None
    assert ActivationTelemetry.decode(b"not json") is None
    assert ActivationTelemetry.decode(b'{"v": 99}') is None
