"""``ReplayBundles`` on Beam's FnApiRunner with two worker processes: the same rows as ``check``."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("apache_beam")

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from incident_history import Incident

from beam_agents.pipeline import ReadBundleFiles, ReplayBundles
from beam_agents.replay.incidents.check import check_bundles
from beam_agents.replay.incidents.check_rows import CheckRow

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _workers_import_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's worker processes unpickle ``_Collect`` by this module's name: they find
    it on PYTHONPATH, which they inherit (the helper agents' folder is there already)."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))


class _Collect(beam.DoFn):  # type: ignore[misc]
    """Each element as one pickle file (the workers are other processes)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, element: Any) -> None:
        import uuid

        (Path(self._directory) / f"{uuid.uuid4().hex}.pkl").write_bytes(pickle.dumps(element))


def _collected(directory: Path) -> list[Any]:
    return [pickle.loads(p.read_bytes()) for p in sorted(directory.glob("*.pkl"))]


def test_rows_and_counts_match_check_on_the_multi_process_runner(tmp_path: Path) -> None:
    incident = Incident()
    folder = tmp_path / "incidents"
    folder.mkdir()
    (folder / "all.bundle").write_bytes(incident.make(all_seqs=True))
    (folder / "tool.bundle").write_bytes(
        incident.make(seq=1, registry="replay_agents:TOOLS_CHANGED_LOOKUP")
    )
    (folder / "prompt.bundle").write_bytes(
        incident.make(all_seqs=True, agent="replay_agents:AGENT_NEW_PROMPT")
    )
    (folder / "junk.bundle").write_bytes(b"\x0a\x1bbeam-agents/incident-bundle\xff\xff")
    rows_dir, counts_dir = tmp_path / "rows", tmp_path / "counts"
    rows_dir.mkdir()
    counts_dir.mkdir()
    options = PipelineOptions(
        flags=[], direct_running_mode="multi_processing", direct_num_workers=2
    )
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        out = p | ReadBundleFiles(str(folder / "*.bundle")) | ReplayBundles(import_recorded=True)
        out.results | "Rows" >> beam.ParDo(_Collect(str(rows_dir)))
        out.counts | "Counts" >> beam.ParDo(_Collect(str(counts_dir)))
    rows = sorted(
        _collected(rows_dir), key=lambda r: (r["path"], r["seq"] if r["seq"] is not None else -1)
    )
    expected = check_bundles([folder], import_recorded=True)
    assert [(r["path"], r["seq"], r["verdict"], r["cause"]) for r in rows] == [
        (r.path, r.seq, r.verdict.value, r.cause) for r in expected.rows
    ]
    counts = dict(_collected(counts_dir))
    assert counts == {(g.verdict.value, g.cause): len(g.rows) for g in expected.groups}
    assert counts[("error", "the bundle is truncated or corrupt")] == 1
    assert sum(counts.values()) == 4 + 1 + 4 + 1


def test_bare_bytes_are_named_by_digest_and_a_bad_override_is_refused(tmp_path: Path) -> None:
    incident = Incident()
    data = incident.make(seq=1)
    with pytest.raises(ValueError, match="module:ATTR"):
        ReplayBundles(agent="nope")
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[])) as p:
        out = p | beam.Create([data]) | ReplayBundles(import_recorded=True)
        out.results | beam.ParDo(_Collect(str(tmp_path)))
    rows = _collected(tmp_path)
    assert [(r["seq"], r["verdict"]) for r in rows] == [(1, "reproduced")]
    assert rows[0]["path"].startswith("bundle-")
    # A row is check --json's row, the one encoding of a CheckRow (seconds to the microsecond).
    row = CheckRow.from_document(rows[0])
    assert row is not None and row.document() == rows[0]


def test_an_activation_past_the_time_limit_is_the_row_check_gives_it(tmp_path: Path) -> None:
    """As ``check --time-limit``: irreproducible (exit 3), the cause naming the limit. On the
    DirectRunner, in this process: the hanging tool ends once ``RELEASE`` is set."""
    import time

    import isolation_agents as ia
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    from beam_agents.replay.isolation.guard import still_running

    path = tmp_path / "sleeps.bundle"
    path.write_bytes(Incident().make(seq=1, registry="isolation_agents:TOOLS_SLEEP"))
    rows_dir = tmp_path / "rows"
    rows_dir.mkdir()
    ia.RELEASE.clear()
    try:
        with beam.Pipeline(
            runner=BundleBasedDirectRunner(), options=PipelineOptions(flags=[])
        ) as p:
            out = (
                p
                | beam.Create([(str(path), path.read_bytes())])
                | ReplayBundles(time_limit=0.5, import_recorded=True)
            )
            out.results | beam.ParDo(_Collect(str(rows_dir)))
    finally:
        ia.RELEASE.set()
        deadline = time.monotonic() + 10
        while still_running() and time.monotonic() < deadline:
            time.sleep(0.01)
    # check replays it in a worker process forked from this one (which imported the tool's
    # module: the worker has its RELEASE as it is here), where the tool hangs again.
    ia.RELEASE.clear()
    try:
        expected = check_bundles([path], time_limit=0.5, import_recorded=True)
    finally:
        ia.RELEASE.set()
    [row] = _collected(rows_dir)
    assert (row["seq"], row["verdict"], row["exit_code"], row["cause"]) == (
        1,
        "irreproducible",
        3,
        "the re-run ran past the time limit of 0.5 s",
    )
    assert "it had reached event 0 (ACTIVATION_START 'start')" in row["detail"]
    # Its advice names this transform's parameter, not check_bundles' or a CLI flag.
    assert "raise the limit with ReplayBundles(time_limit=SECONDS)" in row["detail"]
    assert "--time-limit" not in row["detail"]
    assert [(r.verdict.value, r.cause) for r in expected.rows] == [(row["verdict"], row["cause"])]
    assert not still_running()


def test_the_time_limit_defaults_to_the_clis_and_refuses_what_it_refuses(tmp_path: Path) -> None:
    from beam_agents.cli.parsing import Parser, add_time_limit_flag

    parser = Parser(prog="check")
    add_time_limit_flag(parser)
    assert ReplayBundles().time_limit == parser.parse_args([]).time_limit == 60
    assert ReplayBundles(time_limit=0).time_limit is None  # 0: no limit, as --time-limit 0
    for bad in (-1, float("nan"), float("inf"), 86_401, "60", True):
        with pytest.raises(ValueError, match=r"ReplayBundles\(time_limit=\.\.\.\) must be"):
            ReplayBundles(time_limit=bad)  # type: ignore[arg-type]
    # With no limit the agent code runs on the calling thread; the verdict is the same.
    data = Incident().make(seq=1)
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[])) as p:
        out = p | beam.Create([data]) | ReplayBundles(time_limit=0, import_recorded=True)
        out.results | beam.ParDo(_Collect(str(tmp_path)))
    assert [(r["seq"], r["verdict"]) for r in _collected(tmp_path)] == [(1, "reproduced")]
