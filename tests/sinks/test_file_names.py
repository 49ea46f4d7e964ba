"""Temporary names always fit NAME_MAX: keys and request ids of every length, ASCII or not.

Before: the temporary name added 38 bytes to a final name capped at 255, so an
entity key of ~105+ bytes or a long request id failed the sink (and the
pipeline, after retries); ``convert-bq -o`` had the same pattern.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from beam_agents.cli import main
from beam_agents.sinks import open_sink
from beam_agents.sinks.file import snapshot_file_name
from beam_agents.trace_stream import NAME_MAX_BYTES, read_trace_stream, temporary_sibling

from .records import activation_events, snapshot

KEY_LENGTHS = [1, 64, 100, 104, 105, 106, 110, 120, 126, 127, 128, 200, 1000]
REQUEST_IDS = [
    "",
    "r" * 100,
    "r" * 180,
    "r" * 255,
    "r" * 4000,
    "é" * 40,  # 80 bytes, 240 once percent-encoded
    "日本" * 50,
    "a/../b\\c:%",
]


def _only_final_files(directory: Path) -> list[str]:
    names = sorted(p.name for p in directory.iterdir())
    assert not [n for n in names if n.startswith(".")], f"a temporary file was left: {names}"
    return names


@pytest.mark.parametrize("key_length", KEY_LENGTHS)
def test_snapshot_sink_writes_any_key_and_request_id(tmp_path: Path, key_length: int) -> None:
    writer = open_sink(f"file://{tmp_path}", role="snapshots")
    written = []
    for n, request_id in enumerate(REQUEST_IDS):
        item = snapshot(bytes([0xFF]) * key_length, n, request_id=request_id)
        writer.write_snapshot(item)
        written.append(snapshot_file_name(item))
    writer.flush()
    writer.close()
    names = _only_final_files(tmp_path)
    assert names == sorted(set(written))
    for name in names:
        assert len(os.fsencode(name)) <= NAME_MAX_BYTES


@pytest.mark.parametrize(
    "name",
    ["a", "a" * 200, "a" * 217, "a" * 218, "a" * 255, "é" * 127, "日" * 85, "x" * 253 + "é"],
)
def test_temporary_sibling_fits_name_max(tmp_path: Path, name: str) -> None:
    assert len(os.fsencode(name)) <= NAME_MAX_BYTES  # a valid final name
    tmp = temporary_sibling(tmp_path / name)
    assert len(os.fsencode(tmp.name)) <= NAME_MAX_BYTES
    assert tmp.name.startswith(".") and tmp.name.endswith(".tmp") and tmp.parent == tmp_path
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # the file system accepts it
    os.close(fd)


def _rows_file(tmp_path: Path) -> Path:
    rows = tmp_path / "rows.json"
    from beam_agents.bigquery_rows import trace_event_to_row

    rows.write_text(json.dumps([trace_event_to_row(e) for e in activation_events(b"k", 1)]))
    return rows


@pytest.mark.parametrize("name", ["o" * 100, "o" * 218, "o" * 252 + ".pb", "é" * 126 + ".pb"])
def test_convert_bq_output_names_up_to_name_max(tmp_path: Path, name: str) -> None:
    rows = _rows_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["convert-bq", str(rows), "-o", str(out / name)])
    assert code == 0, err.getvalue()
    assert _only_final_files(out) == [name]
    assert len(list(read_trace_stream(out / name))) == len(activation_events(b"k", 1))


def test_convert_bq_output_name_past_name_max_is_a_usage_error(tmp_path: Path) -> None:
    rows = _rows_file(tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["convert-bq", str(rows), "-o", str(tmp_path / ("o" * 256))])
    assert code == 2
    assert "cannot write" in err.getvalue() and "name too long" in err.getvalue().lower()
