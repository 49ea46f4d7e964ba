"""Trace event builders: deterministic ids, typed attributes, the same bytes however built."""

from __future__ import annotations

import enum

import pytest

from beam_agents._protos import TraceEvent
from beam_agents.trace_events import (
    ActivationIds,
    AttrValue,
    attributes_dict,
    make_event,
    serialize_trace_event,
    set_attributes,
    span_id_for,
    trace_id_for,
)

KEYS = [b"customer-42", b"", "ключ-✓".encode(), bytes(range(256))]


@pytest.mark.parametrize("key", KEYS, ids=["ascii", "empty", "utf8", "binary"])
@pytest.mark.parametrize("seq", [0, 1, 7, 2**62])
def test_activation_ids_are_the_ids_derived_one_by_one(key: bytes, seq: int) -> None:
    ids = ActivationIds(key, seq)

    assert ids.trace_id == trace_id_for(key, seq)
    assert ids.root_span_id == span_id_for(key, seq, 0)
    assert [ids.span_id(i) for i in (0, 1, 9, 10, 123)] == [
        span_id_for(key, seq, i) for i in (0, 1, 9, 10, 123)
    ]


def test_the_root_event_has_no_parent_and_the_others_hang_from_it() -> None:
    ids = ActivationIds(b"k", 3)
    root = make_event(entity_key=b"k", seq=3, index=0, kind=1, name="start", now_ms=5, ids=ids)
    child = make_event(entity_key=b"k", seq=3, index=2, kind=2, name="m", now_ms=5, ids=ids)

    assert (root.span_id, root.parent_span_id) == (span_id_for(b"k", 3, 0), b"")
    assert (child.span_id, child.parent_span_id) == (span_id_for(b"k", 3, 2), root.span_id)
    assert root.trace_id == child.trace_id == trace_id_for(b"k", 3)


def test_events_built_with_or_without_shared_ids_have_the_same_bytes() -> None:
    key, seq = b"customer-42", 7
    ids = ActivationIds(key, seq)
    attributes: dict[str, AttrValue] = {"a": "x", "b": 3, "c": True, "d": 1.5, "e": b"\x00"}
    for index in range(4):
        fresh = make_event(
            entity_key=key, seq=seq, index=index, kind=2, name="n", now_ms=9, attributes=attributes
        )
        shared = make_event(
            entity_key=key,
            seq=seq,
            index=index,
            kind=2,
            name="n",
            now_ms=9,
            attributes=attributes,
            ids=ids,
        )
        assert serialize_trace_event(shared) == serialize_trace_event(fresh)


def test_ids_of_another_activation_are_not_used() -> None:
    stale = ActivationIds(b"k", 3)

    event = make_event(entity_key=b"k", seq=4, index=1, kind=2, name="m", now_ms=0, ids=stale)
    other_key = make_event(entity_key=b"j", seq=3, index=1, kind=2, name="m", now_ms=0, ids=stale)

    assert (event.trace_id, event.span_id) == (trace_id_for(b"k", 4), span_id_for(b"k", 4, 1))
    assert other_key.trace_id == trace_id_for(b"j", 3)


class Level(enum.IntEnum):
    HIGH = 2


class Color(enum.StrEnum):
    RED = "red"


def test_attribute_values_go_to_the_field_of_their_type() -> None:
    event = TraceEvent()

    set_attributes(
        event,
        {"bool": True, "int": -3, "float": 0.25, "bytes": b"\x01", "str": "ü", "false": False},
    )

    assert {name: event.attributes[name].WhichOneof("value") for name in event.attributes} == {
        "bool": "bool_value",
        "false": "bool_value",
        "int": "int_value",
        "float": "double_value",
        "bytes": "bytes_value",
        "str": "string_value",
    }
    assert attributes_dict(event)["false"] is False


def test_subclass_values_go_where_isinstance_puts_them() -> None:
    event = TraceEvent()

    set_attributes(event, {"level": Level.HIGH, "color": Color.RED})

    assert event.attributes["level"].int_value == 2
    assert event.attributes["color"].string_value == "red"


def test_an_unsupported_value_is_refused_naming_the_attribute() -> None:
    event = TraceEvent()

    with pytest.raises(TypeError, match="'when' has unsupported type list"):
        set_attributes(event, {"ok": 1, "when": [1]})  # type: ignore[dict-item]

    assert event.attributes["ok"].int_value == 1
    assert event.attributes["when"].WhichOneof("value") is None  # the entry, left unset


@pytest.mark.parametrize("module", ["activation", "context"])
def test_the_event_writers_name_attributes_only_through_the_constants(module: str) -> None:
    """The writers build attribute dicts with ``trace_events.ATTR_*``, never a literal name.

    They do not build ``trace_view`` views (docs/index.md, rule 4, says why): the constants
    are the one home of the names, on both the writing and the reading side.
    """
    import ast
    from pathlib import Path

    from beam_agents import trace_events

    names = {
        value
        for name, value in vars(trace_events).items()
        if name.startswith("ATTR_") and isinstance(value, str)
    }
    source = Path(trace_events.__file__).with_name(f"{module}.py").read_text()
    literals = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert len(names) > 30
    assert literals & names == set()
