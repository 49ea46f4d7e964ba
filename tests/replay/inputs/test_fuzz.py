"""Random and mutated bytes at every loader and at the CLI: exit 2 or 3 with a message, never a
traceback, never an internal error, never a hang."""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import replay_agents as ra
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents.cli import main
from beam_agents.replay.engine import replay
from beam_agents.replay.inputs.envelopes import load_event_source
from beam_agents.replay.inputs.snapshot import load_snapshot_source
from beam_agents.replay.inputs.traces import scan_traces
from beam_agents.replay.refusal import ReplayRefused
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def _valid_inputs() -> tuple[bytes, bytes, bytes]:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    history.send(event_envelope(KEY, "ask", b"where is A1?", time_ms=T0))
    refund = event_envelope(KEY, "refund", b"refund please", time_ms=T0 + 1)
    history.send(refund)
    return history.export(), history.trace_bytes(), refund.SerializeToString()


SNAPSHOT, TRACES, EVENT = _valid_inputs()


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` with a few bytes flipped, inserted, deleted, or cut short."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)


def any_bytes(valid: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=512), mutated(valid))


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(any_bytes(SNAPSHOT))
def test_the_snapshot_loader_only_refuses(data: bytes) -> None:
    try:
        load_snapshot_source(data)
    except ReplayRefused as refused:
        assert refused.verdict in (Verdict.USAGE_ERROR, Verdict.IRREPRODUCIBLE)
        assert refused.message


@FUZZ
@given(any_bytes(EVENT))
def test_the_event_loader_only_refuses(data: bytes) -> None:
    try:
        load_event_source(data)
    except ReplayRefused as refused:
        assert refused.verdict is Verdict.USAGE_ERROR and refused.message


@FUZZ
@given(any_bytes(TRACES), st.sampled_from([None, 1, 2]))
def test_the_trace_scan_only_refuses(data: bytes, seq: int | None) -> None:
    try:
        scan_traces([data], KEY, seq=seq)
    except ReplayRefused as refused:
        assert refused.verdict is Verdict.USAGE_ERROR and refused.message


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.just(SNAPSHOT), any_bytes(SNAPSHOT)),
    st.one_of(st.just(TRACES), any_bytes(TRACES)),
    st.one_of(st.none(), st.just(EVENT), any_bytes(EVENT)),
)
def test_the_engine_never_raises_nor_reports_an_internal_error(
    snapshot: bytes, traces: bytes, event: bytes | None
) -> None:
    result = replay(options(snapshot, traces, event=event))
    assert "internal error" not in result.error, result.error
    if result.verdict is Verdict.USAGE_ERROR:
        assert result.error
    if (snapshot, traces, event) != (SNAPSHOT, TRACES, EVENT):
        return
    assert result.verdict is Verdict.REPRODUCED  # the unmutated inputs (seq 2, the refund)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=256), st.binary(max_size=256), st.binary(max_size=256))
def test_the_cli_exits_2_or_3_on_random_files(snapshot: bytes, traces: bytes, event: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, data in (("snapshot", snapshot), ("traces", traces), ("event", event)):
            files[name] = Path(tmp) / f"{name}.pb"
            files[name].write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(
                [
                    "--snapshot",
                    str(files["snapshot"]),
                    "--traces",
                    str(files["traces"]),
                    "--event",
                    str(files["event"]),
                    "--agent",
                    "replay_agents:AGENT",
                    "--registry",
                    "replay_agents:TOOLS",
                ]
            )
    assert code in (2, 3)
    message = err.getvalue()
    if code == 2:
        assert message.startswith("beam-agents-replay: error:")
    assert "Traceback" not in message and "internal error" not in message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_console_script_exits_2_or_3_on_garbage(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    paths = []
    for name in ("snapshot", "traces", "event"):
        path = tmp_path / f"{name}.pb"
        path.write_bytes(rng.randbytes(rng.randrange(1, 400)))
        paths.append(str(path))
    out = subprocess.run(
        [
            SCRIPT,
            "--snapshot",
            paths[0],
            "--traces",
            paths[1],
            "--event",
            paths[2],
            "--agent",
            "replay_agents:AGENT",
            "--registry",
            "replay_agents:TOOLS",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode in (2, 3)
    assert out.stderr.strip() and "Traceback" not in out.stderr


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=6)
    ),
    max_leaves=20,
)
_ROW_COLUMNS = st.sampled_from(
    ["entity_key", "seq", "index", "kind", "name", "start_ms", "end_ms", "attributes",
     "trace_id", "span_id", "parent_span_id"]
)  # fmt: skip
_ROWS = st.lists(st.dictionaries(_ROW_COLUMNS, _JSON, max_size=11), max_size=5)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=300), _ROWS.map(lambda rows: json.dumps(rows).encode())))
def test_convert_bq_refuses_bad_rows_without_a_traceback(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = Path(tmp) / "rows.json"
        rows.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["convert-bq", str(rows), "-o", str(Path(tmp) / "out.pb")])
    assert code in (0, 2)
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue()
