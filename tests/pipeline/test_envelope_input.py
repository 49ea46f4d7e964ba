"""Routing input elements: bytes or (key, bytes) in, (entity_key, bytes) or an ErrorRecord out."""

from __future__ import annotations

import pytest

from beam_agents.dead_letter import KEY_MISMATCH, MALFORMED_ENVELOPE
from beam_agents.pipeline import ErrorRecord
from beam_agents.pipeline.envelope_input import route_envelope
from beam_agents.testing import event_envelope

KEY = b"customer-42"
RAW = event_envelope(KEY, "echo", b"a", time_ms=1).SerializeToString()


@pytest.mark.parametrize(
    "element",
    [RAW, bytearray(RAW), memoryview(RAW), (KEY, RAW), (None, RAW), (bytearray(KEY), RAW)],
)
def test_envelope_bytes_are_keyed_by_their_entity_key(element: object) -> None:
    assert route_envelope(element) == (KEY, RAW)


def test_a_key_that_differs_from_the_envelope_is_refused_with_both_keys() -> None:
    refused = route_envelope((b"other", RAW))
    assert isinstance(refused, ErrorRecord)
    assert refused.code == KEY_MISMATCH
    assert refused.raw == RAW and refused.entity_key == KEY
    assert b"other".hex() in refused.reason and KEY.hex() in refused.reason


@pytest.mark.parametrize(
    ("element", "raw", "named"),
    [
        (b"\xff\xff", b"\xff\xff", "do not parse"),
        ("a string", b"", "type str"),
        ((KEY, "text"), b"", "value is a str"),
        (("text-key", RAW), RAW, "key is a str"),
        ((KEY, RAW, RAW), b"", "type tuple"),
        (event_envelope(b"", "echo", time_ms=1).SerializeToString(), None, "empty entity_key"),
    ],
)
def test_anything_else_is_refused_as_malformed_never_raised(
    element: object, raw: bytes | None, named: str
) -> None:
    refused = route_envelope(element)
    assert isinstance(refused, ErrorRecord)
    assert refused.code == MALFORMED_ENVELOPE
    assert named in refused.reason
    if raw is not None:
        assert refused.raw == raw


def test_a_refused_element_is_logged_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from beam_agents.pipeline.envelope_input import RouteEnvelopes

    caplog.set_level(logging.WARNING, logger="beam_agents")
    [refused] = list(RouteEnvelopes().process(b"\xff\xff"))
    [logged] = caplog.records
    assert logged.name == "beam_agents" and logged.levelno == logging.WARNING
    assert "dead letter malformed_envelope" in logged.getMessage()
    assert refused.value.reason in logged.getMessage()
