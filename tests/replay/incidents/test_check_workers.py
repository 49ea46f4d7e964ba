"""``check`` with hostile agent code: isolated workers, a row for every activation, never a hang.

``isolate=True`` is what the command line passes: every replay runs in a worker
process that isolates its whole life before importing agent code.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import isolation_agents as ia
import pytest
import replay_agents as ra
from incident_history import Incident
from machine_pace import limit_for_the_rerun

from beam_agents.replay.incidents import check_workers as workers
from beam_agents.replay.incidents.check import check_bundles
from beam_agents.replay.incidents.check_render import check_json
from beam_agents.replay.incidents.check_rows import CheckCause, CheckReport, CheckRow
from beam_agents.replay.result import Verdict


@pytest.fixture(autouse=True)
def _hang() -> Iterator[None]:
    """The hanging tools hang in the workers (forked with this process's RELEASE event)."""
    ia.RELEASE.clear()
    yield
    ia.RELEASE.set()


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    host, port = server.getsockname()[:2]
    monkeypatch.setenv(ra.NETWORK_TARGET_ENV, f"{host}:{port}")
    try:
        yield server
    finally:
        server.close()


def _bundle(incident: Incident, folder: Path, registry: str, **kw: object) -> Path:
    path = folder / f"{registry.lower()}.bundle"
    path.write_bytes(incident.make(registry=f"isolation_agents:{registry}", **kw))
    return path


def rows(report: CheckReport) -> list[tuple[str, int | None, Verdict]]:
    return [(Path(r.path).stem, r.seq, r.verdict) for r in report.rows]


def test_a_worker_agent_code_kills_costs_that_activation_an_error_row_and_nothing_else(
    incident: Incident, tmp_path: Path
) -> None:
    # seq 1 and 2 call lookup_order (which kills its process); the resumes 3 and 4 do not.
    die = _bundle(incident, tmp_path, "TOOLS_DIE", all_seqs=True)
    good = tmp_path / "good.bundle"
    good.write_bytes(incident.make(seq=1))
    for jobs in (1, 2):
        report = check_bundles([die, good], jobs=jobs, isolate=True, import_recorded=True)
        assert rows(report) == [
            ("tools_die", 1, Verdict.USAGE_ERROR),
            ("tools_die", 2, Verdict.USAGE_ERROR),
            ("tools_die", 3, Verdict.REPRODUCED),  # a fresh worker went on with the bundle
            ("tools_die", 4, Verdict.REPRODUCED),
            ("good", 1, Verdict.REPRODUCED),
        ], [r.detail for r in report.rows]
        dead = report.rows[0]
        assert (
            dead.cause == "the worker process ended during the re-run (killed by signal 6, SIGABRT)"
        )
        assert "replay cannot judge an activation whose code ends (or crashes) the process" in (
            dead.detail
        )
        assert report.exit_code == 2


@pytest.mark.parametrize(
    "registry", ["TOOLS_PIPE_JUNK", "TOOLS_PIPE_PICKLE", "TOOLS_PIPE_FORGED", "TOOLS_PIPE_HUGE"]
)
def test_a_worker_writing_to_its_pipe_costs_that_activation_an_error_row_and_runs_nothing_here(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    """Hostile pass: the parent unpickled what the worker sent, so agent code in an isolated
    worker ran code in the parent (a planted pickle), and junk ended the whole check."""
    ia.UNPICKLED_IN.clear()
    planted = _bundle(incident, tmp_path, registry, all_seqs=True)
    good = tmp_path / "good.bundle"
    good.write_bytes(incident.make(seq=1))

    report = check_bundles([planted, good], jobs=1, isolate=True, import_recorded=True)

    assert ia.UNPICKLED_IN == []
    assert rows(report) == [
        (registry.lower(), 1, Verdict.USAGE_ERROR),
        (registry.lower(), 2, Verdict.USAGE_ERROR),
        (registry.lower(), 3, Verdict.REPRODUCED),  # a fresh worker went on with the bundle
        (registry.lower(), 4, Verdict.REPRODUCED),
        ("good", 1, Verdict.REPRODUCED),
    ], [r.detail for r in report.rows]
    assert report.rows[0].cause == "the worker process sent something that is no check message"


def test_workers_refuse_processes_signals_and_writes_and_end_the_process_as_error(
    incident: Incident, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "written.txt"
    monkeypatch.setenv(ia.WRITE_TARGET_ENV, str(target))
    files = [
        _bundle(incident, tmp_path, name, seq=1)
        for name in ("TOOLS_SUBPROCESS", "TOOLS_KILL", "TOOLS_WRITE", "TOOLS_EXIT")
    ]
    report = check_bundles(files, jobs=2, isolate=True, import_recorded=True)
    by_name = {Path(r.path).stem: r for r in report.rows}
    assert by_name["tools_subprocess"].verdict is Verdict.IRREPRODUCIBLE
    assert "tried to start the process true (subprocess.Popen)" in by_name["tools_subprocess"].cause
    assert by_name["tools_kill"].verdict is Verdict.IRREPRODUCIBLE
    assert "tried to send signal 9 to this process (os.kill)" in by_name["tools_kill"].cause
    assert by_name["tools_write"].verdict is Verdict.IRREPRODUCIBLE
    assert not target.exists()
    assert by_name["tools_exit"].verdict is Verdict.USAGE_ERROR  # os._exit(0): never a pass
    assert "os._exit(0)" in by_name["tools_exit"].detail


def test_forkserver_workers_run_with_the_environment_check_was_called_with(
    incident: Incident, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With other threads running, workers come from a forkserver, which keeps the environment
    # of whenever it started (here: before the variable below was set). The agent code must
    # see the caller's, as a forked worker does: the write is then refused at the named file.
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no forkserver on this platform")
    context = multiprocessing.get_context("forkserver")
    monkeypatch.setattr(workers, "_context", lambda: context)
    monkeypatch.delenv(ia.WRITE_TARGET_ENV, raising=False)
    good = tmp_path / "good.bundle"
    good.write_bytes(incident.make(seq=1))
    assert rows(check_bundles([good], jobs=1, isolate=True, import_recorded=True)) == [("good", 1, Verdict.REPRODUCED)]
    target = tmp_path / "written-by-a-forkserver-worker.txt"
    monkeypatch.setenv(ia.WRITE_TARGET_ENV, str(target))
    report = check_bundles(
        [_bundle(incident, tmp_path, "TOOLS_WRITE", seq=1)], jobs=1, isolate=True, import_recorded=True
    )
    (row,) = report.rows
    assert row.verdict is Verdict.IRREPRODUCIBLE, (row.cause, row.detail)
    assert target.name in row.cause + row.detail
    assert not target.exists()


@pytest.mark.parametrize("registry", ["TOOLS_THREAD", "TOOLS_ATEXIT"])
def test_a_thread_or_atexit_hook_in_a_worker_never_reaches_the_network(
    incident: Incident, tmp_path: Path, listener: socket.socket, registry: str
) -> None:
    path = _bundle(incident, tmp_path, registry, seq=1)
    # Its worker then idles until the other one's re-run (sleeping) reaches the 2 s limit:
    # the thread connects 1 s after its re-run, outside any replay.
    sleeper = _bundle(incident, tmp_path, "TOOLS_SLEEP", seq=1)
    report = check_bundles([path, sleeper], jobs=2, isolate=True, time_limit=2.0, import_recorded=True)
    # Its worker runs what agent code runs at interpreter exit before the judgement (the
    # thread, not a daemon, is waited for; the atexit hook is called), as a replay alone does:
    # the attempt is refused and counted.
    assert [r.verdict for r in report.rows] == [Verdict.IRREPRODUCIBLE, Verdict.IRREPRODUCIBLE]
    assert "at interpreter exit" in report.rows[0].detail, report.rows[0].detail
    readable, _, _ = select.select([listener], [], [], 0.3)
    assert not readable, "agent code in a check worker reached the network"


@pytest.mark.parametrize("registry", ["TOOLS_LOOP", "TOOLS_SLEEP"])
def test_an_activation_that_never_ends_is_irreproducible_and_the_check_goes_on(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    hang = _bundle(incident, tmp_path, registry, all_seqs=True)
    limit = limit_for_the_rerun(0.3)  # the import must fit in it: the re-run must not
    started = time.monotonic()
    report = check_bundles([hang], jobs=1, isolate=True, time_limit=limit, import_recorded=True)
    assert time.monotonic() - started < 30 + 10 * limit
    assert rows(report) == [
        (registry.lower(), 1, Verdict.IRREPRODUCIBLE),
        (registry.lower(), 2, Verdict.IRREPRODUCIBLE),
        (registry.lower(), 3, Verdict.REPRODUCED),
        (registry.lower(), 4, Verdict.REPRODUCED),
    ]
    assert {g.cause for g in report.groups if g.verdict is Verdict.IRREPRODUCIBLE} == {
        f"the re-run ran past the time limit of {limit:g} s"
    }
    assert "it had reached event 0 (ACTIVATION_START 'start')" in report.rows[0].detail
    assert report.exit_code == 3


def test_a_worker_stuck_in_native_code_is_killed_at_the_backstop(
    incident: Incident, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A catastrophic regular expression holds the GIL: the worker's own limit cannot answer.
    monkeypatch.setattr(workers, "BACKSTOP_GRACE", 1.0)
    stuck = _bundle(incident, tmp_path, "TOOLS_REGEX", seq=1)
    good = tmp_path / "good.bundle"
    good.write_bytes(incident.make(seq=1))
    limit = limit_for_the_rerun(0.2)  # the import must fit in it (it failed at load 13)
    started = time.monotonic()
    report = check_bundles(
        [stuck, good], jobs=1, isolate=True, time_limit=limit, import_recorded=True
    )
    assert time.monotonic() - started < 30 + 10 * limit
    assert rows(report) == [
        ("tools_regex", 1, Verdict.IRREPRODUCIBLE),
        ("good", 1, Verdict.REPRODUCED),
    ]
    assert report.rows[0].cause == f"the re-run ran past the time limit of {limit:g} s"
    assert "did not answer for" in report.rows[0].detail and "was killed" in report.rows[0].detail
    # Only code holding the interpreter keeps a worker from answering (a loop is abandoned).
    assert "held the interpreter" in report.rows[0].detail
    assert "loops, sleeps" not in report.rows[0].detail


def test_no_worker_outlives_the_check(incident: Incident, tmp_path: Path) -> None:
    import multiprocessing

    path = _bundle(incident, tmp_path, "TOOLS_SLEEP", seq=1)
    check_bundles([path], jobs=2, isolate=True, time_limit=0.2, import_recorded=True)
    assert multiprocessing.active_children() == []
    assert os.getpid()  # this process was never isolated: it can still start processes
    import subprocess

    assert subprocess.run(["true"], check=False).returncode == 0


def _row(**kw: object) -> CheckRow:
    fields: dict[str, object] = {
        "path": "a.bundle",
        "seq": 3,
        "entity_key": b"\x00k",
        "verdict": Verdict.DIVERGED,
        "kind": CheckCause.DIVERGED,
        "cause": "TOOL_CALL 'x': name",
        "detail": "event 2 differs\x1b[2J",
        "seconds": 0.1234567,
    }
    fields.update(kw)
    return CheckRow(**fields)  # type: ignore[arg-type]


def test_a_row_has_one_encoding_for_check_json_and_for_the_worker_pipe() -> None:
    """One shape, one encoder, one decoder: the worker sends what ``check --json`` prints."""
    row = _row()
    document = row.document()
    assert document == {
        "path": "a.bundle",
        "seq": 3,
        "entity_key": "006b",
        "verdict": "diverged",
        "exit_code": 1,
        "cause_kind": "diverged",
        "cause": "TOOL_CALL 'x': name",
        "detail": "event 2 differs\x1b[2J",
        "seconds": 0.123457,
    }
    report = CheckReport(rows=(row,), bundles=1, jobs=1, seconds=0.5)
    # check --json shows its strings as the table does (escaped), from that one document.
    assert check_json(report)["groups"] == [  # type: ignore[index]
        {
            "verdict": "diverged",
            "exit_code": 1,
            "cause": row.cause,
            "count": 1,
            "rows": [{**document, "detail": "event 2 differs\\x1b[2J"}],
        }
    ]
    wire = json.dumps(["row", document], ensure_ascii=True).encode("ascii")
    assert workers.read_message(wire, "a.bundle") == ("row", replace(row, seconds=0.123457))
    for seq in (None, 0):
        assert CheckRow.from_document(_row(seq=seq, entity_key=b"").document()) == _row(
            seq=seq, entity_key=b"", seconds=0.123457
        )


@pytest.mark.parametrize(
    "change",
    [
        {"exit_code": 0},  # not the verdict's
        {"exit_code": True},
        {"exit_code": "1"},
        {"verdict": "fine"},
        {"cause_kind": "fine"},
        {"cause_kind": 1},
        {"seq": True},
        {"seq": 1.0},
        {"seq": "1"},
        {"entity_key": "6B"},  # not the encoder's lowercase hex
        {"entity_key": "0 6b"},
        {"entity_key": "abc"},
        {"seconds": "0.5"},
        {"seconds": -1},
        {"seconds": float("nan")},
        {"seconds": float("inf")},
        {"seconds": 10**400},  # float() of it raised OverflowError in the parent
        {"seconds": None},
        {"path": 7},
        {"cause": ["x"]},
        {"detail": None},
        {"extra": 1},
    ],
)
def test_a_worker_row_of_another_shape_is_refused(change: dict[str, object]) -> None:
    """A worker runs agent code, which can write anything to its pipe: the parent takes
    only the row's own encoding, never converts a value it does not expect."""
    document = {**_row().document(), **change}
    assert CheckRow.from_document(document) is None
    data = json.dumps(["row", document]).encode("ascii")
    assert workers.read_message(data, "a.bundle") is None
    for name in _row().document():
        assert (
            CheckRow.from_document({k: v for k, v in _row().document().items() if k != name})
            is None
        )
    assert CheckRow.from_document([document]) is None
    assert workers.read_message(json.dumps(["row", _row().document()]).encode(), "b.bundle") is None


def test_a_worker_reads_its_tasks_as_json_and_never_loads_a_pickle() -> None:
    """Hostile pass: workers unpickled their tasks (another worker could write there)."""
    import pickle

    assert workers.read_task(workers.task_message(("a.bundle", 3))) == ("a.bundle", 3)
    assert workers.read_task(workers.task_message(("a.bundle", None))) == ("a.bundle", None)
    assert workers.read_task(workers.task_message(None)) is None
    ia.UNPICKLED_IN.clear()
    for data in (
        pickle.dumps(("row", ia._Planted())),
        pickle.dumps(("a.bundle", None)),
        b'["a.bundle"]',
        b'["a.bundle", true]',
        b'[1, 2]',
        b"\xff",
    ):
        with pytest.raises(ValueError):
            workers.read_task(data)
    assert ia.UNPICKLED_IN == []
