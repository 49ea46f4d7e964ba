"""Trace events ↔ rows of the BigQuery trace table: lossless in every shape a row reaches us in."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.bigquery_rows import (
    TRACE_TABLE_SCHEMA,
    FieldSpec,
    load_bigquery_trace_events,
    read_bigquery_rows,
    row_to_trace_event,
    rows_to_trace_events,
    trace_event_to_row,
    trace_row_id,
)
from beam_agents.errors import TraceStreamError
from beam_agents.trace_events import serialize_trace_event

FIXTURES = Path(__file__).parent / "fixtures" / "bigquery"

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
ATTRIBUTE = st.one_of(
    st.none(),  # present but unset
    TEXT,
    INT64,
    st.booleans(),
    st.floats(allow_nan=False),
    st.just(math.nan),
    st.sampled_from([-0.0, 0.0, 5e-324, 1.7976931348623157e308, -math.inf, math.inf]),
    st.binary(max_size=20),
)


@st.composite
def trace_events(draw: st.DrawFn) -> TraceEvent:
    event = TraceEvent(
        entity_key=draw(st.binary(max_size=40)),
        seq=draw(INT64),
        index=draw(st.integers(0, 2**32 - 1)),
        kind=draw(
            st.one_of(st.sampled_from(TraceEvent.Kind.values()), st.integers(-(2**31), 2**31 - 1))
        ),
        name=draw(TEXT),
        start_ms=draw(INT64),
        end_ms=draw(INT64),
        trace_id=draw(st.binary(max_size=16)),
        span_id=draw(st.binary(max_size=8)),
        parent_span_id=draw(st.binary(max_size=8)),
    )
    for name, value in draw(st.dictionaries(TEXT, ATTRIBUTE, max_size=8)).items():
        if value is None:
            event.attributes[name].SetInParent()
        else:
            te.set_attributes(event, {name: value})
    return event


# ----------------------------------------------------------------- the shapes rows come in


def _fields() -> dict[str, FieldSpec]:
    return {f["name"]: f for f in TRACE_TABLE_SCHEMA}


def _client_value(spec: FieldSpec, value: Any) -> Any:
    """A JSON row's value as google.cloud.bigquery returns it (typed Python values)."""
    if value is None:
        return None
    kind = spec["type"]
    if kind == "BYTES":
        return base64.b64decode(value)
    if kind == "INT64":
        return int(value)
    if kind == "FLOAT64":
        return float(value)
    if kind == "RECORD":
        nested = {f["name"]: f for f in spec["fields"]}
        return [
            {name: _client_value(nested[name], item.get(name)) for name in nested} for item in value
        ]
    return value


def as_client_row(row: dict[str, Any]) -> dict[str, Any]:
    """Every column present, NULLs as None, values typed — what ``dict(Row)`` gives."""
    return {name: _client_value(spec, row.get(name)) for name, spec in _fields().items()}


def _bq_value(spec: FieldSpec, value: Any) -> Any:
    """A JSON row's value as ``bq query --format=json`` prints it: every scalar a string."""
    if value is None:
        return None
    kind = spec["type"]
    if kind == "RECORD":
        nested = {f["name"]: f for f in spec["fields"]}
        # bq leaves NULL members out of nested records.
        return [
            {
                name: _bq_value(nested[name], item[name])
                for name in nested
                if item.get(name) is not None
            }
            for item in value
        ]
    if kind == "BOOL":
        return "true" if value else "false"
    if kind == "FLOAT64":
        number = float(value)
        return "NaN" if math.isnan(number) else repr(number).replace("inf", "Infinity")
    return str(value)


def as_bq_json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {name: _bq_value(spec, row.get(name)) for name, spec in _fields().items()}


def _same(a: TraceEvent, b: TraceEvent) -> bool:
    return serialize_trace_event(a) == serialize_trace_event(b)


# ----------------------------------------------------------------- round trips


@settings(max_examples=300, deadline=None)
@given(trace_events())
def test_event_to_row_and_back_is_byte_identical(event: TraceEvent) -> None:
    row = json.loads(json.dumps(trace_event_to_row(event), allow_nan=False))  # JSON-clean as sent
    assert _same(row_to_trace_event(row), event)


@settings(max_examples=200, deadline=None)
@given(trace_events())
def test_rows_as_the_bigquery_client_returns_them_convert_back_byte_identical(
    event: TraceEvent,
) -> None:
    assert _same(row_to_trace_event(as_client_row(trace_event_to_row(event))), event)


@settings(max_examples=200, deadline=None)
@given(trace_events())
def test_rows_as_bq_prints_them_convert_back_byte_identical(event: TraceEvent) -> None:
    printed = json.loads(json.dumps(as_bq_json_row(trace_event_to_row(event))))
    assert _same(row_to_trace_event(printed), event)


