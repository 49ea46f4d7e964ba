"""Issue 23: a data file does not choose code to run. A bundle records the ``module:ATTR``
of its agent and registry; replaying it imports them only with the operator's consent
(``--import-recorded``), or replays the code the operator names instead (``--agent`` and
``--registry``). The recorded agent here is a module whose import never ends, so an
import shows as the time limit (exit 3), and its absence as a prompt refusal (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from incident_history import Incident
from replay_harness import AGENTS

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("consent") / "hang.bundle"
    path.write_bytes(Incident().make(seq=1, agent="hang_at_import:AGENT"))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [SCRIPT, *args, "--time-limit", "3"], capture_output=True, text=True, timeout=120,
        env=env, cwd=AGENTS,
    )  # fmt: skip


def test_replaying_a_bundle_names_what_it_would_import_and_imports_nothing(bundle: Path) -> None:
    out = _run(str(bundle))
    assert (out.returncode, out.stdout) == (2, ""), out.stderr  # main: imported it, exit 3
    assert "agent hang_at_import:AGENT (" in out.stderr and "registry replay_agents:TOOLS (" in out.stderr
    assert str(AGENTS / "hang_at_import.py") in out.stderr  # where it would come from
    assert "--import-recorded" in out.stderr and "--agent" in out.stderr


def test_check_refuses_each_bundle_without_consent_and_says_no_agent_flag(bundle: Path) -> None:
    out = _run("check", str(bundle), "--json")
    assert out.returncode == 2, out.stderr
    [row] = [r for g in json.loads(out.stdout)["groups"] for r in g["rows"]]
    assert row["verdict"] == "error"
    assert row["cause"] == "not imported without consent: agent hang_at_import:AGENT, registry replay_agents:TOOLS"
    assert "--agent" not in row["cause"]


def test_with_consent_the_recorded_code_is_imported(bundle: Path) -> None:
    out = _run(str(bundle), "--import-recorded")
    assert out.returncode == 3, out.stderr  # its import never ends: the time limit
    assert "import" in out.stdout + out.stderr


def test_code_the_operator_names_is_replayed_instead(bundle: Path) -> None:
    out = _run(str(bundle), "--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS")
    assert out.returncode == 0, out.stdout + out.stderr


def _two_commits(repo: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    repo.mkdir()
    git("init", "-q")
    for i in (1, 2):
        (repo / "NOTES.txt").write_text(f"note {i}\n")
        git("add", "-A")
        git("-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qm", f"n{i}")


def test_bisect_refuses_before_any_probe_naming_what_it_would_import(
    bundle: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    _two_commits(repo)
    out = _run("bisect", str(bundle), "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD")
    # main: probed --good with check --import-recorded, imported the bundle's agent
    assert (out.returncode, out.stdout) == (2, ""), out.stdout + out.stderr
    assert "agent hang_at_import:AGENT (hang.bundle)" in out.stderr
    assert "registry replay_agents:TOOLS (hang.bundle)" in out.stderr
    assert "--import-recorded" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1  # one paragraph
    helped = subprocess.run([SCRIPT, "bisect", "--help"], capture_output=True, text=True)
    assert "--import-recorded" in helped.stdout and "--agent" in helped.stdout


def test_bisect_with_consent_passes_it_to_each_probe(bundle: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _two_commits(repo)
    out = _run(
        "bisect", str(bundle), "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD",
        "--jobs", "1", "--import-recorded",
    )  # fmt: skip
    # The recorded agent was imported at --good (its import hangs: the time limit, exit 3
    # in the probe's row): both probes agree, so no change in the range.
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no change" in out.stdout
