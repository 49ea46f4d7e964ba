"""End to end, issue 22's four cases from one real ``RunAgent`` run: memory judged by what the
activation wrote, key by key from any snapshot, and two verdicts of recorded tools.

The pipeline (``BundleBasedDirectRunner``, ``file://`` sinks) runs ``memory_agents:AGENT``
against a real HTTP service on loopback whose answer changes with each request
(``DriftingService``), exports the key right after its first activation and at the end,
then the service is stopped. Each replay goes through the console script, as an operator
runs it:

1. a mutant that drops (adds, changes) a memory write diverges at ACTIVATION_END, naming the
   key and the values, even from the snapshot that already holds the original's writes;
2. from the final snapshot, seq 1's writes are still judged (a mutant adding a field
   diverges), and a read of a key a later seq rewrote is named, never ``reproduced``;
3. an activation whose recorded tool got another answer than an earlier seq recorded, and
   then failed, is irreproducible (its answer was never committed), not diverged;
4. a what-if served from recorded results says which, minted at which seq, and how old.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
import memory_agents as mem
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

from beam_agents import AgentConfig, RunAgent
from beam_agents._protos import AgentEnvelope, ToolResult
from beam_agents.context import derive_intent_id
from beam_agents.testing import event_envelope, export_request_envelope, tool_result_envelope
from beam_agents.trace_stream import read_trace_stream, trace_stream_files, write_trace_stream

pytestmark = pytest.mark.slow

T0 = 1_734_000_000_000
HOUR_MS = 3_600_000
KEY = b"customer-memory"
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")

EVENTS: dict[str, AgentEnvelope] = {
    "note": event_envelope(KEY, "note", b"first", time_ms=T0, envelope_id="note-1"),
    "profile-gold": event_envelope(KEY, "profile", b"gold", time_ms=T0 + 2_000, envelope_id="p-2"),
    "peek": event_envelope(KEY, "peek", b"", time_ms=T0 + 3_000, envelope_id="peek-3"),
    "profile-plat": event_envelope(
        KEY, "profile", b"platinum", time_ms=T0 + 4_000, envelope_id="p-4"
    ),
    "fetch": event_envelope(KEY, "fetch", b"A1", time_ms=T0 + 5_000, envelope_id="fetch-5"),
    "fetch_fail": event_envelope(
        KEY, "fetch_fail", b"A1", time_ms=T0 + 6_000, envelope_id="fetch-6"
    ),
    "hold": event_envelope(KEY, "hold", b"A1", time_ms=T0 + 7_000, envelope_id="hold-7"),
}
SEQ = {name: seq for seq, name in enumerate(EVENTS, start=1)}
WHAT_IF_AT = T0 + 2 * HOUR_MS
WHAT_IF = tool_result_envelope(
    KEY,
    derive_intent_id(KEY, SEQ["hold"], 0),
    time_ms=WHAT_IF_AT,
    status=ToolResult.OK,
    payload=b"{}",
    envelope_id="notified-7",
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory-e2e")
    service = mem.DriftingService()
    mem.SERVICE_URL = service.url
    config = AgentConfig(
        provider_factory=mem.make_provider,
        traces_to=f"file://{root / 'traces'}",
        snapshots_to=f"file://{root / 'snapshots'}",
    )
    script = [
        EVENTS["note"],
        export_request_envelope(KEY, "after-1", time_ms=T0 + 1_000),
        *(EVENTS[name] for name in list(EVENTS)[1:]),
        export_request_envelope(KEY, "final", time_ms=T0 + 8_000),
    ]
    try:
        with beam.Pipeline(
            runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])
        ) as p:
            _ = (
                p
                | beam.Create([e.SerializeToString() for e in script], reshuffle=False)
                | RunAgent(mem.AGENT, mem.TOOLS, config)
            )
    finally:
        service.stop()  # before any replay: replay must never need it
        mem.SERVICE_URL = "http://127.0.0.1:9"
    # seq 5 and seq 6 read it, and seq 8: the batch pipeline's HITL timer resumed seq 7's
    # suspension (after the final export) when the watermark reached the end.
    assert service.requests == 3
    for name, envelope in {**EVENTS, "what-if": WHAT_IF}.items():
        (root / f"{name}.pb").write_bytes(envelope.SerializeToString())
    # What an operator had collected before that resume ran: the traces up to seq 7.
    before = [
        event
        for path in trace_stream_files(root / "traces")
        for event in read_trace_stream(path)
        if event.seq <= SEQ["hold"]
    ]
    write_trace_stream(root / "traces-before-resume.pb", before)
    return root


def snapshot(root: Path, request_id: str) -> str:
    (path,) = (root / "snapshots").glob(f"{KEY.hex()}-*-{request_id}.pb")
    return str(path)


def replay(
    root: Path,
    event: str,
    *,
    seq: int | None,
    agent: str = "AGENT",
    at: str = "final",
    traces: str = "traces",
    extra: tuple[str, ...] = (),
) -> tuple[int, dict[str, Any], str]:
    """The console script's exit code, its --json document, and its headless report."""
    argv = [
        "--snapshot",
        snapshot(root, at),
        "--traces",
        str(root / traces),
        "--event",
        str(root / f"{event}.pb"),
        "--agent",
        f"memory_agents:{agent}",
        "--registry",
        "memory_agents:TOOLS",
        *(("--seq", str(seq)) if seq is not None else ()),
        *extra,
    ]
    as_json = subprocess.run(
        [SCRIPT, "--json", *argv], capture_output=True, text=True, timeout=120
    )
    report = subprocess.run([SCRIPT, *argv], capture_output=True, text=True, timeout=120)
    assert report.returncode == as_json.returncode, report.stdout + report.stderr
    return as_json.returncode, json.loads(as_json.stdout), report.stdout


