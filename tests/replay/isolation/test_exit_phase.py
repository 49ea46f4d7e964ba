"""Issue 23: what agent code runs at interpreter exit, and sqlite3, are isolated too.

Inside a re-run ``sqlite3`` created a database file, and an ``atexit`` hook, a ``__del__``
at exit and a ``logging.FileHandler(delay=True)`` wrote files, all under 'reproduced';
a refused atexit hook printed its traceback. Each is now refused and reported (exit 3),
the file never exists, nothing is printed but the report; in ``check`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import isolation_agents as ia
import pytest
from incident_history import Incident
from replay_harness import AGENTS

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
CASES = ["TOOLS_SQLITE", "TOOLS_ATEXIT_WRITE", "TOOLS_FINALIZER", "TOOLS_LOG_AT_EXIT"]


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def _run(args: list[str], target: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
        ia.WRITE_TARGET_ENV: str(target),
    }
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=180, env=env, cwd=AGENTS
    )


@pytest.mark.parametrize("registry", CASES)
def test_a_write_in_a_re_run_or_at_its_exit_is_refused_and_reported(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    bundle = tmp_path / "x.bundle"
    bundle.write_bytes(incident.make(seq=1, registry=f"isolation_agents:{registry}"))
    target = tmp_path / "written"
    out = _run([str(bundle), "--import-recorded"], target)
    assert out.returncode == 3, out.stdout + out.stderr
    assert not target.exists()
    assert "irreproducible" in out.stdout and str(target) in out.stdout
    assert "Traceback" not in out.stdout + out.stderr and "Exception ignored" not in out.stderr


def test_check_reports_each_exit_phase_write_in_its_own_row(
    incident: Incident, tmp_path: Path
) -> None:
    folder = tmp_path / "bundles"
    folder.mkdir()
    for registry in CASES:
        (folder / f"{registry.lower()}.bundle").write_bytes(
            incident.make(seq=1, registry=f"isolation_agents:{registry}")
        )
    (folder / "good.bundle").write_bytes(incident.make(seq=1))
    target = tmp_path / "written"
    out = _run(["check", "--import-recorded", str(folder), "--jobs", "2", "--json"], target)
    assert out.returncode == 3, out.stderr
    verdicts = {
        Path(r["path"]).stem: r["verdict"]
        for g in json.loads(out.stdout)["groups"]
        for r in g["rows"]
    }
    assert verdicts == {"good": "reproduced", **{c.lower(): "irreproducible" for c in CASES}}
    assert not target.exists()
    assert "Traceback" not in out.stderr
