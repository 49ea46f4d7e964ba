"""Trace events as rows of the BigQuery trace table, and rows back as trace events.

The ``bigquery://`` trace sink writes one row per ``TraceEvent`` in the table
described by ``TRACE_TABLE_SCHEMA``; ``beam-agents-replay convert-bq`` turns
rows exported from that table back into a trace stream. Both use this module,
which imports neither Beam nor any Google library: the replay path must start
fast and open no connection.

The table loses nothing: every field of ``TraceEvent`` has a column, ids and
keys are ``BYTES``, the kind is its enum name, and each attribute is one
element of a repeated record with one typed value column per ``AttributeValue``
case plus ``value_type`` naming the case, so an attribute holding ``""``, ``0``
or ``false`` is told apart from one holding nothing. The round trip
event → row → event gives byte-identical ``serialize_trace_event`` output (the
one exception, a NaN whose bits are not Python's quiet NaN, is documented on
``trace_event_to_row``).

Rows are accepted in the shapes they reach an operator in:

- as ``google.cloud.bigquery`` returns them (``BYTES`` as ``bytes``, ``INT64``
  as ``int``, ``FLOAT64`` as ``float``, ``BOOL`` as ``bool``);
- as ``bq query --format=json`` / ``--format=prettyjson`` prints them (every
  scalar a string, ``BYTES`` base64, repeated records as lists of objects,
  ``NULL`` as ``null`` or a missing member);
- as ``trace_event_to_row`` writes them (the JSON of a streaming insert).

Columns the table does not define are ignored, so a table with extra columns
(an ingestion time) converts too. Two columns exist for the table's layout and are
derived, never read back: ``event_time`` (``start_ms`` as a ``TIMESTAMP``, the day
partitioning column, ``TRACE_TABLE_PARTITION_FIELD``) and ``entity_key_hex`` (the key
in hex: BigQuery cannot cluster on ``BYTES``; with ``seq`` the clustering columns,
``TRACE_TABLE_CLUSTERING``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypedDict

from beam_agents._protos import AttributeValue, TraceEvent
from beam_agents.errors import TraceStreamError
from beam_agents.trace_events import kind_name, serialize_trace_event

__all__ = [
    "TRACE_TABLE_CLUSTERING",
    "TRACE_TABLE_PARTITION_FIELD",
    "TRACE_TABLE_SCHEMA",
    "FieldSpec",
    "event_time_micros",
    "load_bigquery_trace_events",
    "read_bigquery_rows",
    "row_to_trace_event",
    "rows_to_trace_events",
    "trace_event_to_row",
    "trace_row_id",
]


class FieldSpec(TypedDict, total=False):
    """One column of a BigQuery schema, in the REST API's JSON form.

    The same shape ``bq mk --schema FILE.json`` reads and
    ``google.cloud.bigquery.SchemaField.from_api_repr`` accepts.
    """

    name: str
    type: str
    mode: str
    description: str
    fields: list[FieldSpec]


ATTRIBUTE_VALUE_COLUMNS: Final = (
    "string_value",
    "int_value",
    "bool_value",
    "double_value",
    "bytes_value",
)
"""The typed value columns of an attribute; ``value_type`` holds one of these names."""

TRACE_TABLE_SCHEMA: Final[tuple[FieldSpec, ...]] = (
    {"name": "entity_key", "type": "BYTES", "mode": "REQUIRED",
     "description": "The entity key the activation ran for."},
    {"name": "seq", "type": "INT64", "mode": "REQUIRED",
     "description": "The key's SEQ of the activation."},
    {"name": "index", "type": "INT64", "mode": "REQUIRED",
     "description": "Position of the event within its activation, from 0."},
    {"name": "kind", "type": "STRING", "mode": "REQUIRED",
     "description": "TraceEvent.Kind name (ACTIVATION_START, LLM_CALL, ...; KIND_<n> if unknown)."},
    {"name": "name", "type": "STRING", "mode": "NULLABLE",
     "description": "The event's name."},
    {"name": "start_ms", "type": "INT64", "mode": "NULLABLE",
     "description": "Start, on the activation clock (ms), never the wall clock."},
    {"name": "end_ms", "type": "INT64", "mode": "NULLABLE",
     "description": "End, on the activation clock (ms)."},
    {"name": "attributes", "type": "RECORD", "mode": "REPEATED",
     "description": "The event's attributes, sorted by name.",
     "fields": [
         {"name": "name", "type": "STRING", "mode": "REQUIRED",
          "description": "Attribute name."},
         {"name": "value_type", "type": "STRING", "mode": "NULLABLE",
          "description": "Which value column holds the value (string_value, int_value, "
                         "bool_value, double_value, bytes_value); NULL: the attribute is unset."},
         {"name": "string_value", "type": "STRING", "mode": "NULLABLE"},
         {"name": "int_value", "type": "INT64", "mode": "NULLABLE"},
         {"name": "bool_value", "type": "BOOL", "mode": "NULLABLE"},
         {"name": "double_value", "type": "FLOAT64", "mode": "NULLABLE"},
         {"name": "bytes_value", "type": "BYTES", "mode": "NULLABLE"},
     ]},
    {"name": "trace_id", "type": "BYTES", "mode": "NULLABLE",
     "description": "16-byte trace id, derived from (entity_key, seq)."},
    {"name": "span_id", "type": "BYTES", "mode": "NULLABLE",
     "description": "8-byte span id, derived from (entity_key, seq, index)."},
    {"name": "parent_span_id", "type": "BYTES", "mode": "NULLABLE",
     "description": "The activation's start span; empty for the start event itself."},
    {"name": "event_time", "type": "TIMESTAMP", "mode": "REQUIRED",
     "description": "start_ms as a TIMESTAMP (clamped to 0001-01-01..9999-12-31): the "
                    "day partitioning column. Derived; not read back."},
    {"name": "entity_key_hex", "type": "STRING", "mode": "REQUIRED",
     "description": "entity_key in lower-case hex: the clustering column (BigQuery cannot "
                    "cluster on BYTES). Derived; not read back."},
)  # fmt: skip
"""The BigQuery table the ``bigquery://`` trace sink writes: one row per ``TraceEvent``."""

