"""``ReplayBundles`` on Beam's FnApiRunner with two worker processes: the same rows as ``check``."""

from __future__ import annotations

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
from beam_agents.replay.bulk import check_bundles

pytestmark = pytest.mark.slow


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
        out = p | ReadBundleFiles(str(folder / "*.bundle")) | ReplayBundles()
        out.results | "Rows" >> beam.ParDo(_Collect(str(rows_dir)))
        out.counts | "Counts" >> beam.ParDo(_Collect(str(counts_dir)))
    rows = sorted(
        _collected(rows_dir), key=lambda r: (r["path"], r["seq"] if r["seq"] is not None else -1)
    )
    expected = check_bundles([folder])
    assert [(r["path"], r["seq"], r["verdict"], r["cause"]) for r in rows] == [
        (r.path, r.seq, r.verdict.value, r.cause) for r in expected.rows
    ]
    counts = dict(_collected(counts_dir))
    assert counts == {(g.verdict.value, g.cause): len(g.rows) for g in expected.groups}
    assert counts[("error", "bundle FILE is truncated or corrupt")] == 1
    assert sum(counts.values()) == 4 + 1 + 4 + 1


def test_bare_bytes_are_named_by_digest_and_a_bad_override_is_refused(tmp_path: Path) -> None:
    incident = Incident()
    data = incident.make(seq=1)
    with pytest.raises(ValueError, match="module:ATTR"):
        ReplayBundles(agent="nope")
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(flags=[])) as p:
        out = p | beam.Create([data]) | ReplayBundles()
        out.results | beam.ParDo(_Collect(str(tmp_path)))
    rows = _collected(tmp_path)
    assert [(r["seq"], r["verdict"]) for r in rows] == [(1, "reproduced")]
    assert rows[0]["path"].startswith("bundle-")
