"""ErrorRecord: the .errors element, and its JSON form for a dead-letter topic."""

from __future__ import annotations

import base64
import json
import pickle

from beam_agents.dead_letter import KEY_MISMATCH
from beam_agents.pipeline import ERROR_CODES, ErrorRecord


def test_json_form_is_canonical_and_carries_the_raw_bytes() -> None:
    record = ErrorRecord(
        KEY_MISMATCH, "keys differ", entity_key=b"k\x00", envelope_id="e1", raw=b"\xff"
    )
    data = record.to_json_bytes()
    assert data == record.to_json_bytes()
    parsed = json.loads(data)
    assert parsed["code"] == KEY_MISMATCH and parsed["envelope_id"] == "e1"
    assert base64.b64decode(parsed["raw_b64"]) == b"\xff"
    assert base64.b64decode(parsed["entity_key_b64"]) == b"k\x00"
    assert list(parsed) == sorted(parsed)


def test_records_pickle_for_beam_and_codes_are_distinct() -> None:
    record = ErrorRecord(ERROR_CODES[0], "why")
    assert pickle.loads(pickle.dumps(record)) == record
    assert len(set(ERROR_CODES)) == len(ERROR_CODES) == 8


def test_a_code_given_as_text_becomes_its_member_and_an_unknown_one_is_refused() -> None:
    import pytest

    from beam_agents.pipeline import ErrorCode

    record = ErrorRecord("no_body", "empty envelope")
    assert record.code is ErrorCode.NO_BODY
    assert json.loads(record.to_json_bytes())["code"] == "no_body"
    with pytest.raises(ValueError, match="no_such_code"):
        ErrorRecord("no_such_code", "why")


def test_a_failed_activations_record_round_trips_through_its_json() -> None:
    from beam_agents.dead_letter import RETRIES_EXHAUSTED, Attempt

    record = ErrorRecord(
        RETRIES_EXHAUSTED,
        "envelope 'e1' failed on every one of its 2 attempts",
        entity_key=b"k\x00",
        envelope_id="e1",
        raw=b"\x0a\x01k",
        seq=7,
        error_type="beam_agents.errors.ProviderRateLimitError",
        error="slow down",
        attempts=(
            Attempt(6, 1000, "beam_agents.errors.ProviderRateLimitError", "slow", True, 10_000),
            Attempt(7, 11_000, "beam_agents.errors.ProviderRateLimitError", "slow", True, 0),
        ),
    )
    data = record.to_json_bytes()
    assert ErrorRecord.from_json_bytes(data) == record
    assert json.loads(data)["attempts"][0] == {
        "seq": 6, "now_ms": 1000, "error_type": "beam_agents.errors.ProviderRateLimitError",
        "error": "slow", "transient": True, "wait_ms": 10_000,
    }  # fmt: skip
    assert record.resendable
    assert pickle.loads(pickle.dumps(record)) == record


def test_only_records_whose_envelope_can_succeed_again_are_resendable() -> None:
    from beam_agents.dead_letter import RESENDABLE_CODES

    for code in ERROR_CODES:
        assert ErrorRecord(code, "why", raw=b"\x0a").resendable is (code in RESENDABLE_CODES)
        assert not ErrorRecord(code, "why").resendable  # no envelope to re-send
    assert {str(c) for c in RESENDABLE_CODES} == {
        "activation_failed", "retries_exhausted", "inbox_overflow", "state_unreadable",
    }  # fmt: skip


def test_what_is_not_a_record_is_refused_by_name() -> None:
    import pytest

    for data, says in [
        (b"not json", "not JSON"),
        (b"[1]", "JSON list"),
        (b'{"code": "no_body"}', "the field 'reason' is missing"),
        (b'{"code": "nope", "reason": "", "entity_key_b64": "", "envelope_id": "", "raw_b64": ""}',
         "nope"),
        (b'{"code": "no_body", "reason": "", "entity_key_b64": "!!", "envelope_id": "", "raw_b64": ""}',
         "not a dead-letter record"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=says):
            ErrorRecord.from_json_bytes(data)


def test_resend_envelope_stamps_a_new_event_time_and_keeps_everything_else() -> None:
    import pytest

    from beam_agents._protos import AgentEnvelope
    from beam_agents.dead_letter import ACTIVATION_FAILED
    from beam_agents.testing import event_envelope

    original = event_envelope(b"k", "message", b"refund A-1", time_ms=1000, envelope_id="m-1")
    record = ErrorRecord(ACTIVATION_FAILED, "bug", entity_key=b"k", envelope_id="m-1",
                         raw=original.SerializeToString(), seq=3)  # fmt: skip
    resent = AgentEnvelope.FromString(record.resend_envelope(event_time_ms=99_000))
    assert resent.event_time_ms == 99_000
    resent.event_time_ms = 1000
    assert resent == original
    with pytest.raises(ValueError, match="not resendable: the envelope must change first"):
        ErrorRecord(KEY_MISMATCH, "keys differ", raw=record.raw).resend_envelope(event_time_ms=1)
    with pytest.raises(ValueError, match="not resendable: it carries no envelope"):
        ErrorRecord(ACTIVATION_FAILED, "timeout resume").resend_envelope(event_time_ms=1)
    with pytest.raises(ValueError, match="must be an int"):
        record.resend_envelope(event_time_ms=1.5)  # type: ignore[arg-type]
    assert json.loads(record.to_json_bytes())["resendable"] is True


def test_a_dict_that_is_no_record_is_refused_naming_what_is_wrong() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"^not a dead-letter record: the field 'reason' is missing"):
        ErrorRecord.from_dict({"code": "no_body"})  # it read "(KeyError: 'reason')"
    with pytest.raises(ValueError, match=r"a \*_b64 field is not base64"):
        ErrorRecord.from_dict({"code": "no_body", "reason": "x", "entity_key_b64": "!!",
                               "envelope_id": "", "raw_b64": ""})  # fmt: skip
    with pytest.raises(ValueError, match="a JSON list, not an object"):
        ErrorRecord.from_json_bytes(b"[1]")
