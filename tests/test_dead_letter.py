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