TRACE_TABLE_PARTITION_FIELD: Final = "event_time"
"""The table is partitioned by day on this column: an activation's events share one day."""
TRACE_TABLE_CLUSTERING: Final = ("entity_key_hex", "seq")
"""The table is clustered on these: a key's events, and one activation's, sit together."""

# BigQuery's TIMESTAMP range, in microseconds since the epoch.
_TIMESTAMP_MIN_US: Final = -62_135_596_800_000_000
_TIMESTAMP_MAX_US: Final = 253_402_300_799_999_999

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT32_MAX: Final = 2**32 - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")


# --------------------------------------------------------------------------- event -> row


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _double_json(value: float) -> float | str:
    # JSON has no NaN or infinities; BigQuery's streaming insert takes these
    # three strings for FLOAT64, and every reader below parses them back.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def event_time_micros(start_ms: int) -> int:
    """``event_time`` of a row: ``start_ms`` in microseconds, clamped to BigQuery's range."""
    return min(max(start_ms * 1000, _TIMESTAMP_MIN_US), _TIMESTAMP_MAX_US)


def _timestamp_text(micros: int) -> str:
    import datetime

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    moment = epoch + datetime.timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ").rjust(27, "0")


def trace_row_id(event: TraceEvent) -> str:
    """An insert id for an event's row: a digest of ``(entity_key, seq, index)``.

    For writers of your own on the legacy streaming inserts (``insertAll``, whose
    best-effort de-duplication drops rows re-sent with the same id); the
    ``bigquery://`` sink writes through the Storage Write API, which has no insert
    ids (docs/sinks.md). A digest rather than the key itself keeps the id within
    BigQuery's 128-character limit whatever the key's length.
    """
    material = b"beam-agents/bq-row\x00%b\x00%d:%d" % (event.entity_key, event.seq, event.index)
    return hashlib.sha256(material).hexdigest()


