"""Replay's snapshot loader reads the wire format by hand: it must agree with the parser.

``load_snapshot_for_replay`` (and the cache loaders' path for large cells) take the
``llm_cache``/``tool_cache`` fields and a blob's ``body`` out of the bytes with
``blobs.split_fields`` and give upb only the rest. Whatever bytes the hand reading
takes out, upb never sees: if it accepted a field upb refuses, or framed one
differently, replay would judge a state that is not the snapshot's. So, for snapshots
written field by field with every wire-format oddity (padded tags and lengths, wrong
wire types, repeated fields, groups, field numbers 0 and past 2**29, truncations), the
hand path (forced on, whatever the size) must give exactly what the plain parser gives
(forced on): the same snapshot, state, migrations and versions, or the same error.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from test_key_state import load_the_old_way, outcome, snapshot_of, suspended_state

import beam_agents.blobs
import beam_agents.key_state
from beam_agents._protos import StateSnapshot, VersionedBlob
from beam_agents.blobs import MAX_SPLIT_FIELDS, split_fields
from beam_agents.key_state import dump_key_state, load_snapshot_for_replay

CELLS = dump_key_state(suspended_state())
SNAPSHOT = snapshot_of(CELLS)
LLM = StateSnapshot.DESCRIPTOR.fields_by_name["llm_cache"].number
TOOLS = StateSnapshot.DESCRIPTOR.fields_by_name["tool_cache"].number


@contextlib.contextmanager
def in_place_from(size: int) -> Iterator[None]:
    """Cells (and snapshots) of ``size`` bytes or more take the in-place (hand-read) path."""
    with (
        mock.patch.object(beam_agents.key_state, "LARGE_CELL_BYTES", size),
        mock.patch.object(beam_agents.blobs, "LARGE_CELL_BYTES", size),
    ):
        yield


def strict(data: bytes) -> Any:
    """What upb alone makes of ``data``: nothing is read by hand."""
    with in_place_from(sys.maxsize):
        return outcome(load_the_old_way, data)


def by_hand(data: bytes | bytearray) -> Any:
    """What replay makes of ``data`` with every cache blob read by hand."""
    with in_place_from(1):
        return outcome(load_snapshot_for_replay, data)


def padded_varint(n: int, extra: int = 0) -> bytes:
    """``n`` as a varint, with ``extra`` more bytes than it needs (still the same value)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    if extra:
        out[-1] |= 0x80
        out += b"\x80" * (extra - 1) + b"\x00"
    return bytes(out)


def field(
    number: int, wire_type: int, value: bytes = b"", tag_pad: int = 0, len_pad: int = 0
) -> bytes:
    tag = padded_varint(number << 3 | wire_type, tag_pad)
    if wire_type == 2:
        return tag + padded_varint(len(value), len_pad) + value
    return tag + value


def blob(kind: str, version: int, body: bytes) -> bytes:
    return VersionedBlob(kind=kind, schema_version=version, body=body).SerializeToString()


def test_a_taken_field_with_a_padded_tag_is_refused_as_the_parser_refuses_it() -> None:
    """Found by the hostile pass: a 6-byte tag of llm_cache vanished with the field."""
    whole = SNAPSHOT.SerializeToString(deterministic=True)
    head = bytes([LLM << 3 | 2]) + padded_varint(len(CELLS.llm_cache))
    assert whole.count(head) == 1
    for extra in range(1, 10):  # 5 bytes and fewer: valid; more: refused by upb
        padded = padded_varint(LLM << 3 | 2, extra) + padded_varint(len(CELLS.llm_cache))
        data = whole.replace(head, padded)
        expected = strict(data)
        assert isinstance(expected[0], str) == (extra > 4)
        assert by_hand(data) == expected
        assert by_hand(bytearray(data)) == expected


def test_a_blob_body_with_a_padded_tag_is_refused_as_the_parser_refuses_it() -> None:
    version, body = beam_agents.blobs.unwrap_blob("llm_cache", CELLS.llm_cache)
    for extra in (4, 5, 9):
        cell = blob("llm_cache", version, b"") + field(3, 2, body, tag_pad=extra)
        raw = snapshot_of(replace(CELLS, llm_cache=cell)).SerializeToString(deterministic=True)
        expected = strict(raw)
        assert isinstance(expected[0], str) == (extra > 4)
        assert by_hand(raw) == expected


