"""``check`` gives each activation the verdict it has alone: one fresh process per activation.

Agent modules keep module state and their threads outlive an activation. The agents of
``shared_state_agents`` make a verdict depend on what ran before it in the same
interpreter (a module-global counter; a thread that waits for the next activation, then
connects); the console script's ``check`` over a folder of their bundles must give every
activation the verdict ``beam-agents-replay BUNDLE`` gives it alone, with one job and with
two. The same folder replayed in one interpreter (``check_bundles(isolate=False)``) shows
what the test guards against.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import shared_state_agents as ssa
from incident_history import ask, dump
from replay_harness import AGENTS, T0, KeyHistory

from beam_agents.replay.incidents import bundle as bd
from beam_agents.replay.incidents.check import check_bundles
from beam_agents.testing import ScriptedProvider

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


def _bundles(folder: Path, agent: str, keys: dict[str, int], *, seqs: dict[str, int]) -> None:
    """One bundle per name: key ``name``'s activation ``seqs[name]`` of ``keys[name]``."""
    for name, count in keys.items():
        ssa.COUNT[0] = 0  # the pipeline ran each key in a process of its own
        history = KeyHistory(
            getattr(ssa, agent), ssa.TOOLS, ScriptedProvider(lambda r: "x"), key=name.encode()
        )
        sent = [ask(f"q{i}", T0 + i * 1000, key=name.encode()) for i in range(count)]
        for envelope in sent:
            history.send(envelope)
        data = bd.make_bundle(
            snapshot=history.export(),
            traces=[history.trace_bytes()],
            events=[dump(sent)],
            agent=f"shared_state_agents:{agent}",
            registry="shared_state_agents:TOOLS",
            seq=seqs.get(name, count),
        )
        (folder / f"{name}.bundle").write_bytes(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fresh") / "bundles"
    out.mkdir()
    # a-primer: key a's seq 1 (outputs 1); b-primed: key a's seq 2 (outputs 2, but 1 alone).
    _bundles(out, "COUNTING", {"a-primer": 1}, seqs={})
    _bundles(out, "COUNTING", {"b-primed": 2}, seqs={"b-primed": 2})
    _bundles(out, "COUNTING", {"c-first": 1, "d-first": 1, "e-first": 1}, seqs={})
    _bundles(out, "LEAKY", {"f-leak": 1, "g-leak": 1}, seqs={})
    return out


@pytest.fixture
def listener() -> Iterator[str]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    host, port = server.getsockname()[:2]
    try:
        yield f"{host}:{port}"
    finally:
        server.close()


def _env(target: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
        ssa.NETWORK_TARGET_ENV: target,
    }


ALONE = {
    "a-primer": 0,
    "b-primed": 1,  # seq 2 outputs 1 alone, not the traced 2
    "c-first": 0,
    "d-first": 0,
    "e-first": 0,
    "f-leak": 0,
    "g-leak": 0,
}


def test_check_gives_every_bundle_the_verdict_it_has_alone(folder: Path, listener: str) -> None:
    env = _env(listener)
    alone = {}
    for bundle in sorted(folder.glob("*.bundle")):
        done = subprocess.run(
            [SCRIPT, str(bundle), "--import-recorded"],
            capture_output=True, text=True, env=env, cwd=AGENTS, timeout=120,
        )  # fmt: skip
        alone[bundle.stem] = done.returncode
    assert alone == ALONE
    for jobs in ("1", "2"):
        done = subprocess.run(
            [SCRIPT, "check", str(folder), "--import-recorded", "--jobs", jobs, "--json"],
            capture_output=True, text=True, env=env, cwd=AGENTS, timeout=300,
        )  # fmt: skip
        document = json.loads(done.stdout)
        rows = [row for group in document["groups"] for row in group["rows"]]
        together = {Path(row["path"]).stem: row["exit_code"] for row in rows}
        assert together == alone, (jobs, [(r["path"], r["cause"]) for r in rows])
        assert done.returncode == 1


def test_in_one_interpreter_the_verdicts_depend_on_what_ran_before(
    folder: Path, listener: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``check`` must never do (and did: one worker replayed many bundles)."""
    monkeypatch.setenv(ssa.NETWORK_TARGET_ENV, listener)
    ssa.COUNT[0] = 0
    ssa._RAN.clear()
    report = check_bundles([folder], import_recorded=True, isolate=False)
    shared = {Path(row.path).stem: row.exit_code for row in report.rows}
    assert shared["b-primed"] == 0  # primed by a-primer's activation: "reproduced"
    assert [shared[name] for name in ("c-first", "d-first", "e-first")] == [1, 1, 1]
    assert shared["g-leak"] == 3  # f-leak's thread connected during g-leak's re-run


def test_checks_processes_never_import_the_divergence_differ(folder: Path, listener: str) -> None:
    """A row never shows the DeepDiff rendering of a divergence, so neither ``check`` nor
    the templates it forks workers from import DeepDiff (with it came numpy and pydantic:
    every fork and every page a worker touched cost more). The row of a bundle that
    diverges still names the differing fields."""
    code = (
        "import json, sys\n"
        "from beam_agents.replay.incidents.check import check_bundles\n"
        "report = check_bundles([sys.argv[1]], import_recorded=True, jobs=2, isolate=True)\n"
        "print(json.dumps({'modules': sorted(m for m in ('deepdiff', 'numpy', 'pydantic')\n"
        "                                      if m in sys.modules),\n"
        "                  'rows': {r.path: [r.verdict.value, r.cause] for r in report.rows}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True, text=True, env=_env(listener), cwd=AGENTS, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["modules"] == []
    rows = {Path(path).stem: row for path, row in seen["rows"].items()}
    verdict, cause = rows["b-primed"]
    assert verdict == "diverged" and "ACTIVATION_END" in cause, cause
