"""file:///DIR: trace-stream files and snapshot files, each appearing whole or not at all."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from beam_agents._protos import StateSnapshot
from beam_agents.errors import SinkError
from beam_agents.sinks import open_sink
from beam_agents.sinks.file import snapshot_file_name
from beam_agents.trace_events import serialize_trace_event
from beam_agents.trace_stream import read_trace_stream, trace_stream_files

from .records import activation_events, snapshot


def test_each_flush_writes_the_buffered_events_as_one_new_trace_stream(tmp_path: Path) -> None:
    out = tmp_path / "traces" / "nested"  # created by open()
    writer = open_sink(f"file://{out}", role="traces")
    first, second = activation_events(b"k1", 1), activation_events(b"k2", 5)
    for event in first:
        writer.write_trace(event)
    writer.flush()
    writer.flush()  # nothing buffered: no empty file
    for event in second:
        writer.write_trace(event)
    writer.flush()
    writer.close()

    files = trace_stream_files(out)
    assert len(files) == 2
    streams = sorted(
        ([serialize_trace_event(e) for e in read_trace_stream(f)] for f in files),
        key=lambda s: s[0],
    )
    assert streams == sorted(
        ([serialize_trace_event(e) for e in first], [serialize_trace_event(e) for e in second]),
        key=lambda s: s[0],
    )
    assert all(f.name.startswith("traces-") and f.suffix == ".pb" for f in files)
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_two_writers_on_one_directory_never_overwrite_each_other(tmp_path: Path) -> None:
    writers = [open_sink(f"file://{tmp_path}", role="traces") for _ in range(2)]
    for n, writer in enumerate(writers):
        writer.write_trace(activation_events(b"k", n)[0])
        writer.flush()
    assert len(trace_stream_files(tmp_path)) == 2


def test_a_snapshot_is_one_file_named_by_key_seq_and_request_id(tmp_path: Path) -> None:
    item = snapshot(b"customer-42", 7, request_id="incident-1734")
    writer = open_sink(f"file://{tmp_path}", role="snapshots")
    writer.write_snapshot(item)
    writer.flush()
    writer.close()
    path = tmp_path / "637573746f6d65722d3432-7-incident-1734.pb"
    assert path.read_bytes() == item.SerializeToString(deterministic=True)
    assert StateSnapshot.FromString(path.read_bytes()) == item


@pytest.mark.parametrize(
    "request_id", ["../../etc/passwd", "a/b", "a_b", "a%2Fb", "r é ☃", "", "."]
)
def test_request_ids_are_encoded_reversibly_and_never_leave_the_directory(
    tmp_path: Path, request_id: str
) -> None:
    name = snapshot_file_name(snapshot(b"k", 3, request_id=request_id))
    assert "/" not in name
    prefix = "6b-3-"
    assert name.startswith(prefix) and name.endswith(".pb")
    assert urllib.parse.unquote(name[len(prefix) : -len(".pb")]) == request_id


def test_distinct_request_ids_never_share_a_file_name() -> None:
    ids = ["a/b", "a_b", "a%2Fb", "a b", "a+b"]
    names = {snapshot_file_name(snapshot(b"k", 3, request_id=r)) for r in ids}
    assert len(names) == len(ids)


def test_an_overlong_name_is_shortened_but_stays_unique() -> None:
    a = snapshot_file_name(snapshot(b"k" * 200, 3, request_id="x" * 300))
    b = snapshot_file_name(snapshot(b"k" * 200, 3, request_id="x" * 299))
    assert len(a.encode()) <= 255 and len(b.encode()) <= 255
    assert a != b


def test_a_directory_that_cannot_be_created_fails_open(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.raises(SinkError) as caught:
        open_sink(f"file://{blocker}/traces", role="traces")
    assert caught.value.uri == f"file://{blocker}/traces"


def test_a_write_that_fails_fails_the_flush_naming_the_record(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer = open_sink(f"file://{out}", role="snapshots")
    writer.write_snapshot(snapshot(b"k1", 3))
    out.rmdir()
    out.write_bytes(b"")  # the directory is gone: nothing can be written into it
    with pytest.raises(SinkError) as caught:
        writer.flush()
    assert caught.value.record == "snapshot key=6b31 seq=3 request_id='incident-1734'"

    traces = open_sink(f"file://{tmp_path / 'traces'}", role="traces")
    traces.write_trace(activation_events(b"k1", 3)[0])
    traces.write_trace(activation_events(b"k1", 3)[1])
    (tmp_path / "traces").rmdir()
    with pytest.raises(SinkError) as caught:
        traces.flush()
    assert caught.value.record == "trace key=6b31 seq=3 index=0 (and 1 more)"
