"""``prove_reference``: a reference run's values fill the traced side only when proved here.

The reference's ``--json`` document comes from a process that ran agent code, so each
test plays what such a process could print: a value swapped behind a claimed digest,
a mark claimed without the digest, a document of another activation.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from beam_agents import canonical_json
from beam_agents._protos import TraceEvent
from beam_agents.replay.judging.reference import ReferenceUnreadable, prove_reference
from beam_agents.trace_events import (
    ATTR_ARGS_SHA256,
    ATTR_CACHE_KEY,
    ATTR_ERROR_TYPE,
    ATTR_OUTPUTS_SHA256,
    ATTR_RESPONSE_SHA256,
    ATTR_RESULT_SHA256,
    ATTR_TOOL_RECORDED,
    ATTR_TOOL_RESULT_IS_BYTES,
)

KEY = b"customer-bob"
PRODUCTION_ARGS = {"order_id": "B-2001"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_sha(value: Any) -> str:
    return sha(canonical_json.dumps(value))


def event(index: int, kind: int, **attributes: str | bool) -> TraceEvent:
    e = TraceEvent(entity_key=KEY, seq=1, index=index, kind=kind)  # type: ignore[arg-type]
    for name, value in attributes.items():
        name = {
            "args": ATTR_ARGS_SHA256,
            "result": ATTR_RESULT_SHA256,
            "response": ATTR_RESPONSE_SHA256,
            "cache_key": ATTR_CACHE_KEY,
            "error_type": ATTR_ERROR_TYPE,
            "outputs": ATTR_OUTPUTS_SHA256,
            "recorded": ATTR_TOOL_RECORDED,
            "result_is_bytes": ATTR_TOOL_RESULT_IS_BYTES,
        }[name]
        if isinstance(value, bool):
            e.attributes[name].bool_value = value
        else:
            e.attributes[name].string_value = value
    return e


def value(
    index: int, path: str, v: Any, attribute: str, digest: str | None, **extra: Any
) -> dict[str, Any]:
    return {
        "event_index": index,
        "path": path,
        "mark": extra.pop("mark", "verified"),
        "value": v,
        "text": extra.pop("text", str(v)),
        "is_bytes": extra.pop("is_bytes", False),
        "digest": digest,
        "traced_digest": digest,
        "attribute": attribute,
    }


def document(*values: dict[str, Any], seq: int = 1, key: bytes = KEY) -> dict[str, Any]:
    return {
        "verdict": "reproduced",
        "reason": "all events match",
        "header": {"entity_key": key.hex(), "seq": seq, "agent": "prod.agent:AGENT"},
        "first_divergence": None,
        "values": list(values),
    }


def prove(doc: Any, traced: list[TraceEvent]) -> Any:
    return prove_reference(
        doc, traced, agent_path="prod.agent:AGENT", source="--reference", entity_key=KEY, seq=1
    )


TRACED = [
    event(0, TraceEvent.LLM_CALL, cache_key="k" * 64, response="r" * 64),
    event(
        1, TraceEvent.TOOL_CALL, args=json_sha(PRODUCTION_ARGS), result=json_sha({"found": True})
    ),
]


def test_a_value_whose_sha256_is_the_traced_digest_is_proved_by_rehashing_it() -> None:
    ref = prove(
        document(value(1, "args", PRODUCTION_ARGS, ATTR_ARGS_SHA256, json_sha(PRODUCTION_ARGS))),
        TRACED,
    )
    proved = ref.value_for(1, "args")
    assert proved is not None and proved.value == PRODUCTION_ARGS
    assert proved.text == '{"order_id": "B-2001"}' and (1, "args") in ref.rehashed
    assert ref.reproduced


def test_a_value_swapped_behind_the_traced_digest_is_left_out() -> None:
    # The reference process claims the production digest for another value.
    forged = value(1, "args", {"order_id": "B-9999"}, ATTR_ARGS_SHA256, json_sha(PRODUCTION_ARGS))
    assert prove(document(forged), TRACED).value_for(1, "args") is None


def test_a_value_the_reference_itself_marks_differing_or_unverifiable_is_left_out() -> None:
    digest = json_sha(PRODUCTION_ARGS)
    for mark in ("differs", "unverifiable"):
        item = value(1, "args", PRODUCTION_ARGS, ATTR_ARGS_SHA256, digest, mark=mark)
        assert prove(document(item), TRACED).values == {}


def test_the_shown_text_is_derived_from_the_value_not_taken_from_the_document() -> None:
    item = value(
        1, "args", PRODUCTION_ARGS, ATTR_ARGS_SHA256, json_sha(PRODUCTION_ARGS), text="\x1b[2Jok"
    )
    proved = prove(document(item), TRACED).value_for(1, "args")
    assert proved is not None and "\x1b" not in proved.text


def test_a_response_is_shown_only_with_the_traced_response_digest() -> None:
    good = value(0, "response.text", "refund", ATTR_RESPONSE_SHA256, "r" * 64)
    bad = value(0, "response.text", "refund", ATTR_RESPONSE_SHA256, "x" * 64)
    shown = prove(document(good), TRACED)
    assert shown.value_for(0, "response.text") is not None
    assert (0, "response.text") not in shown.rehashed  # proved by the reference's digest
    assert prove(document(bad), TRACED).value_for(0, "response.text") is None


def test_request_components_are_shown_only_when_the_whole_request_key_is_the_traced_one() -> None:
    component = value(0, "request.messages[1]", {"role": "user"}, ATTR_CACHE_KEY, "c" * 64)
    alone = prove(document(component), TRACED)
    assert alone.value_for(0, "request.messages[1]") is None
    other_key = value(0, "request", {"cache_key": "z" * 64}, ATTR_CACHE_KEY, "z" * 64)
    assert prove(document(component, other_key), TRACED).value_for(0, "request.messages[1]") is None
    request = value(0, "request", {"cache_key": "k" * 64}, ATTR_CACHE_KEY, "k" * 64)
    # Listed after its components: still proved first.
    both = prove(document(component, request), TRACED)
    assert both.value_for(0, "request.messages[1]") is not None


def test_a_recorded_tools_result_of_another_kind_is_left_out() -> None:
    text = '{"found": true}'
    traced = [
        event(
            0, TraceEvent.TOOL_CALL, result=sha(text.encode()), recorded=True, result_is_bytes=False
        )
    ]
    as_bytes = value(0, "result", text, ATTR_RESULT_SHA256, sha(text.encode()), is_bytes=True)
    assert prove(document(as_bytes), traced).values == {}
    traced_bytes = [
        event(
            0, TraceEvent.TOOL_CALL, result=sha(text.encode()), recorded=True, result_is_bytes=True
        )
    ]
    assert prove(document(as_bytes), traced_bytes).value_for(0, "result") is not None


def test_an_error_type_must_equal_the_traced_attribute() -> None:
    traced = [event(0, TraceEvent.ACTIVATION_FAILED, error_type="KeyError")]
    same = value(0, "error.type", "KeyError", ATTR_ERROR_TYPE, "KeyError")
    other = value(0, "error.type", "ValueError", ATTR_ERROR_TYPE, "KeyError")
    assert prove(document(same), traced).value_for(0, "error.type") is not None
    assert prove(document(other), traced).value_for(0, "error.type") is None


def test_each_output_is_checked_against_its_own_traced_digest() -> None:
    traced = [event(0, TraceEvent.ACTIVATION_END, outputs=f"{sha(b'one')},{sha(b'two')}")]
    second = value(0, "outputs[1]", "two", ATTR_OUTPUTS_SHA256, sha(b"two"), is_bytes=True)
    swapped = value(0, "outputs[0]", "two", ATTR_OUTPUTS_SHA256, sha(b"one"), is_bytes=True)
    past = value(0, "outputs[2]", "two", ATTR_OUTPUTS_SHA256, sha(b"two"), is_bytes=True)
    ref = prove(document(second, swapped, past), traced)
    assert set(ref.values) == {(0, "outputs[1]")}


def test_a_value_of_an_event_the_trace_does_not_have_is_left_out() -> None:
    item = value(7, "args", PRODUCTION_ARGS, ATTR_ARGS_SHA256, json_sha(PRODUCTION_ARGS))
    assert prove(document(item), TRACED).values == {}


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([], "not a JSON object"),
        ({"values": []}, "no verdict"),
        ({**document(), "header": None}, "no header"),
        (document(seq=2), "seq 2"),
        (document(key=b"customer-carol"), "another key"),
        ({**document(), "values": {}}, "not a list"),
        ({**document(), "values": [1]}, "not a JSON object"),
        ({**document(), "values": [{"event_index": "1", "path": "args"}]}, "event_index"),
    ],
)
def test_a_document_that_is_not_this_activations_is_unreadable(doc: Any, why: str) -> None:
    with pytest.raises(ReferenceUnreadable, match=why):
        prove(doc, TRACED)


def test_a_reference_that_diverged_itself_keeps_the_values_it_proves() -> None:
    doc = {
        **document(value(1, "args", PRODUCTION_ARGS, ATTR_ARGS_SHA256, json_sha(PRODUCTION_ARGS))),
        "verdict": "diverged",
        "first_divergence": {"index": 1},
    }
    ref = prove(doc, TRACED)
    assert not ref.reproduced and ref.first_divergence == 1
    assert ref.value_for(1, "args") is not None
