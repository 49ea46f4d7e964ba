"""Hostile inputs from the issue-14 review, each reproduced: exit 2 (or 3), a message, no hang.

Special files (``/dev/zero``, FIFOs, directories), inputs over their size cap,
a trace index of 4294967295, ``tui`` with standard input as an input or
without a terminal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, Inputs, KeyHistory, options
from test_cli import run

from beam_agents._protos import TraceEvent
from beam_agents.cli import tui
from beam_agents.replay.engine import replay
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def test_a_trace_index_of_4294967295_is_refused_without_building_a_range(inputs: Inputs) -> None:
    events = [TraceEvent.FromString(e.SerializeToString()) for e in inputs.history.trace]
    events[-1].index = 4294967295
    traces = inputs.history.trace_bytes(events)
    started = time.monotonic()
    result = replay(options(inputs.snapshot.read_bytes(), traces, event=inputs.event))
    assert time.monotonic() - started < 30  # before: a set of 4 billion ints (GBs, then an error)
    assert result.verdict is Verdict.USAGE_ERROR
    assert "incomplete: no event at index" in result.error
    assert "internal error" not in result.error


@pytest.mark.parametrize("flag", ["snapshot", "event", "traces"])
def test_dev_zero_is_refused_as_a_device(
    flag: str, inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(inputs.flags(**{flag: "/dev/zero"}), capsys)
    assert code == 2
    assert f"--{flag} /dev/zero is a device, not a regular file" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("flag", ["snapshot", "event", "traces"])
def test_a_fifo_with_no_writer_is_refused_not_waited_on(flag: str, inputs: Inputs) -> None:
    fifo = inputs.directory / "fifo"
    os.mkfifo(fifo)
    out = subprocess.run(
        [SCRIPT, *inputs.flags(**{flag: str(fifo)})], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out.stderr
    assert f"--{flag} {fifo} is a FIFO (named pipe), not a regular file" in out.stderr


@pytest.mark.parametrize("flag", ["snapshot", "event"])
def test_a_directory_where_a_file_is_expected(
    flag: str, inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(inputs.flags(**{flag: str(inputs.directory)}), capsys)
    assert code == 2
    assert "is a directory, not a regular file" in err


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        ("snapshot", "BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES"),
        ("event", "BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES"),
        ("traces", "BEAM_AGENTS_REPLAY_MAX_TRACES_BYTES"),
    ],
)
def test_an_input_over_its_cap_names_the_cap_and_how_to_raise_it(
    flag: str, env: str, inputs: Inputs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env, "10")
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2
    assert f"larger than the 10-byte cap for --{flag} inputs" in err
    assert f"{env}=<bytes>" in err
    monkeypatch.setenv(env, "lots")
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2 and f"{env}='lots' is not a positive number of bytes" in err
    monkeypatch.setenv(env, str(1 << 30))
    assert run(inputs.flags(), capsys)[0] == 0


def test_an_input_over_its_cap_on_stdin_is_refused(inputs: Inputs) -> None:
    out = subprocess.run(
        [SCRIPT, *inputs.flags(snapshot="-")],
        input=inputs.snapshot.read_bytes(),
        capture_output=True,
        timeout=60,
        env={**os.environ, "BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES": "100"},
    )
    assert out.returncode == 2
    assert b"--snapshot <stdin> is larger than the 100-byte cap" in out.stderr


def test_events_from_standard_input_is_refused_by_name(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    # --events reads files (a dump, or a directory of them), never standard input: say so,
    # and point at --event -, rather than "--events -: no such file or directory".
    code, out, err = run([*inputs.flags(event=None), "--events", "-"], capsys)
    assert (code, out) == (2, "")
    assert "--events cannot be - (standard input)" in err and "--event -" in err
    assert "no such file" not in err


@pytest.mark.parametrize("flag", ["snapshot", "event", "traces"])
def test_tui_refuses_standard_input_as_an_input(
    flag: str, inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["tui", *inputs.flags(**{flag: "-"})], capsys)
    assert (code, out) == (2, "")
    assert f"--{flag} cannot be - (standard input)" in err


def test_tui_without_a_terminal_points_to_the_headless_report(
    inputs: Inputs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tui, "_has_terminal", lambda: False)
    code, out, err = run(["tui", *inputs.flags()], capsys)
    assert (code, out) == (2, "")
    # It advised adding --headless, which tui refuses: it names the command that takes it.
    assert "needs a terminal" in err and "without 'tui'" in err and "--headless" not in err
    code, out, _ = run([*inputs.flags(), "--json"], capsys)
    assert code == 0 and out.startswith("{")


def test_tui_without_a_terminal_as_a_process_exits_2_and_writes_no_escape_codes(
    inputs: Inputs,
) -> None:
    out = subprocess.run(
        [SCRIPT, "tui", *inputs.flags()],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert b"\x1b" not in out.stdout + out.stderr
    assert b"needs a terminal" in out.stderr


def test_a_fifo_as_the_bundle_argument_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = subprocess.run([SCRIPT, str(fifo)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr


# -- values that used to end in "internal error" ---------------------------------------------


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"x": 1e999}', "the number 1e999 is out of range"),
        (b'{"x": -1e999}', "the number -1e999 is out of range"),
        (b'{"x": ["\\ud800"]}', "under key 'x' holds a string with a lone surrogate"),
        (b'{"\\udc00": 1}', "holds a key with a lone surrogate"),
        (b'{"x": ' + b"[" * 300 + b"]" * 300 + b"}", "nested deeper than 256 levels"),
        (b'{"x": ' + b"9" * 5000 + b"}", "value has 5000 digits"),
    ],
)
def test_a_snapshot_memory_value_no_writer_produces_is_a_usage_error(
    inputs: Inputs, body: bytes, named: str
) -> None:
    from beam_agents._protos import StateSnapshot
    from beam_agents.blobs import encode_blob

    snapshot = StateSnapshot.FromString(inputs.snapshot.read_bytes())
    snapshot.memory = encode_blob("memory", body)
    result = replay(
        options(snapshot.SerializeToString(), inputs.history.trace_bytes(), event=inputs.event)
    )
    assert result.verdict is Verdict.USAGE_ERROR
    assert "internal error" not in result.error
    assert "corrupt memory blob" in result.error and named in result.error


@pytest.mark.parametrize(
    ("provenance", "named"),
    [
        (
            {"deleted": {}, "since": 0, "written": {"last": 99}},
            "its provenance says seq 99 last wrote 'last', after the snapshot's seq 1",
        ),
        (
            {"deleted": {"gone": 5}, "since": 0, "written": {}},
            "its provenance says seq 5 last deleted 'gone', after the snapshot's seq 1",
        ),
        ({"deleted": {}, "since": 50, "written": {}}, "writes from seq 50 on, after the snapshot's"),
    ],
)
def test_a_memory_provenance_naming_a_seq_after_the_snapshot_is_a_usage_error(
    inputs: Inputs, provenance: dict[str, Any], named: str
) -> None:
    """Trusted, it would have replay name seq 99 as the one that rewrote a key it read."""
    import json

    from beam_agents import canonical_json
    from beam_agents._protos import StateSnapshot, VersionedBlob
    from beam_agents.blobs import encode_blob

    snapshot = StateSnapshot.FromString(inputs.snapshot.read_bytes())
    assert snapshot.seq == 1
    memory = json.loads(VersionedBlob.FromString(snapshot.memory).body)["memory"]
    snapshot.memory = encode_blob(
        "memory", canonical_json.dumps({"memory": memory, "provenance": provenance})
    )
    result = replay(
        options(snapshot.SerializeToString(), inputs.history.trace_bytes(), event=inputs.event)
    )
    assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2
    assert "corrupt memory blob" in result.error and named in result.error, result.error


def test_paired_surrogate_escapes_are_ordinary_text(inputs: Inputs) -> None:
    from beam_agents.migrations import parse_json_object

    assert parse_json_object("memory", b'{"e": "\\ud83d\\ude00", "b": "\\\\ud800"}') == {
        "e": "\U0001f600",
        "b": "\\ud800",
    }


def test_the_memory_writer_refuses_what_the_loader_would(inputs: Inputs) -> None:
    from beam_agents.blobs import dump_memory
    from beam_agents.errors import MemoryValueError

    deep: object = 1
    for _ in range(300):
        deep = [deep]
    with pytest.raises(MemoryValueError, match="nested deeper than 256 levels"):
        dump_memory({"x": deep})


def _rows(tmp_path: Path) -> list[dict[str, Any]]:
    from beam_agents.bigquery_rows import trace_event_to_row

    return [trace_event_to_row(e) for e in inputs_events()]


def inputs_events() -> list[TraceEvent]:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    history.send(event_envelope(KEY, "ask", b"where is A1?", time_ms=T0))
    return history.trace


def _convert(tmp_path: Path, text: str, *, stdout: str | None = None) -> tuple[int, str]:
    rows = tmp_path / "rows.json"
    rows.write_text(text, encoding="utf-8", errors="surrogatepass")
    args = [SCRIPT, "convert-bq", str(rows)]
    if stdout is None:
        args += ["-o", str(tmp_path / "out.pb")]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    else:
        with open(stdout, "wb") as sink:
            out = subprocess.run(args, stdout=sink, stderr=subprocess.PIPE, text=True, timeout=120)
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr
    return out.returncode, out.stderr


def test_convert_bq_bad_values_are_usage_errors_naming_the_value(tmp_path: Path) -> None:
    import json

    row = _rows(tmp_path)[1]
    deep = "[" + json.dumps({**row, "name": None}).replace("null", "[" * 100_000 + "]" * 100_000) + "]"
    code, err = _convert(tmp_path, deep)
    assert code == 2 and "nested too deeply" in err
    code, err = _convert(tmp_path, json.dumps([{**row, "seq": 1}]).replace('"seq": 1', '"seq": ' + "9" * 5000))
    assert code == 2 and "value has 5000 digits" in err
    floaty = {**row, "attributes": [{"name": "x", "value_type": "double_value", "double_value": 1}]}
    code, err = _convert(
        tmp_path, json.dumps([floaty]).replace('"double_value": 1', f'"double_value": {10**400}')
    )
    assert code == 2 and "'attributes[0].double_value' holds an integer of 401 digits" in err
    code, err = _convert(tmp_path, json.dumps([{**row, "name": "\ud800"}]))
    assert code == 2 and "column 'name' holds a lone surrogate (U+D800" in err
    code, err = _convert(tmp_path, json.dumps([{**row, "name": "x" * (17 * 1024 * 1024)}]))
    assert code == 2 and "over the 16777216-byte frame limit" in err
    assert not (tmp_path / "out.pb").exists()


def test_convert_bq_to_a_full_disk_is_a_usage_error(tmp_path: Path) -> None:
    import json

    code, err = _convert(tmp_path, json.dumps(_rows(tmp_path)), stdout="/dev/full")
    assert code == 2 and "cannot write standard output: No space left on device" in err


@pytest.mark.parametrize("rows", ["/dev/zero", "fifo", "dir"])
def test_convert_bq_reads_regular_files_only(tmp_path: Path, rows: str) -> None:
    path = rows
    if rows == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    elif rows == "dir":
        path = str(tmp_path)
    out = subprocess.run(
        [SCRIPT, "convert-bq", path, "-o", str(tmp_path / "o.pb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "not a regular file" in out.stderr, out.stderr


def test_a_trace_event_with_500k_attributes_is_refused(inputs: Inputs) -> None:
    events = [TraceEvent.FromString(e.SerializeToString()) for e in inputs.history.trace]
    for i in range(5000):
        events[0].attributes[f"x.{i}"].int_value = i
    result = replay(options(inputs.snapshot.read_bytes(), inputs.history.trace_bytes(events), event=inputs.event))
    assert result.verdict is Verdict.USAGE_ERROR
    assert "carries 50" in result.error and "more than the 4096 a trace event may have" in result.error


def test_json_is_streamed_and_identical_to_the_document(inputs: Inputs) -> None:
    import io
    import json

    from beam_agents.replay.reporting.json_doc import render_json, result_to_dict, write_json

    result = replay(options(inputs.snapshot.read_bytes(), inputs.history.trace_bytes(), event=inputs.event))
    out = io.StringIO()
    write_json(result, out, chunk_chars=64)
    text = out.getvalue()
    assert text == render_json(result) and text.isascii() and text.endswith("}\n")
    # The same data as the eager document (the layout is json_lines': a line per element).
    assert json.loads(text) == json.loads(json.dumps(result_to_dict(result)))
    event_lines = [line for line in text.splitlines() if line.startswith('    {"index": ')]
    assert len(event_lines) == len(result.events)
    assert len(json.loads(json.dumps(result_to_dict(result)))["events"]) == len(result.events) > 0


@pytest.mark.parametrize(
    "argv",
    [["--json", "--bogus"], ["--json", "--snapshot", "x"], ["--json", "--seq", "-1", "--snapshot", "s"]],
)
def test_json_prints_a_document_even_when_the_command_line_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    code, out, err = run(argv, capsys)
    assert code == 2 and err.startswith("beam-agents-replay: error:")
    document = json.loads(out)
    assert document["verdict"] == "error" and document["exit_code"] == 2
    assert document["error"] and document["error"] in err
