"""Issue 23, hostile pass: the console script's report reaches its reader, whatever agent code
does with standard output (``beam_agents.cli.report_stream``).

Agent code's prints went into the report stream: a diverging agent printing a forged
document made ``--json`` (and ``check --json``) start with ``"verdict": "reproduced"``;
``os.dup2(devnull, 1)`` made the command exit 0 with no report; ``sys.stdout = None`` gave
"internal error", a traceback and exit 1. Each runs here as the console script.
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


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def _run(args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=180, env=_env(**extra), cwd=AGENTS
    )


def _bundle(incident: Incident, folder: Path, registry: str) -> Path:
    path = folder / f"{registry.lower()}.bundle"
    path.write_bytes(incident.make(seq=1, registry=f"isolation_agents:{registry}"))
    return path


def test_what_agent_code_prints_never_reaches_the_json_document(
    incident: Incident, tmp_path: Path
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_PRINT_FORGED")
    out = _run([str(path), "--import-recorded", "--json"])
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)  # one document, and only it: no "Extra data"
    assert (doc["verdict"], doc["exit_code"]) == ("diverged", 1)
    assert "forged by agent code" not in out.stdout


def test_what_agent_code_prints_never_reaches_the_headless_report(
    incident: Incident, tmp_path: Path
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_PRINT_FORGED")
    out = _run([str(path), "--import-recorded"])
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.startswith("beam-agents-replay "), out.stdout[:200]
    assert out.stdout.splitlines()[4].startswith("diverged")
    assert "forged by agent code" not in out.stdout and "reproduced\n" not in out.stdout


def test_what_agent_code_prints_in_a_check_worker_never_reaches_check_json(
    incident: Incident, tmp_path: Path
) -> None:
    folder = tmp_path / "bundles"
    folder.mkdir()
    _bundle(incident, folder, "TOOLS_PRINT_FORGED")
    out = _run(["check", "--import-recorded", str(folder), "--jobs", "1", "--json"])
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["exit_code"] == 1 and "forged by agent code" not in out.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_agent_code_replacing_descriptor_1_does_not_silence_the_report(
    incident: Incident, tmp_path: Path, as_json: bool
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_SILENCE_STDOUT")
    out = _run([str(path), "--import-recorded", *(["--json"] if as_json else [])])
    assert out.returncode == 0, out.stdout + out.stderr
    if as_json:
        assert json.loads(out.stdout)["verdict"] == "reproduced"
    else:
        assert out.stdout.splitlines()[4] == "reproduced", out.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_agent_code_setting_sys_stdout_and_stderr_to_none_changes_nothing_of_the_report(
    incident: Incident, tmp_path: Path, as_json: bool
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_STREAMS_NONE")
    out = _run([str(path), "--import-recorded", *(["--json"] if as_json else [])])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr
    if as_json:
        assert json.loads(out.stdout)["verdict"] == "reproduced"
    else:
        assert out.stdout.splitlines()[4] == "reproduced", out.stdout


def test_agent_code_cannot_write_to_copy_or_replace_the_reports_descriptor(
    incident: Incident, tmp_path: Path
) -> None:
    path = _bundle(incident, tmp_path, "TOOLS_ATTACK_REPORT_FD")
    report = tmp_path / "report.json"
    with report.open("w") as stdout:
        done = subprocess.run(
            [SCRIPT, str(path), "--import-recorded", "--json"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=180,
            env=_env(**{ia.REPORT_FILE_ENV: str(report)}),
            cwd=AGENTS,
        )
    text = report.read_text()
    assert done.returncode == 3, text + done.stderr
    doc = json.loads(text)  # the one document: nothing forged before or after it
    assert doc["verdict"] == "irreproducible" and "forged by agent code" not in text
    assert "the report's standard output (descriptor " in doc["reason"], doc["reason"]