def test_empty_string_zero_and_false_are_told_apart_from_unset() -> None:
    event = te.make_event(entity_key=b"k", seq=1, index=1, kind=TraceEvent.LLM_CALL, name="m",
                          now_ms=1, attributes={"s": "", "i": 0, "b": False, "d": 0.0})  # fmt: skip
    event.attributes["unset"].SetInParent()
    back = row_to_trace_event(as_client_row(trace_event_to_row(event)))
    assert {n: back.attributes[n].WhichOneof("value") for n in back.attributes} == {
        "s": "string_value",
        "i": "int_value",
        "b": "bool_value",
        "d": "double_value",
        "unset": None,
    }


def test_the_row_layout_is_the_documented_one() -> None:
    event = te.make_event(entity_key=b"k1", seq=3, index=2, kind=TraceEvent.TOOL_CALL,
                          name="lookup", now_ms=1734000000000,
                          attributes={"gen_ai.tool.name": "lookup", "n": 2**63 - 1})  # fmt: skip
    row = trace_event_to_row(event)
    assert row == {
        "entity_key": "azE=",
        "seq": "3",
        "index": "2",
        "kind": "TOOL_CALL",
        "name": "lookup",
        "start_ms": "1734000000000",
        "end_ms": "1734000000000",
        "attributes": [
            {"name": "gen_ai.tool.name", "value_type": "string_value", "string_value": "lookup"},
            {"name": "n", "value_type": "int_value", "int_value": "9223372036854775807"},
        ],
        "trace_id": base64.b64encode(event.trace_id).decode(),
        "span_id": base64.b64encode(event.span_id).decode(),
        "parent_span_id": base64.b64encode(event.parent_span_id).decode(),
        "event_time": "2024-12-12T10:40:00.000000Z",
        "entity_key_hex": "6b31",
    }
    assert set(row) == {f["name"] for f in TRACE_TABLE_SCHEMA}


def test_the_layout_columns_are_derived_and_clamped_to_bigquerys_range() -> None:
    def row(now_ms: int) -> dict[str, Any]:
        return trace_event_to_row(
            te.make_event(entity_key=b"", seq=0, index=0, kind=1, name="", now_ms=now_ms)
        )

    assert row(0)["event_time"] == "1970-01-01T00:00:00.000000Z"
    assert row(-(2**63))["event_time"] == "0001-01-01T00:00:00.000000Z"
    assert row(2**63 - 1)["event_time"] == "9999-12-31T23:59:59.999999Z"
    assert row(0)["entity_key_hex"] == ""


def test_row_ids_are_a_digest_of_key_seq_and_index() -> None:
    a = te.make_event(entity_key=b"k", seq=1, index=2, kind=1, name="x", now_ms=1)
    b = te.make_event(entity_key=b"k", seq=1, index=2, kind=7, name="y", now_ms=9)
    c = te.make_event(entity_key=b"k", seq=12, index=0, kind=1, name="x", now_ms=1)
    assert trace_row_id(a) == trace_row_id(b)
    assert trace_row_id(a) != trace_row_id(c)
    long_key = te.make_event(entity_key=b"k" * 1000, seq=1, index=2, kind=1, name="x", now_ms=1)
    assert len(trace_row_id(long_key)) <= 128


# ----------------------------------------------------------------- bq's own output


def expected_fixture_event() -> TraceEvent:
    event = te.make_event(
        entity_key=b"customer-42", seq=7, index=1, kind=TraceEvent.LLM_CALL, name="gpt-test",
        now_ms=1734000000000,
        attributes={"gen_ai.request.model": "gpt-test", "gen_ai.usage.input_tokens": 120,
                    "beam_agents.cache_hit": False, "score": -0.0, "ratio": 1.0e308},
    )  # fmt: skip
    return event


@pytest.mark.parametrize("name", ["trace_rows_prettyjson.json", "trace_rows.ndjson"])
def test_files_as_bq_writes_them_convert_to_the_traced_events(name: str) -> None:
    events = load_bigquery_trace_events(FIXTURES / name)
    start = te.make_event(entity_key=b"customer-42", seq=7, index=0,
                          kind=TraceEvent.ACTIVATION_START, name="start", now_ms=1734000000000,
                          attributes={"beam_agents.activation.kind": "start"})  # fmt: skip
    assert [serialize_trace_event(e) for e in events] == [
        serialize_trace_event(start),
        serialize_trace_event(expected_fixture_event()),
    ]


