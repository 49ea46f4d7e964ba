"""beam_agents.testing.PipelineKey: one key driven like the pipeline, and its refusals."""

from __future__ import annotations

import pytest
from core_agents import AGENT, TOOLS, make_provider

from beam_agents import AgentConfig, HitlPolicy
from beam_agents.testing import PipelineKey, event_envelope

KEY = b"customer-42"
T0 = 1_734_000_000_000
HOUR = 3_600_000
CONFIG = AgentConfig(provider_factory=make_provider, hitl=HitlPolicy(hitl_timeout_ms=HOUR))


def new_key() -> PipelineKey:
    return PipelineKey(AGENT, TOOLS, CONFIG, entity_key=KEY)


def test_the_timer_follows_the_commits_and_firing_it_runs_the_timeout_and_spends_it() -> None:
    key = new_key()
    key.send(event_envelope(KEY, "message", b"refund", time_ms=T0))
    assert key.timer_ms == T0 + HOUR and key.seq == 1
    fired = key.fire_timer()
    [resume] = fired.activations
    assert resume.seq == 2 and key.state.continuation is None
    assert key.timer_ms is None
    with pytest.raises(ValueError, match="has no HITL timer set"):
        key.fire_timer()


def test_the_provider_comes_from_the_config_once() -> None:
    key = new_key()
    key.send(event_envelope(KEY, "message", b"hi", time_ms=T0))
    key.send(event_envelope(KEY, "message", b"again", time_ms=T0 + 1))
    assert key.provider.calls == 2  # type: ignore[attr-defined]


def test_an_envelope_for_another_key_is_refused_naming_both_keys() -> None:
    key = new_key()
    with pytest.raises(ValueError, match=r"b'customer-42'.*b'customer-7'.*one PipelineKey per key"):
        key.send(event_envelope(b"customer-7", "message", b"hi", time_ms=T0))
    assert key.seq == 0


def test_raw_bytes_go_to_the_step_as_read_and_bad_ones_become_an_error_record() -> None:
    key = new_key()
    ok = key.send(event_envelope(KEY, "message", b"hi", time_ms=T0).SerializeToString())
    assert ok.outputs == (b"answer to: hi",)
    [error] = key.send(b"\xff\xff").errors
    assert error.code == "malformed_envelope" and key.seq == 1


def test_bytes_for_another_key_or_no_key_are_refused_as_the_parsed_envelope_is() -> None:
    # Bytes skipped the key check and ran under this key, tracing another key's event as its own.
    key = new_key()
    other = event_envelope(b"customer-7", "message", b"hi", time_ms=T0).SerializeToString()
    with pytest.raises(ValueError, match=r"b'customer-42'.*b'customer-7'.*one PipelineKey per key"):
        key.send(other)
    with pytest.raises(ValueError, match=r"empty entity_key; RunAgent refuses it on \.errors"):
        key.send(b"")  # parses: an envelope with no key and no body
    assert key.seq == 0 and key.inbox == []


def test_a_key_or_an_envelope_of_the_wrong_type_is_a_type_error_saying_what_is_expected() -> None:
    with pytest.raises(TypeError, match=r"entity_key= must be the key as non-empty bytes.*'customer-42'"):
        PipelineKey(AGENT, TOOLS, CONFIG, entity_key="customer-42")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="entity_key= must be the key as non-empty bytes"):
        PipelineKey(AGENT, TOOLS, CONFIG, entity_key=b"")
    with pytest.raises(TypeError, match=r"takes an AgentEnvelope .* or its serialized bytes, got str"):
        new_key().send("hello")  # type: ignore[arg-type]
