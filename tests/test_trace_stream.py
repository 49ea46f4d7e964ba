"""Trace streams: framing, key filtering, chunked reading, errors on bad bytes, atomic writes."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_agents._protos import TraceEvent
from beam_agents.errors import FrameTooLargeError, TraceStreamError, TruncatedStreamError
from beam_agents.trace_events import make_event, serialize_trace_event
from beam_agents.trace_stream import (
    MAX_FRAME_BYTES,
    iter_frames,
    read_activation_frames,
    read_trace_stream,
    trace_stream_files,
    write_trace_stream,
)

# Keys chosen to trip a prefix check that forgets the length: b"k1" is a prefix
# of b"k10" and b"k1\x00", b"k" of both; b"" is the key with no field 1 at all.
KEYS = [b"k1", b"k10", b"k", b"", b"k1\x00", b"customer-42"]


def _events(keys: list[bytes] = KEYS, activations: int = 3) -> list[TraceEvent]:
    """Activations of several keys, interleaved as a sink writes them."""
    out = []
    for seq in range(activations):
        for key in keys:
            for index in range(3):
                out.append(
                    make_event(
                        entity_key=key,
                        seq=seq,
                        index=index,
                        kind=TraceEvent.LLM_CALL if index else TraceEvent.ACTIVATION_START,
                        name=f"step-{index}",
                        now_ms=1_734_000_000_000 + seq,
                        attributes={"beam_agents.call.ordinal": index, "note": "x" * (7 * index)},
                    )
                )
    return out


def _stream(events: list[TraceEvent]) -> bytes:
    out = io.BytesIO()
    write_trace_stream(out, events)
    return out.getvalue()


def _varint_bytes(n: int) -> bytes:
    """A base-128 varint, encoded independently of the module under test."""
    head = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        head.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(head)


def _frame(payload: bytes) -> bytes:
    return _varint_bytes(len(payload)) + payload


def _serialized(events: object) -> list[bytes]:
    return [serialize_trace_event(e) for e in events]  # type: ignore[attr-defined]


class _TrickleReader(io.RawIOBase):
    """A pipe-like binary stream that returns at most 3 bytes per read."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        chunk = self._data[self._pos : self._pos + min(3, len(buffer))]
        buffer[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


# --------------------------------------------------------------------------- round trip


def test_write_then_read_a_path_gives_back_the_same_event_bytes(tmp_path: Path) -> None:
    events = _events()
    path = tmp_path / "traces.pb"
    assert write_trace_stream(path, events) == len(events)
    assert _serialized(read_trace_stream(path)) == _serialized(events)


def test_write_then_read_a_file_object_and_bytes_give_the_same_events() -> None:
    events = _events()
    data = _stream(events)
    assert _serialized(read_trace_stream(data)) == _serialized(events)
    assert _serialized(read_trace_stream(io.BytesIO(data))) == _serialized(events)


def test_the_stream_is_varint_length_frames_of_the_deterministic_bytes() -> None:
    events = _events()
    assert _stream(events) == b"".join(_frame(serialize_trace_event(e)) for e in events)


def test_iter_frames_yields_each_frame_with_the_offset_of_its_length_prefix() -> None:
    events = _events()
    data = _stream(events)
    offsets, payloads = zip(*iter_frames(data), strict=True)
    assert list(payloads) == _serialized(events)
    expected, at = [], 0
    for payload in payloads:
        expected.append(at)
        at += len(_frame(payload))
    assert list(offsets) == expected
    assert at == len(data)


def test_an_empty_stream_holds_no_events(tmp_path: Path) -> None:
    path = tmp_path / "empty.pb"
    assert write_trace_stream(path, []) == 0
    assert path.read_bytes() == b""
    assert list(read_trace_stream(path)) == []
    assert list(read_trace_stream(path, entity_key=b"k1")) == []


def test_a_file_object_is_read_from_its_position_and_left_open() -> None:
    events = _events()
    data = _stream(events)
    first = len(_frame(serialize_trace_event(events[0])))
    stream = io.BytesIO(data)
    stream.seek(first)
    assert _serialized(read_trace_stream(stream)) == _serialized(events[1:])
    assert not stream.closed


def test_a_stream_returning_short_reads_is_read_whole() -> None:
    events = _events()
    data = _stream(events)
    assert _serialized(read_trace_stream(_TrickleReader(data))) == _serialized(events)
    assert _serialized(read_trace_stream(_TrickleReader(data), entity_key=b"k10")) == _serialized(
        e for e in events if e.entity_key == b"k10"
    )


# --------------------------------------------------------------------------- filtering


@pytest.mark.parametrize("key", [*KEYS, b"absent", b"k100"])
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1 << 20])
def test_filtering_by_key_yields_exactly_that_keys_events_in_order(
    key: bytes, chunk_size: int
) -> None:
    events = _events()
    data = _stream(events)
    got = list(read_trace_stream(data, entity_key=key, chunk_size=chunk_size))
    assert _serialized(got) == _serialized(e for e in events if e.entity_key == key)


