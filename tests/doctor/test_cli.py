"""``beam-agents-replay doctor`` as CI runs it: exit codes 0/1/2, ``--json``, ``--junit``,
and the one-paragraph usage errors (an input of the wrong form, the extra not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from beam_agents.doctor import diagnose
from beam_agents.doctor.refusal import DoctorUsageError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "doctor" / "samples.json"
PROGRAM = str(Path(sys.executable).with_name("beam-agents-replay"))


def doctor(agent: str, *flags: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROGRAM, "doctor", "--agent", f"tests.doctor.agents.{agent}:AGENT",
         "--registry", f"tests.doctor.agents.{agent}:TOOLS",
         "--provider", "tests.doctor.agents.common:make_provider",
         "--script", str(SCRIPT), "--jobs", "2", *flags],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_clean_agent_exits_0_and_its_json_says_every_replay_reproduced() -> None:
    done = doctor("clean", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["format"] == "beam-agents/doctor" and document["version"] == 1
    assert document["exit_code"] == 0 and document["clean"] and document["findings"] == []
    roles = {c["role"] for c in document["conditions"]}
    assert roles == {"control", "screen"}  # nothing changed: no perturbation alone was run
    assert len(document["activations"]) == 4
    for activation in document["activations"]:
        assert set(activation["replays"].values()) == {"reproduced"}
    assert document["model"]["model_calls"] >= 4


def test_findings_exit_1_and_junit_fails_the_cause_with_its_line(tmp_path: Path) -> None:
    junit = tmp_path / "doctor.xml"
    done = doctor("clock", "--junit", str(junit))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wall clock: time.time() read at tests/doctor/agents/clock.py:13" in done.stdout
    failed = [
        case
        for case in ET.parse(junit).getroot().iter("testcase")
        if case.find("failure") is not None
    ]
    assert len(failed) == 1, ET.tostring(ET.parse(junit).getroot()).decode()
    assert "tests/doctor/agents/clock.py:13" in ET.tostring(failed[0]).decode()


def test_an_agent_path_of_the_wrong_form_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [PROGRAM, "doctor", "--agent", "no-colon", "--registry", "x:TOOLS",
         "--script", str(SCRIPT)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "--agent 'no-colon' is not of the form module:ATTR" in line, line
    assert "Traceback" not in done.stderr


def test_without_the_doctor_extra_it_names_the_extra_before_running_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "time_machine" else real(name, *a)
    )
    with pytest.raises(DoctorUsageError) as refused:
        diagnose(agent="tests.doctor.agents.clean:AGENT", registry="tests.doctor.agents.clean:TOOLS",
                 script=str(SCRIPT))  # fmt: skip
    assert refused.value.message == (
        "the doctor's shifted wall clock needs time-machine, which is not installed: "
        "pip install 'beam-agents[doctor]'"
    )
