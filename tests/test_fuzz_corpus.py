"""The fuzz corpus as regression tests, and a short seeded atheris run of every target.

``fuzz/corpus/<target>/`` holds the inputs of the hostile-input review (issue 14)
and valid ones; every target must handle each as documented (loaded, or refused
with a message; never a traceback or an "internal error"). The seeded run is
short (``make fuzz`` runs 100,000 mutations per target).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

import targets  # noqa: E402

CASES = [(t, p) for t in targets.TARGETS for p in targets.corpus_files(t)]


def test_every_target_has_a_corpus() -> None:
    for target in targets.TARGETS:
        assert targets.corpus_files(target), f"fuzz/corpus/{target}/ is empty"


@pytest.mark.parametrize(("target", "path"), CASES, ids=[f"{t}/{p.name}" for t, p in CASES])
def test_corpus_input_is_handled_as_documented(target: str, path: Path) -> None:
    targets.TARGETS[target](path.read_bytes())


def test_the_targets_report_an_undocumented_outcome() -> None:
    """A check that cannot fail is no check: a target flags a refusal that says 'internal error'."""
    with pytest.raises(targets.FuzzFindingError):
        targets._refused_well("internal error in beam-agents-replay: boom")


@pytest.mark.parametrize("target", list(targets.TARGETS))
def test_short_seeded_atheris_run(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris is a dev dependency (pip install atheris)")
    runs = 60 if target == "cli" else 300
    out = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "run.py"), "--runs", str(runs), "--seed", "7",
         "--findings", str(tmp_path), target],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith(target))
    assert int(line.split()[1]) >= runs, line


def test_the_snapshot_target_reports_an_in_place_load_that_disagrees_with_upb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The snapshot target's differential half can fail: a hand path giving other versions."""
    import beam_agents.key_state

    data = (targets.CORPUS / "snapshot" / "valid.pb").read_bytes()
    targets.snapshot(data)
    monkeypatch.setattr(beam_agents.key_state, "_stored_versions", lambda snapshot, caches: {})
    with pytest.raises(targets.FuzzFindingError, match="in-place load"):
        targets.snapshot(data)