def test_filtering_parses_a_frame_that_does_not_start_with_the_key_field() -> None:
    # A foreign writer may put entity_key after other fields; the filter must
    # still find its events (it parses any frame not starting with field 1).
    event = _events(keys=[b"k1"], activations=1)[0]
    key_field = b"\x0a\x02k1"
    canonical = serialize_trace_event(event)
    assert canonical.startswith(key_field)
    reordered = canonical[len(key_field) :] + key_field
    data = _frame(reordered) + _frame(canonical)
    got = list(read_trace_stream(data, entity_key=b"k1"))
    assert [e.entity_key for e in got] == [b"k1", b"k1"]


def test_filtering_for_the_empty_key_includes_an_empty_frame() -> None:
    # An all-default event serializes to zero bytes: a zero-length frame.
    empty = TraceEvent()
    data = _stream([empty, *_events(keys=[b"k1"], activations=1)])
    assert data[0] == 0
    assert _serialized(read_trace_stream(data, entity_key=b"")) == [b""]
    assert len(list(read_trace_stream(data, entity_key=b"k1"))) == 3


def test_filtering_is_exact_when_later_keys_vary_where_the_first_keys_did_not() -> None:
    # The filter samples the first frames to pick which key byte to test first;
    # a stream whose keys change shape later must still filter exactly.
    early = _events(keys=[b"x%d-eu" % i for i in range(10)], activations=20)  # 600 events
    late = _events(keys=[b"x0-e%d" % i for i in range(10)] + [b"x0-eu"], activations=2)
    events = early + late
    data = _stream(events)
    for key in (b"x0-eu", b"x0-e5", b"x5-eu", b"x0-e"):
        got = read_trace_stream(data, entity_key=key)
        assert _serialized(got) == _serialized(e for e in events if e.entity_key == key)


@pytest.mark.parametrize("key", [*KEYS, b"absent"])
@pytest.mark.parametrize("seq", [0, 1, 2, 200])
@pytest.mark.parametrize("chunk_size", [1, 7, 1 << 20])
def test_reading_one_activation_yields_what_parsing_every_frame_would(
    key: bytes, seq: int, chunk_size: int
) -> None:
    # seq 0 is not written at all (proto3): those frames are parsed and compared.
    events = _events(activations=3) + [
        TraceEvent(entity_key=k, seq=200, index=i, kind=TraceEvent.TOOL_CALL, name="t")
        for k in KEYS
        for i in range(2)
    ]
    data = _stream(events)
    got = [
        e for e, _ in read_activation_frames(data, entity_key=key, seq=seq, chunk_size=chunk_size)
    ]
    assert _serialized(got) == _serialized(
        e for e in events if e.entity_key == key and e.seq == seq
    )


def test_reading_one_activation_skips_the_others_unparsed() -> None:
    # Another activation's frame is told apart by its prefix: a body that would not even
    # parse is skipped (what makes a 100,000-event activation after another quick to find).
    wanted = TraceEvent(entity_key=b"k1", seq=2, index=0, kind=TraceEvent.ACTIVATION_START)
    other = b"\x0a\x02k1\x10\x01" + b"\xff" * 20  # key k1, seq 1, then garbage
    data = _frame(other) + _frame(serialize_trace_event(wanted))
    got = [e for e, _ in read_activation_frames(data, entity_key=b"k1", seq=2)]
    assert _serialized(got) == _serialized([wanted])
    with pytest.raises(TraceStreamError):
        list(read_trace_stream(data, entity_key=b"k1"))


