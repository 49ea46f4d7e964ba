"""``check`` forks workers from a template only where a fork is the fresh process.

A template imports an agent once and forks a worker per activation. A fork differs from
the fresh process that imported the code where the import registered a fork hook, seeded
``random`` (its own fork hook reseeds it in every child) or mapped a shared page (every
fork shares it): the agents of ``forked_import`` each do one of these at import. Each of
their bundles reproduces alone; ``check`` over the folder, with one job and with two,
must give each the same verdict (before: ``diverged`` for the first two agents, and for
the second bundle of the third, primed by the first).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from incident_history import ask, dump
from replay_harness import AGENTS, T0, KeyHistory

from beam_agents.replay.incidents import bundle as bd
from beam_agents.testing import ScriptedProvider

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
MODULES = ("at_fork", "seeded_random", "shared_page")


def _record(folder: Path, module: str, name: str) -> None:
    """One bundle: key ``name``'s first activation, recorded as a fresh process would."""
    agents = __import__(f"forked_import.{module}", fromlist=["AGENT"])
    random.seed(1234)  # the pipeline's process had just imported the agent
    if module == "shared_page":
        agents.PAGE[0] = 0
    import forked_import

    history = KeyHistory(
        agents.AGENT, forked_import.TOOLS, ScriptedProvider(lambda r: "x"), key=name.encode()
    )
    sent = [ask("q", T0, key=name.encode())]
    history.send(sent[0])
    data = bd.make_bundle(
        snapshot=history.export(),
        traces=[history.trace_bytes()],
        events=[dump(sent)],
        agent=f"forked_import.{module}:AGENT",
        registry="forked_import:TOOLS",
    )
    (folder / f"{name}.bundle").write_bytes(data)


@pytest.fixture(scope="module", params=MODULES)
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(request.param) / "bundles"
    out.mkdir()
    for name in ("k1", "k2", "k3"):
        _record(out, request.param, name)
    return out


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
    }


def test_check_gives_each_bundle_its_verdict_alone_when_the_import_marks_a_fork(
    folder: Path,
) -> None:
    alone = {}
    for bundle in sorted(folder.glob("*.bundle")):
        done = subprocess.run(
            [SCRIPT, str(bundle), "--import-recorded"],
            capture_output=True, text=True, env=_env(), cwd=AGENTS, timeout=120,
        )  # fmt: skip
        alone[bundle.stem] = done.returncode
    assert alone == {"k1": 0, "k2": 0, "k3": 0}, done.stdout + done.stderr
    for jobs in ("1", "2"):
        done = subprocess.run(
            [SCRIPT, "check", str(folder), "--import-recorded", "--jobs", jobs, "--json"],
            capture_output=True, text=True, env=_env(), cwd=AGENTS, timeout=300,
        )  # fmt: skip
        rows = [row for group in json.loads(done.stdout)["groups"] for row in group["rows"]]
        together = {Path(row["path"]).stem: row["exit_code"] for row in rows}
        assert together == alone, (jobs, [(r["path"], r["cause"]) for r in rows])
        assert done.returncode == 0