# --------------------------------------------------------------------------- 1. the write set


def test_the_unchanged_agent_reproduces_from_the_snapshot_right_after(root: Path) -> None:
    code, doc, _ = replay(root, "note", seq=1, at="after-1")
    assert (code, doc["verdict"]) == (0, "reproduced"), doc["reason"]
    assert doc["memory_writes"]["mark"] == "verified"
    assert doc["memory_writes"]["replayed"]["set"] == {"last_note": "first", "note.000001": "first"}


def test_a_dropped_write_diverges_even_from_the_snapshot_that_holds_it(root: Path) -> None:
    # The snapshot is seq 1's own committed memory: it already holds last_note, so the re-run
    # that leaves it out ends on the very same memory (the end digest matches).
    code, doc, report = replay(root, "note", seq=1, at="after-1", agent="DROPS_A_WRITE")
    assert (code, doc["verdict"]) == (1, "diverged"), doc["reason"]
    assert doc["memory"]["mark"] == "verified"  # the end state cannot see it...
    assert doc["memory_writes"]["mark"] == "differs"  # ...what it wrote does
    div = doc["first_divergence"]
    assert div["kind"] == "ACTIVATION_END"
    assert [f["path"] for f in div["fields"]] == [
        "attributes['beam_agents.memory_writes_sha256']"
    ]
    assert "(dropped 'last_note')" in doc["reason"]
    assert (
        "dropped: 'last_note': production set it to \"first\"; the re-run did not write it"
        in div["detail"]
    )
    assert doc["memory_writes"]["production"]["set"] == {
        "last_note": "first",
        "note.000001": "first",
    }
    assert "\ndiverged\n" in report and "memory writes: 1 key(s) set, 0 deleted" in report


@pytest.mark.parametrize(
    ("agent", "named", "line"),
    [
        (
            "ADDS_A_WRITE",
            "added 'note_count'",
            "added: 'note_count': the re-run set it to 1; production did not write it",
        ),
        (
            "CHANGES_A_WRITE",
            "changed 'last_note'",
            "changed: 'last_note': production set it to \"first\"; the re-run set it to \"FIRST\"",
        ),
    ],
)
def test_an_added_or_changed_write_diverges_from_the_final_snapshot(
    root: Path, agent: str, named: str, line: str
) -> None:
    # The final snapshot is six activations later; nothing after seq 1 rewrote its keys.
    code, doc, report = replay(root, "note", seq=1, agent=agent)
    assert (code, doc["verdict"]) == (1, "diverged"), doc["reason"]
    assert f"({named})" in doc["reason"]
    assert line in doc["first_divergence"]["detail"]
    # The end memory differs from the traced digest (it holds seq 7's state), but that is not
    # what the verdict rests on: its value line says so, not "differs".
    (memory_line,) = [ln for ln in report.splitlines() if ln.startswith("      memory: ")]
    assert memory_line.endswith("; its writes are judged instead]"), memory_line
    assert "[not judged: traced sha256=" in memory_line


# --------------------------------------------------------------------------- 2. per key