def test_reading_one_activation_parses_a_frame_whose_seq_does_not_follow_the_key() -> None:
    event = TraceEvent(entity_key=b"k1", seq=2, index=4, kind=TraceEvent.TOOL_CALL, name="t")
    canonical = serialize_trace_event(event)
    key_field = b"\x0a\x02k1"
    seq_field = b"\x10\x02"
    assert canonical.startswith(key_field + seq_field)
    # the seq field moved to the end, as a foreign writer may order fields
    reordered = key_field + canonical[len(key_field + seq_field) :] + seq_field
    got = [e for e, _ in read_activation_frames(_frame(reordered), entity_key=b"k1", seq=2)]
    assert [(e.seq, e.index) for e in got] == [(2, 4)]


# --------------------------------------------------------------------------- chunking


@pytest.mark.parametrize("chunk_size", [1, 2, 7, 13])
def test_frames_spanning_chunk_boundaries_read_the_same(chunk_size: int) -> None:
    events = _events()
    data = _stream(events)
    assert list(iter_frames(data, chunk_size=chunk_size)) == list(iter_frames(data))
    stream = io.BytesIO(data)
    assert _serialized(read_trace_stream(stream, chunk_size=chunk_size)) == _serialized(events)


def test_a_file_many_chunks_long_is_read_whole(tmp_path: Path) -> None:
    keys = [b"key-%03d" % i for i in range(40)]
    events = _events(keys=keys, activations=25)  # 3,000 events
    path = tmp_path / "big.pb"
    write_trace_stream(path, events)
    assert path.stat().st_size > 50 * 4096
    assert _serialized(read_trace_stream(path, chunk_size=4096)) == _serialized(events)
    assert _serialized(read_trace_stream(path, entity_key=b"key-017", chunk_size=4096)) == (
        _serialized(e for e in events if e.entity_key == b"key-017")
    )


def test_a_frame_longer_than_the_chunk_is_read_whole(tmp_path: Path) -> None:
    # 100 kB: a three-byte length prefix, and many chunks for one frame.
    big = make_event(
        entity_key=b"k1", seq=1, index=0, kind=1, name="big", now_ms=0,
        attributes={"blob": b"\x00" * 100_000},
    )  # fmt: skip
    events = [*_events(activations=1), big, *_events(activations=1)]
    path = tmp_path / "traces.pb"
    write_trace_stream(path, events)
    for chunk_size in (1024, 1 << 20):
        got = read_trace_stream(path, entity_key=b"k1", chunk_size=chunk_size)
        assert _serialized(got) == _serialized(e for e in events if e.entity_key == b"k1")


# --------------------------------------------------------------------------- errors


def test_a_truncated_final_frame_names_the_offset_where_it_starts(tmp_path: Path) -> None:
    events = _events()
    data = _stream(events)
    last_start = len(data) - len(_frame(serialize_trace_event(events[-1])))
    path = tmp_path / "cut.pb"
    path.write_bytes(data[:-3])
    for read in (
        lambda: list(read_trace_stream(path)),
        lambda: list(read_trace_stream(path, entity_key=b"zzz", chunk_size=7)),
        lambda: list(iter_frames(path)),
    ):
        with pytest.raises(TruncatedStreamError) as caught:
            read()
        assert caught.value.offset == last_start
        assert caught.value.source == str(path)
        assert str(last_start) in str(caught.value)


def test_a_stream_cut_inside_a_length_prefix_is_truncated() -> None:
    data = _stream(_events()) + b"\x80"  # a continuation byte, then the end
    with pytest.raises(TruncatedStreamError) as caught:
        list(read_trace_stream(data))
    assert caught.value.offset == len(data) - 1
    assert caught.value.source == "<bytes>"