def test_split_fields_refuses_a_tag_the_parser_refuses() -> None:
    assert split_fields(padded_varint(3 << 3 | 2, 5) + b"\x00", frozenset({3})) is None
    assert split_fields(padded_varint(1 << 32 | 2) + b"\x00", frozenset({3})) is None
    assert split_fields(padded_varint(3 << 3 | 2, 4) + b"\x00", frozenset({3})) is not None


NUMBERS = st.sampled_from([0, 1, 2, 3, 5, 6, 7, 8, 9, 11, 13, 14, 1000, (1 << 29) - 1, 1 << 29])
WIRE_TYPES = st.sampled_from([0, 0, 1, 2, 2, 2, 2, 3, 4, 5, 6, 7])


@st.composite
def cache_value(draw: st.DrawFn, number: int) -> bytes:
    """A cache field's value: its cell, or a blob around its body put together by hand."""
    cell = CELLS.llm_cache if number == LLM else CELLS.tool_cache
    if draw(st.booleans()):
        return cell
    kind = "llm_cache" if number == LLM else "tool_cache"
    version, body = beam_agents.blobs.unwrap_blob(kind, cell)
    parts = [
        field(1, 2, draw(st.sampled_from([kind, "memory", ""])).encode(), draw(st.integers(0, 6))),
        field(
            2, 0, padded_varint(draw(st.sampled_from([version, 1, 0, 99])), draw(st.integers(0, 3)))
        ),
        field(
            3,
            draw(st.sampled_from([2, 2, 2, 0, 5])),
            draw(st.sampled_from([body, body[:-1], b"", b"\x0a"])),
            draw(st.integers(0, 6)),
            draw(st.integers(0, 10)),
        ),
    ]
    order = draw(st.permutations(range(len(parts))))
    extra = draw(st.lists(st.sampled_from(parts), max_size=2))
    return b"".join([parts[i] for i in order] + extra)


@st.composite
def raw_field(draw: st.DrawFn) -> bytes:
    number = draw(st.sampled_from([LLM, TOOLS, LLM, TOOLS]) | NUMBERS)
    wire_type = draw(WIRE_TYPES)
    if wire_type == 0:
        value = padded_varint(draw(st.integers(0, 1 << 64)), draw(st.integers(0, 2)))
    elif wire_type == 1:
        value = draw(st.binary(min_size=8, max_size=8))
    elif wire_type == 5:
        value = draw(st.binary(min_size=4, max_size=4))
    elif wire_type == 2 and number in (LLM, TOOLS):
        value = draw(cache_value(number))
    elif wire_type == 2:
        value = draw(st.binary(max_size=8))
    else:
        value = b""
    return field(number, wire_type, value, draw(st.integers(0, 6)), draw(st.integers(0, 10)))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(raw_field(), max_size=5),
    st.integers(0, 1 << 20),
    st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_the_hand_reading_agrees_with_the_parser_on_any_wire_format(
    fields: list[bytes], where: int, cut: int | None
) -> None:
    whole = SNAPSHOT.SerializeToString(deterministic=True)
    # The extra fields go before or after the snapshot's own (the last occurrence wins).
    data = b"".join(fields) + whole if where % 2 else whole + b"".join(fields)
    if cut is not None:
        data = data[: cut % (len(data) + 1)]

    expected = strict(data)
    assert by_hand(data) == expected
    assert by_hand(bytearray(data)) == expected


def test_a_snapshot_of_very_many_fields_is_parsed_whole_with_the_same_result() -> None:
    """Hostile pass: the hand walk costs about half a microsecond a field; a snapshot of
    millions of two-byte unknown fields (a minute at the size cap) goes to upb instead."""
    whole = SNAPSHOT.SerializeToString(deterministic=True)
    unknown = bytes([14 << 3, 0])  # field 14 (not a StateSnapshot field), varint 0
    few = whole + unknown * 100
    many = whole + unknown * MAX_SPLIT_FIELDS

    assert split_fields(few, frozenset({LLM})) is not None
    assert split_fields(many, frozenset({LLM})) is None
    for data in (few, many):
        expected = strict(data)
        assert not isinstance(expected[0], str)  # loaded
        assert by_hand(data) == expected
