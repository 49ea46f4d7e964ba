"""Fuzz targets: every loader of replay's inputs and the CLI entry point.

Each target takes bytes and returns normally when the input is handled as
documented: loaded, or refused with a message (``ReplayRefused`` from the
replay loaders, ``TraceStreamError`` from the BigQuery-row reader, exit 2/3
from the CLI). Anything else — another exception, an "internal error", a
traceback on stderr — raises ``FuzzFinding``: a bug. ``fuzz/run.py`` drives them
with atheris (coverage-guided, libFuzzer's -timeout and -rss_limit_mb catch
hangs and memory blow-ups); ``tests/test_fuzz_corpus.py`` runs them on every
file of ``fuzz/corpus/`` (the inputs of the hostile-input review) in ``make test``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "tests" / "replay", ROOT / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))  # replay_agents: the agent the CLI target imports

KEY = b"customer-42"
_TMP = Path(tempfile.mkdtemp(prefix="beam-agents-fuzz-"))


class FuzzFindingError(AssertionError):
    """The input made a loader do something undocumented: a bug to fix."""


def _refused_well(message: str) -> None:
    if not message or "internal error" in message or "Traceback" in message:
        raise FuzzFindingError(f"bad refusal message: {message[:500]!r}")


def snapshot(data: bytes) -> None:
    """``--snapshot``: parse, version-check, migrate in memory.

    Then the same bytes again, differentially: replay's loader with every cache blob
    read by hand (``blobs.split_fields``, in place, which only cells of 64 KiB and
    more take, larger than the fuzzer's inputs) must give what upb alone gives (the
    same snapshot, state, migrations and versions, or the same error): bytes the hand
    reading takes out are never seen by upb.
    """
    from beam_agents.replay.inputs.snapshot import load_snapshot_source
    from beam_agents.replay.refusal import ReplayRefused

    try:
        load_snapshot_source(data)
    except ReplayRefused as refused:
        _refused_well(refused.message)
    by_hand = _snapshot_outcome(data, in_place_from=1)
    by_upb = _snapshot_outcome(data, in_place_from=sys.maxsize)
    if by_hand != by_upb:
        raise FuzzFindingError(f"the in-place load gave {by_hand!r:.300}, upb {by_upb!r:.300}")


def load_snapshot_whole(data: bytes) -> tuple[Any, Any, dict[str, int]]:
    """The reference for replay's in-place snapshot load (``load_snapshot_for_replay``): what
    replay did before it, parse whole, versions from the parsed fields, then clear the caches.

    tests/test_key_state.py checks the in-place load against it too.
    """
    from beam_agents.blobs import unwrap_blob
    from beam_agents.key_state import load_snapshot

    snapshot, state = load_snapshot(data)
    versions = {"snapshot": snapshot.state_schema_version}
    for kind in ("memory", "llm_cache", "tool_cache"):
        if getattr(snapshot, kind):
            versions[kind] = unwrap_blob(kind, getattr(snapshot, kind))[0]
    if snapshot.HasField("continuation"):
        versions["continuation"] = snapshot.continuation.schema_version
    if snapshot.pending or snapshot.pending_schema_version:
        versions["pending"] = snapshot.pending_schema_version
    if snapshot.resumed_from or snapshot.resumed_from_schema_version:
        versions["resume_history"] = snapshot.resumed_from_schema_version
    snapshot.ClearField("llm_cache")
    snapshot.ClearField("tool_cache")
    return snapshot, state, versions


def _snapshot_outcome(data: bytes, in_place_from: int) -> object:
    """What replay's snapshot loader makes of ``data`` when cells of ``in_place_from``
    bytes or more are read in place; with ``sys.maxsize``, nothing is (the old load)."""
    from unittest import mock

    import beam_agents.blobs
    import beam_agents.key_state
    from beam_agents.errors import StateError
    from beam_agents.key_state import dump_key_state, load_snapshot_for_replay

    with (
        mock.patch.object(beam_agents.key_state, "LARGE_CELL_BYTES", in_place_from),
        mock.patch.object(beam_agents.blobs, "LARGE_CELL_BYTES", in_place_from),
    ):
        try:
            if in_place_from == sys.maxsize:
                snapshot, state, versions = load_snapshot_whole(data)
            else:
                snapshot, state, versions = load_snapshot_for_replay(bytearray(data))
        except StateError as exc:
            return type(exc).__name__, str(exc)
    try:
        cells: object = dump_key_state(state)
    except StateError as exc:
        cells = type(exc).__name__, str(exc)
    return (
        snapshot.SerializeToString(deterministic=True),
        cells,
        state.migrations_applied,
        versions,
    )


def event(data: bytes) -> None:
    """``--event``: one serialized AgentEnvelope."""
    from beam_agents.replay.inputs.envelopes import load_event_source
    from beam_agents.replay.refusal import ReplayRefused

    try:
        load_event_source(data)
    except ReplayRefused as refused:
        _refused_well(refused.message)


def trace(data: bytes) -> None:
    """``--traces``: scan a stream for the key, and check the kept activation is whole."""
    from beam_agents.replay.inputs.traces import check_complete, scan_traces
    from beam_agents.replay.refusal import ReplayRefused

    try:
        found = scan_traces([data], KEY, seq=None)
        if found.kept_seq is not None:
            check_complete(found.activation(), KEY, found.kept_seq)
    except ReplayRefused as refused:
        _refused_well(refused.message)


def rows(data: bytes) -> None:
    """``convert-bq``: BigQuery rows (JSON array or NDJSON) to trace events, then serialized."""
    from beam_agents.bigquery_rows import read_bigquery_rows, rows_to_trace_events
    from beam_agents.errors import TraceStreamError
    from beam_agents.trace_stream import write_trace_stream

    path = _TMP / "rows.json"
    path.write_bytes(data)
    try:
        events = rows_to_trace_events(read_bigquery_rows(path), source=str(path))
        write_trace_stream(io.BytesIO(), events)
    except TraceStreamError as exc:
        _refused_well(str(exc))


def cli(data: bytes) -> None:
    """The console entry point on three files cut from ``data`` (2-byte lengths first)."""
    from beam_agents.cli import main

    parts: list[bytes] = []
    rest = data
    for _ in range(2):
        size = int.from_bytes(rest[:2], "big") if len(rest) >= 2 else 0
        parts.append(rest[2 : 2 + size])
        rest = rest[2 + size :]
    parts.append(rest)
    names = []
    for name, part in zip(("snapshot.pb", "traces.pb", "event.pb"), parts, strict=True):
        (_TMP / name).write_bytes(part)
        names.append(str(_TMP / name))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(
            [
                "--snapshot", names[0], "--traces", names[1], "--event", names[2],
                "--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS",
            ]
        )  # fmt: skip
    message = err.getvalue()
    if code not in (0, 1, 2, 3) or "internal error" in message or "Traceback" in message:
        raise FuzzFindingError(f"exit {code}: {message[:500]!r}")
    if code == 2 and not message.startswith("beam-agents-replay: error:"):
        raise FuzzFindingError(f"exit 2 without the one-paragraph message: {message[:500]!r}")


def cli_input(snapshot: bytes, traces: bytes, event: bytes) -> bytes:
    """The ``cli`` target's input for three files."""
    return (
        len(snapshot).to_bytes(2, "big")
        + snapshot
        + len(traces).to_bytes(2, "big")
        + traces
        + event
    )


TARGETS: dict[str, Callable[[bytes], None]] = {
    "snapshot": snapshot,
    "trace": trace,
    "event": event,
    "rows": rows,
    "cli": cli,
}

CORPUS = ROOT / "fuzz" / "corpus"


def corpus_files(target: str) -> list[Path]:
    """The regression corpus of ``target``: every hostile input found so far, and valid ones."""
    directory = CORPUS / target
    return sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