def test_a_frame_over_the_limit_is_refused_before_it_is_buffered() -> None:
    head = _stream(_events(activations=1))
    # Declares MAX_FRAME_BYTES + 1 bytes and holds none: refused, not "truncated".
    data = head + _varint_bytes(MAX_FRAME_BYTES + 1)
    for read in (
        lambda: list(read_trace_stream(io.BytesIO(data))),
        lambda: list(read_trace_stream(data, entity_key=b"k1")),
        lambda: list(iter_frames(data, chunk_size=5)),
    ):
        with pytest.raises(FrameTooLargeError) as caught:
            read()
        assert caught.value.offset == len(head)
    with pytest.raises(FrameTooLargeError) as caught:
        list(read_trace_stream(io.BytesIO(data)))
    assert caught.value.source == "<stream>"


def test_a_frame_at_the_limit_is_accepted() -> None:
    filler = TraceEvent(entity_key=b"k1", name="n" * MAX_FRAME_BYTES)
    excess = len(serialize_trace_event(filler)) - MAX_FRAME_BYTES
    filler.name = "n" * (MAX_FRAME_BYTES - excess)  # the length prefix keeps its 4 bytes
    assert len(serialize_trace_event(filler)) == MAX_FRAME_BYTES
    data = _stream([*_events(keys=[b"k1"], activations=1), filler])
    got = list(read_trace_stream(data, entity_key=b"k1", chunk_size=1 << 16))
    assert len(got) == 4
    assert len(got[-1].name) == len(filler.name)


def test_an_over_long_length_prefix_is_refused_with_its_offset() -> None:
    head = _stream(_events(activations=1))
    data = head + b"\xff" * 11 + b"\x01"
    with pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(data))
    assert type(caught.value) is TraceStreamError
    assert caught.value.offset == len(head)


def test_a_frame_that_is_not_a_trace_event_is_refused_with_its_offset() -> None:
    head = _stream(_events(activations=1))
    data = head + _frame(b"\xff\xff\xff")  # an invalid field tag
    with pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(data))
    assert caught.value.offset == len(head)
    assert str(len(head)) in str(caught.value)
    # A bad frame that cannot be the key's (it starts with another key's field) is
    # skipped unparsed; one that does not start with field 1 is parsed and refused.
    other_key_bad = head + _frame(b"\x0a\x01z\xff")
    assert len(list(read_trace_stream(other_key_bad, entity_key=b"k1"))) == 3
    with pytest.raises(TraceStreamError):
        list(read_trace_stream(other_key_bad))
    with pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(data, entity_key=b"k1"))
    assert caught.value.offset == len(head)


def test_an_open_file_is_named_by_its_name_in_errors(tmp_path: Path) -> None:
    bad = tmp_path / "snapshot-by-mistake.pb"
    bad.write_bytes(_stream(_events(activations=1)) + _frame(b"\xff\xff\xff"))
    with open(bad, "rb") as stream, pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(stream))
    assert caught.value.source == str(bad) and str(caught.value).startswith(f"{bad}: ")
    # A stream without a name is still described, not named wrongly.
    with pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(io.BytesIO(bad.read_bytes())))
    assert caught.value.source == "<stream>"


def test_reading_a_missing_path_is_a_trace_stream_error(tmp_path: Path) -> None:
    with pytest.raises(TraceStreamError) as caught:
        list(read_trace_stream(tmp_path / "nope.pb"))
    assert caught.value.source == str(tmp_path / "nope.pb")


def test_readers_closed_early_or_never_started_leave_no_file_open(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"
    write_trace_stream(path, _events())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        reader = read_trace_stream(path)
        next(reader)
        reader.close()
        filtered = read_trace_stream(path, entity_key=b"k1")
        next(filtered)
        del filtered  # finalized without close()
        never_started = iter_frames(path)
        del never_started
        gc.collect()
    assert [w.message for w in caught if issubclass(w.category, ResourceWarning)] == []


_garbage_settings = settings(
    deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)


def _read_everything(data: bytes, chunk_size: int) -> None:
    list(iter_frames(data, chunk_size=chunk_size))
    list(read_trace_stream(data, chunk_size=chunk_size))
    list(read_trace_stream(io.BytesIO(data), entity_key=b"k1", chunk_size=chunk_size))
    list(read_trace_stream(data, entity_key=b"", chunk_size=chunk_size))


@_garbage_settings
@given(data=st.binary(max_size=400), chunk_size=st.integers(1, 64))
def test_garbage_bytes_raise_only_trace_stream_errors(data: bytes, chunk_size: int) -> None:
    with contextlib.suppress(TraceStreamError):
        _read_everything(data, chunk_size)


_VALID = _stream(_events(activations=1))


@_garbage_settings
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, len(_VALID)),
    chunk_size=st.integers(1, 64),
)
def test_corrupted_streams_raise_only_trace_stream_errors(
    edits: list[tuple[int, int]], cut: int, chunk_size: int
) -> None:
    data = bytearray(_VALID)
    for at, value in edits:
        data[at] = value
    with contextlib.suppress(TraceStreamError):
        _read_everything(bytes(data[:cut]), chunk_size)