def trace_event_to_row(event: TraceEvent) -> dict[str, Any]:
    """One ``TraceEvent`` as a row of ``TRACE_TABLE_SCHEMA``, ready for a streaming insert.

    The row is JSON-serializable as it stands: ``BYTES`` are base64 text,
    ``INT64`` values are decimal strings (JSON numbers lose precision past
    2**53 in many parsers), doubles are JSON numbers except NaN and the
    infinities, which are the strings ``"NaN"``, ``"Infinity"`` and
    ``"-Infinity"``. Attributes are sorted by name; an attribute with no
    value has ``value_type`` null.

    A NaN comes back as Python's quiet NaN: a NaN attribute with any other
    bit pattern (a signalling or negative NaN) round-trips as a NaN but not
    byte for byte. The activation core never produces one.

    Args:
        event: The event.

    Returns:
        The row, keyed by column name.
    """
    attributes: list[dict[str, Any]] = []
    for name in sorted(event.attributes):
        value = event.attributes[name]
        which = value.WhichOneof("value")
        item: dict[str, Any] = {"name": name, "value_type": which}
        if which == "string_value":
            item[which] = value.string_value
        elif which == "int_value":
            item[which] = str(value.int_value)
        elif which == "bool_value":
            item[which] = value.bool_value
        elif which == "double_value":
            item[which] = _double_json(value.double_value)
        elif which == "bytes_value":
            item[which] = _b64(value.bytes_value)
        attributes.append(item)
    return {
        "entity_key": _b64(event.entity_key),
        "seq": str(event.seq),
        "index": str(event.index),
        "kind": kind_name(event.kind),
        "name": event.name,
        "start_ms": str(event.start_ms),
        "end_ms": str(event.end_ms),
        "attributes": attributes,
        "trace_id": _b64(event.trace_id),
        "span_id": _b64(event.span_id),
        "parent_span_id": _b64(event.parent_span_id),
        "event_time": _timestamp_text(event_time_micros(event.start_ms)),
        "entity_key_hex": event.entity_key.hex(),
    }


# --------------------------------------------------------------------------- row -> event


class _BadRow(Exception):
    """A column that does not hold what the schema says (turned into TraceStreamError)."""


def _column(row: Mapping[str, Any], name: str, *, required: bool = False) -> Any:
    value = row.get(name)
    if value is None and required:
        raise _BadRow(f"column {name!r} is missing or null, and the trace table requires it")
    return value


