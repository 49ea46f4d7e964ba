"""The typed trace-event views: every event the core writes decodes and re-encodes to its bytes."""

from __future__ import annotations

import pytest

from beam_agents import trace_view as tv
from beam_agents._protos import TraceEvent
from beam_agents.trace_events import (
    ATTR_CACHE_HIT,
    ATTR_CACHE_KEY,
    make_event,
    serialize_trace_event,
)
from tests.test_core_golden import SCENARIOS


def _all_golden_events() -> list[TraceEvent]:
    events: list[TraceEvent] = []
    for name in sorted(SCENARIOS):
        for result in SCENARIOS[name]().results:
            events.extend(result.trace)
    return events


GOLDEN_EVENTS = _all_golden_events()


def test_the_golden_scenarios_cover_every_kind() -> None:
    kinds = {e.kind for e in GOLDEN_EVENTS}
    assert kinds == set(TraceEvent.Kind.values()) - {TraceEvent.KIND_UNSPECIFIED}


@pytest.mark.parametrize("event", GOLDEN_EVENTS, ids=lambda e: f"{e.seq}.{e.index}")
def test_every_golden_event_decodes_and_rebuilds_to_the_same_bytes(event: TraceEvent) -> None:
    before = serialize_trace_event(event)
    view = tv.decode(event)
    assert view is not None and event.kind == view.KIND
    assert (view.seq, view.index, view.name) == (event.seq, event.index, event.name)
    rebuilt = make_event(
        entity_key=event.entity_key,
        seq=event.seq,
        index=event.index,
        kind=event.kind,
        name=event.name,
        now_ms=event.start_ms,
        attributes=view.to_attributes(),
    )
    assert serialize_trace_event(rebuilt) == before
    # Decoding read the event without inserting anything into it.
    assert serialize_trace_event(event) == before


def test_reading_an_absent_attribute_inserts_nothing() -> None:
    event = make_event(
        entity_key=b"k", seq=1, index=1, kind=TraceEvent.LLM_CALL, name="m", now_ms=5
    )
    before = serialize_trace_event(event)
    view = tv.LlmCall.of(event)
    assert view.cache_key is None and view.cache_hit is None and view.input_tokens is None
    assert tv.attribute(event, ATTR_CACHE_KEY) is None
    assert tv.attribute_text(event, ATTR_CACHE_HIT) is None
    assert len(event.attributes) == 0
    assert serialize_trace_event(event) == before


def test_a_typed_value_decodes_with_its_type_and_compares_with_the_vocabulary() -> None:
    event = make_event(
        entity_key=b"k",
        seq=2,
        index=0,
        kind=TraceEvent.ACTIVATION_START,
        name="resume",
        now_ms=5,
        attributes={
            "beam_agents.activation.kind": "resume",
            "beam_agents.trigger": "timeout",
            "beam_agents.deadline_ms": 99,
        },
    )
    view = tv.decode(event)
    assert isinstance(view, tv.ActivationStart)
    assert view.is_resume and view.is_timeout
    assert view.trigger == tv.Trigger.TIMEOUT and view.deadline_ms == 99
    assert view.envelope_id is None


def test_end_digests_distinguish_no_outputs_from_untraced() -> None:
    def end(attrs: dict[str, str]) -> tv.ActivationEnd:
        event = make_event(
            entity_key=b"k",
            seq=1,
            index=3,
            kind=TraceEvent.ACTIVATION_END,
            name="done",
            now_ms=5,
            attributes=attrs,
        )
        return tv.ActivationEnd.of(event)

    assert end({}).outputs_sha256 is None and not end({}).digests_traced
    assert end({"beam_agents.outputs.sha256": ""}).outputs_sha256 == ()
    two = end({"beam_agents.outputs.sha256": "a,b"})
    assert two.outputs_sha256 == ("a", "b") and two.digests_traced


def test_an_unknown_kind_has_no_view() -> None:
    event = TraceEvent(kind=99)  # type: ignore[arg-type]
    assert tv.decode(event) is None


def test_attribute_kind_tells_absent_unset_and_each_value_type_apart() -> None:
    event = TraceEvent(kind=TraceEvent.ACTIVATION_END)
    event.attributes["text"].string_value = ""
    event.attributes["number"].int_value = 0
    event.attributes["unset"].Clear()
    before = event.SerializeToString(deterministic=True)
    assert tv.attribute_kind(event, "absent") is None
    assert tv.attribute_kind(event, "text") == "string_value"
    assert tv.attribute_kind(event, "number") == "int_value"
    assert tv.attribute_kind(event, "unset") == "unset"
    assert event.SerializeToString(deterministic=True) == before  # asking inserted nothing