# --------------------------------------------------------------------------- determinism

_EVENT_SCRIPT = """
import sys
from beam_agents.trace_events import make_event, serialize_trace_event
names = sys.argv[1].split(",")
values = {"a.str": "v", "b.int": 7, "c.bool": True, "d.float": 0.5, "e.bytes": b"\\x00\\x01",
          "f.str": "w", "g.int": -3}
ev = make_event(entity_key=b"customer-42", seq=7, index=2, kind=2, name="chat",
                now_ms=1734000000000, attributes={n: values[n] for n in names})
sys.stdout.write(serialize_trace_event(ev).hex())
"""


def test_serialization_is_identical_across_hash_seeds_and_attribute_order() -> None:
    orders = [
        "a.str,b.int,c.bool,d.float,e.bytes,f.str,g.int",
        "g.int,f.str,e.bytes,d.float,c.bool,b.int,a.str",
        "d.float,a.str,g.int,c.bool,f.str,e.bytes,b.int",
    ]
    outputs = set()
    for seed, order in zip(("0", "1", "4242"), orders, strict=True):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _EVENT_SCRIPT, order],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1
    event = TraceEvent()
    event.ParseFromString(bytes.fromhex(outputs.pop()))
    assert len(event.attributes) == 7


# --------------------------------------------------------------------------- files


def test_a_directory_stands_for_its_pb_files_sorted_by_name(tmp_path: Path) -> None:
    for name in ("b.pb", "a.pb", "c.txt", ".a.pb.0123.tmp", "10.pb"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub.pb").mkdir()
    (tmp_path / "sub.pb" / "inner.pb").write_bytes(b"")
    assert trace_stream_files(tmp_path) == [tmp_path / n for n in ("10.pb", "a.pb", "b.pb")]


def test_a_file_stands_for_itself(tmp_path: Path) -> None:
    path = tmp_path / "traces.bin"
    path.write_bytes(b"")
    assert trace_stream_files(path) == [path]
    assert trace_stream_files(str(path)) == [path]


def test_a_missing_path_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(TraceStreamError, match="no such file or directory") as caught:
        trace_stream_files(missing)
    assert caught.value.source == str(missing)
    assert str(missing) in str(caught.value)


# --------------------------------------------------------------------------- atomic write


def test_writing_a_path_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"
    write_trace_stream(path, _events())
    write_trace_stream(path, _events(activations=1))  # and over an existing file
    assert [p.name for p in tmp_path.iterdir()] == ["traces.pb"]
    assert len(list(read_trace_stream(path))) == len(_events(activations=1))


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"
    old = _events(activations=1)
    write_trace_stream(path, old)
    before = path.read_bytes()

    def failing() -> object:
        yield from _events()
        raise RuntimeError("the producer broke")

    with pytest.raises(RuntimeError, match="producer broke"):
        write_trace_stream(path, failing())  # type: ignore[arg-type]
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["traces.pb"]


def test_an_event_over_the_frame_limit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    huge = TraceEvent(entity_key=b"k1", name="n" * (MAX_FRAME_BYTES + 1))
    path = tmp_path / "traces.pb"
    with pytest.raises(FrameTooLargeError) as caught:
        write_trace_stream(path, [*_events(activations=1), huge])
    assert caught.value.offset == len(_stream(_events(activations=1)))
    assert list(tmp_path.iterdir()) == []