def _to_bytes(value: Any, column: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _BadRow(f"column {column!r} holds {value[:40]!r}, not base64 BYTES") from exc
    raise _BadRow(f"column {column!r} holds a {type(value).__name__}, not BYTES")


def _to_int(value: Any, column: str, *, low: int = _INT64_MIN, high: int = _INT64_MAX) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise _BadRow(f"column {column!r} holds a boolean, not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        # int() refuses text past 4300 digits (leading zeros count): no INT64 has 20.
        text = value.strip()
        significant = text.lstrip("+-").lstrip("0") or "0"
        if len(significant) > _MAX_INT_DIGITS:
            raise _BadRow(
                f"column {column!r} holds an integer of {len(significant)} digits, "
                f"outside [{low}, {high}]"
            )
        number = -int(significant) if text.startswith("-") else int(significant)
    elif isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        # A JSON tool that read the number as a double; exact below 2**53.
        number = int(value)
    else:
        raise _BadRow(f"column {column!r} holds {value!r}, not an integer")
    if not low <= number <= high:
        shown = (
            str(number)
            if number.bit_length() < 128
            else f"an integer of {len(str(abs(number)))} digits"
        )
        raise _BadRow(f"column {column!r} holds {shown}, outside [{low}, {high}]")
    return number


_MAX_INT_DIGITS = 40
"""The most significant digits an integer column's text is converted with (an INT64 has 19)."""


def _to_float(value: Any, column: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise _BadRow(f"column {column!r} holds a boolean, not a FLOAT64")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an int such as 10**400: no FLOAT64 holds it
            assert isinstance(value, int)
            digits = len(str(value)) if value.bit_length() < 4000 else None
            shown = (
                f"an integer of {value.bit_length()} bits"
                if digits is None
                else (str(value) if digits <= 40 else f"an integer of {digits} digits")
            )
            raise _BadRow(f"column {column!r} holds {shown}, beyond FLOAT64's range") from None
    if isinstance(value, str):
        try:
            # float() reads what bq prints: "1.5", "1.0E308", "-0.0", "NaN", "Infinity".
            return float(value)
        except ValueError:
            pass
    raise _BadRow(f"column {column!r} holds {value!r:.60}, not a FLOAT64")


def _to_bool(value: Any, column: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _BadRow(f"column {column!r} holds {value!r}, not a BOOL")


def _to_str(value: Any, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _BadRow(
                    f"column {column!r} holds a lone surrogate (U+{ord(value[exc.start]):04X} at "
                    f"character {exc.start}), which no STRING can hold"
                ) from None
        return value
    raise _BadRow(f"column {column!r} holds a {type(value).__name__}, not a STRING")


def _to_kind(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return _to_int(value, "kind", low=-(2**31), high=2**31 - 1)
    name = _to_str(value, "kind")
    if name.startswith("KIND_") and _INT_TEXT.fullmatch(name[5:]):
        return _to_int(name[5:], "kind", low=-(2**31), high=2**31 - 1)
    try:
        return TraceEvent.Kind.Value(name)
    except ValueError:
        raise _BadRow(
            f"column 'kind' holds {name!r}, not a TraceEvent.Kind name "
            f"({', '.join(TraceEvent.Kind.keys())} or KIND_<n>)"
        ) from None


def _set_attribute(slot: AttributeValue, item: Mapping[str, Any], where: str) -> None:
    which = item.get("value_type")
    if which is None:
        return  # an attribute present with no value: the empty AttributeValue
    if which not in ATTRIBUTE_VALUE_COLUMNS:
        raise _BadRow(
            f"{where}.value_type holds {which!r}, not one of {', '.join(ATTRIBUTE_VALUE_COLUMNS)}"
        )
    raw = item.get(which)
    column = f"{where}.{which}"
    if raw is None:
        raise _BadRow(f"{column} is null although value_type names it")
    if which == "string_value":
        slot.string_value = _to_str(raw, column)
    elif which == "int_value":
        slot.int_value = _to_int(raw, column)
    elif which == "bool_value":
        slot.bool_value = _to_bool(raw, column)
    elif which == "double_value":
        slot.double_value = _to_float(raw, column)
    else:
        slot.bytes_value = _to_bytes(raw, column)


def _row_to_event(row: Mapping[str, Any]) -> TraceEvent:
    if not isinstance(row, Mapping):
        raise _BadRow(f"a row must be an object of columns, not a {type(row).__name__}")
    event = TraceEvent(
        entity_key=_to_bytes(_column(row, "entity_key", required=True), "entity_key"),
        seq=_to_int(_column(row, "seq", required=True), "seq"),
        index=_to_int(_column(row, "index", required=True), "index", low=0, high=_UINT32_MAX),
        kind=_to_kind(_column(row, "kind", required=True)),  # type: ignore[arg-type]
        name=_to_str(row.get("name"), "name"),
        start_ms=_to_int(row.get("start_ms"), "start_ms"),
        end_ms=_to_int(row.get("end_ms"), "end_ms"),
        trace_id=_to_bytes(row.get("trace_id"), "trace_id"),
        span_id=_to_bytes(row.get("span_id"), "span_id"),
        parent_span_id=_to_bytes(row.get("parent_span_id"), "parent_span_id"),
    )
    attributes = row.get("attributes")
    if attributes is None:
        return event
    if isinstance(attributes, (str, bytes)) or not isinstance(attributes, Sequence):
        raise _BadRow(f"column 'attributes' holds a {type(attributes).__name__}, not a list")
    for i, item in enumerate(attributes):
        where = f"attributes[{i}]"
        if not isinstance(item, Mapping):
            raise _BadRow(f"{where} is a {type(item).__name__}, not a record")
        name = _to_str(_column(item, "name", required=True), f"{where}.name")
        if name in event.attributes:
            raise _BadRow(f"{where} repeats attribute {name!r}; an event holds each name once")
        _set_attribute(event.attributes[name], item, where)
    return event


def row_to_trace_event(row: Mapping[str, Any]) -> TraceEvent:
    """The ``TraceEvent`` a row of the trace table holds.

    Accepts the row as the BigQuery client returns it, as ``bq query
    --format=json`` or ``--format=prettyjson`` prints it, or as
    ``trace_event_to_row`` wrote it (see the module docstring). A ``NULL`` or
    missing nullable column is the field's default.

    Args:
        row: The row, keyed by column name.

    Returns:
        The event; ``serialize_trace_event`` of it equals that of the event
        the row was made from.

    Raises:
        TraceStreamError: A required column is missing, or a column does not
            hold a value of its type (the message names the column).
    """
    try:
        return _row_to_event(row)
    except _BadRow as exc:
        raise TraceStreamError(f"not a row of the trace table: {exc}", source="<row>") from None


# --------------------------------------------------------------------------- files of rows


def read_bigquery_rows(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The rows of an exported BigQuery result: a JSON array, or one JSON object per line.

    ``bq query --format=json`` and ``--format=prettyjson`` print a JSON
    array; ``bq extract --destination_format=NEWLINE_DELIMITED_JSON`` and
    most scripts write NDJSON. The format is told by the first character
    that is not white space (``[`` for an array). A UTF-8 byte-order mark is
    skipped.

    Args:
        path: The file.

    Yields:
        Each row, as a dict keyed by column name.

    Raises:
        TraceStreamError: The file cannot be read, is not valid JSON, or holds
            something other than objects (names the file and the row or line).
    """
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceStreamError(
            f"cannot read BigQuery rows from {source}: {exc}", source=source
        ) from exc
    if text.lstrip().startswith("["):
        yield from _array_rows(text, source)
        return
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if not isinstance(exc, json.JSONDecodeError):
                raise TraceStreamError(
                    f"{source}:{line_number}: {_json_limit(exc)}", source=source, offset=line_number
                ) from None
            raise TraceStreamError(
                f"{source}:{line_number}: not a JSON object per line (NDJSON) nor a JSON array: "
                f"{exc.msg} at column {exc.colno}",
                source=source,
                offset=line_number,
            ) from exc
        if not isinstance(row, dict):
            raise TraceStreamError(
                f"{source}:{line_number}: a {type(row).__name__}, not a row object",
                source=source,
                offset=line_number,
            )
        yield row


def _json_limit(exc: ValueError | RecursionError) -> str:
    """What a JSON parser limit refused: nesting too deep, or an integer too long."""
    if isinstance(exc, RecursionError):
        return "the JSON is nested too deeply to parse (a trace row nests 3 levels)"
    return f"the JSON holds a number it cannot read ({exc})"


def _array_rows(text: str, source: str) -> Iterator[dict[str, Any]]:
    try:
        rows = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise TraceStreamError(f"{source}: {_json_limit(exc)}", source=source) from None
        raise TraceStreamError(
            f"{source}:{exc.lineno}: not a valid JSON array: {exc.msg} at column {exc.colno}",
            source=source,
            offset=exc.lineno,
        ) from exc
    if not isinstance(rows, list):  # "[" then something else cannot parse, but be exact
        raise TraceStreamError(f"{source}: not a JSON array of rows", source=source)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TraceStreamError(
                f"{source}: element {i} of the array is a {type(row).__name__}, not a row object",
                source=source,
                offset=i,
            )
        yield row


def rows_to_trace_events(
    rows: Iterable[Mapping[str, Any]], *, source: str = "<rows>"
) -> list[TraceEvent]:
    """The trace events of rows of the trace table, in trace-stream order.

    Rows come back from a query in no particular order, and a streaming
    insert's de-duplication is best-effort, so the events are sorted by
    ``(entity_key, seq, index)`` and exact copies (same serialized bytes)
    are kept once. Two *different* events at the same position cannot both
    be the record of what happened, so they are refused rather than one
    silently chosen.

    Args:
        rows: Rows in any of the shapes ``row_to_trace_event`` accepts.
        source: Names the rows in errors (a file name).

    Returns:
        The events, sorted, without duplicates.

    Raises:
        TraceStreamError: A row is malformed (naming its position in
            ``rows``), or two rows hold different events at the same
            ``(entity_key, seq, index)``.
    """
    by_position: dict[tuple[bytes, int, int], tuple[int, bytes, TraceEvent]] = {}
    for i, row in enumerate(rows):
        try:
            event = _row_to_event(row)
        except _BadRow as exc:
            raise TraceStreamError(f"{source}: row {i}: {exc}", source=source, offset=i) from None
        position = (event.entity_key, event.seq, event.index)
        data = serialize_trace_event(event)
        seen = by_position.get(position)
        if seen is None:
            by_position[position] = (i, data, event)
        elif seen[1] != data:
            raise TraceStreamError(
                f"{source}: rows {seen[0]} and {i} hold different events for key "
                f"{event.entity_key.hex()} seq {event.seq} index {event.index}; a trace has one "
                f"event per position, so this table mixes traces of different runs",
                source=source,
                offset=i,
            )
    return [by_position[position][2] for position in sorted(by_position)]


def load_bigquery_trace_events(path: str | os.PathLike[str]) -> list[TraceEvent]:
    """The trace events of an exported file of trace-table rows (what ``convert-bq`` writes out).

    ``read_bigquery_rows`` then ``rows_to_trace_events``: write the result
    with ``beam_agents.trace_stream.write_trace_stream`` to get the trace
    stream ``beam-agents-replay --traces`` reads.

    Raises:
        TraceStreamError: As ``read_bigquery_rows`` and ``rows_to_trace_events``.
    """
    source = os.fspath(path)
    return rows_to_trace_events(read_bigquery_rows(source), source=source)