def test_duplicate_rows_are_kept_once_and_events_come_out_in_stream_order() -> None:
    events = [te.make_event(entity_key=k, seq=s, index=i, kind=1, name="x", now_ms=1)
              for k, s, i in [(b"b", 1, 0), (b"a", 2, 1), (b"a", 2, 0), (b"a", 1, 0)]]  # fmt: skip
    rows = [trace_event_to_row(e) for e in events]
    back = rows_to_trace_events([*rows, rows[0], rows[2]])
    assert [(e.entity_key, e.seq, e.index) for e in back] == [
        (b"a", 1, 0), (b"a", 2, 0), (b"a", 2, 1), (b"b", 1, 0)
    ]  # fmt: skip


def test_two_different_events_at_one_position_are_refused() -> None:
    a = te.make_event(entity_key=b"k", seq=1, index=0, kind=1, name="x", now_ms=1)
    b = te.make_event(entity_key=b"k", seq=1, index=0, kind=1, name="y", now_ms=1)
    with pytest.raises(
        TraceStreamError, match="rows 0 and 1 hold different events for key 6b seq 1"
    ):
        rows_to_trace_events([trace_event_to_row(a), trace_event_to_row(b)], source="x.json")


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"seq": "1", "index": "0", "kind": "LLM_CALL"}, "column 'entity_key' is missing"),
        ({"entity_key": "!!", "seq": "1", "index": "0", "kind": "LLM_CALL"}, "not base64"),
        ({"entity_key": "", "seq": "x", "index": "0", "kind": "LLM_CALL"}, "'seq' holds 'x'"),
        ({"entity_key": "", "seq": "1", "index": "-1", "kind": "LLM_CALL"}, "outside [0, 4294967295]"),
        ({"entity_key": "", "seq": str(2**63), "index": "0", "kind": "X"}, "outside"),
        # Found by the 100,000-run fuzz: past 4300 digits int() raised ValueError (a traceback).
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL", "end_ms": "1" + "9" * 6000},
         "'end_ms' holds an integer of 6001 digits, outside"),
        ({"entity_key": "", "seq": "-" + "0" * 5000 + "7", "index": "0", "kind": "LLM_CALL",
          "end_ms": 10**4000}, "'end_ms' holds an integer of 4001 digits, outside"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "NOPE"}, "not a TraceEvent.Kind"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL", "attributes": "x"}, "not a list"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL",
          "attributes": [{"name": "a", "value_type": "int_value"}]}, "null although value_type"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL",
          "attributes": [{"name": "a", "value_type": "json"}]}, "not one of string_value"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL",
          "attributes": [{"name": "a", "value_type": "bool_value", "bool_value": "yes"}]}, "not a BOOL"),
        ({"entity_key": "", "seq": "1", "index": "0", "kind": "LLM_CALL",
          "attributes": [{"name": "a"}, {"name": "a"}]}, "repeats attribute 'a'"),
    ],
)  # fmt: skip
def test_malformed_rows_are_refused_naming_the_column(row: dict[str, Any], says: str) -> None:
    with pytest.raises(TraceStreamError) as caught:
        row_to_trace_event(row)
    assert says in str(caught.value)


def test_unknown_columns_are_ignored() -> None:
    event = te.make_event(entity_key=b"k", seq=1, index=0, kind=1, name="x", now_ms=1)
    row = {**trace_event_to_row(event), "ingested_at": "2024-12-12 10:00:00 UTC"}
    assert _same(row_to_trace_event(row), event)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('[{"a": 1}, 3]', "element 1 of the array is a int"),
        ('[{"a": 1},', "not a valid JSON array"),
        ('{"a": 1}\n\n[1]\n', ":3: a list, not a row object"),
        ('{"a": 1}\nnope\n', ":2: not a JSON object per line"),
    ],
)
def test_bad_row_files_are_refused_naming_file_and_place(
    tmp_path: Path, content: str, says: str
) -> None:
    path = tmp_path / "rows.json"
    path.write_text(content)
    with pytest.raises(TraceStreamError) as caught:
        list(read_bigquery_rows(path))
    assert says in str(caught.value)
    assert caught.value.source == str(path)


def test_a_missing_file_is_a_trace_stream_error(tmp_path: Path) -> None:
    with pytest.raises(TraceStreamError, match="cannot read BigQuery rows"):
        list(read_bigquery_rows(tmp_path / "absent.json"))


def test_the_module_imports_no_google_library() -> None:
    code = (
        "import sys, beam_agents.bigquery_rows\n"
        "heavy = [m for m in sys.modules if m.startswith(('google.cloud', 'google.api_core', "
        "'apache_beam', 'confluent_kafka', 'grpc', 'opentelemetry'))]\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