def test_an_older_activation_reproduces_from_the_final_snapshot_with_its_writes_judged(
    root: Path,
) -> None:
    code, doc, report = replay(root, "note", seq=1)
    assert (code, doc["verdict"]) == (0, "reproduced"), doc["reason"]
    assert doc["memory_writes"]["mark"] == "verified"
    assert doc["memory_not_judged"].startswith("the snapshot holds the memory after seq 7")
    assert "its memory writes match the traced digest (2 key(s) set, 0 deleted)" in doc["reason"]
    assert doc["memory_reads_unseen"] == []
    assert report.splitlines()[4] == "reproduced"


def test_a_read_of_a_key_a_later_seq_rewrote_is_named_and_not_judged(root: Path) -> None:
    # peek (seq 3) read profile = "gold"; seq 4 rewrote it: the snapshot holds "platinum".
    code, doc, report = replay(root, "peek", seq=SEQ["peek"])
    assert (code, doc["verdict"]) == (3, "irreproducible"), doc["reason"]
    read = "read 'profile', which seq 4 rewrote"
    assert doc["reason"].startswith(f"not judged: the re-run {read}")
    assert "a snapshot exported before seq 4 ran holds what seq 3 read" in doc["reason"]
    assert doc["not_judged"] == f"not judged: {read}"
    assert [(r["key"], r["why"], r["seq"]) for r in doc["memory_reads_unseen"]] == [
        ("profile", "rewritten", 4)
    ]
    # The verdict line itself says what was not judged.
    assert report.splitlines()[4] == f"irreproducible (not judged: {read})"


@pytest.mark.parametrize("how", ["DEEPCOPY", "COPY", "PICKLE", "VARS", "REDUCE_EX", "GETSTATE"])
def test_a_read_of_the_memory_through_copy_or_pickling_is_a_whole_memory_read(
    root: Path, how: str
) -> None:
    """Hostile pass (issue 23): a deep copy, ``vars()``, ``__reduce_ex__(2)`` and
    ``__getstate__()`` read the later memory untracked, and an agent answering from it what
    seq 3 answered read ``reproduced``. Each is now a read of the memory as a whole (or, for
    ``vars()``, has nothing to read), never ``reproduced``."""
    code, doc, report = replay(root, "peek", seq=SEQ["peek"], agent=f"READS_BY_{how}")
    assert (code, doc["verdict"]) == (3, "irreproducible"), doc["reason"]
    assert doc["memory_reads_unseen"], doc
    assert "profile" in doc["reason"], doc["reason"]
    assert report.splitlines()[4].startswith("irreproducible (not judged: ")


# --------------------------------------------------------------------------- 3. recorded tools


def test_a_recorded_answer_never_committed_is_irreproducible_not_diverged(root: Path) -> None:
    # seq 5 recorded v1; seq 6 got v2 from the service, then failed: only v1 is in the cache.
    code, doc, report = replay(root, "fetch_fail", seq=SEQ["fetch_fail"])
    assert (code, doc["verdict"]) == (3, "irreproducible"), doc["reason"]
    assert (
        "the answer this activation got was never committed (it failed); the cache holds seq 5's"
        in doc["reason"]
    )
    miss = doc["tool_miss"]
    assert (miss["tool"], miss["status"], miss["held_seq"]) == ("fetch", "other_seq", 5)
    assert miss["held_result_sha256"] != miss["traced_result_sha256"]
    assert "the cache holds:    seq 5's answer" in report


def test_the_activation_that_recorded_the_answer_reproduces(root: Path) -> None:
    code, doc, _ = replay(root, "fetch", seq=SEQ["fetch"])
    assert (code, doc["verdict"]) == (0, "reproduced"), doc["reason"]


# --------------------------------------------------------------------------- 4. what-if


def test_a_what_if_says_which_recorded_results_it_served_and_how_old(root: Path) -> None:
    code, doc, report = replay(
        root, "what-if", seq=None, traces="traces-before-resume.pb", extra=("--what-if",)
    )
    assert (code, doc["verdict"]) == (0, "what-if"), doc["reason"]
    (served,) = doc["served_recordings"]
    assert (served["tool"], served["minted_seq"], served["recorded_seq"]) == ("fetch", 5, 5)
    assert served["recorded_at_ms"] == T0 + 5_000
    assert served["age_ms"] == WHAT_IF_AT - (T0 + 5_000)
    assert "a what-if: the pipeline would call these services anew" in report
    assert (
        f"recorded: minted at seq 5 (at_ms {T0 + 5_000}, 1 h 59 min before this activation's "
        "clock)" in report
    )
