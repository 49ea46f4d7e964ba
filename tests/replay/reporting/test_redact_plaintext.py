"""``--redact`` shows no plaintext value anywhere, also where a message quotes one.

The event's payload is a secret; agent code builds a command line, a file path and an
exit's text from it. The guard refuses the command and the write (exit 3), the exit fails
the activation as in the pipeline (here diverged: the pipeline's did not exit), and every
message says so naming the attempt; under
``--redact`` the console script's standard output and error (the report, ``--json``,
what it reports at exit) hold no byte of the secret, only its digest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redact_agents as rda
from replay_harness import AGENTS, KEY, T0, Inputs, KeyHistory

from beam_agents.testing import ScriptedProvider, event_envelope

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
SECRET = "acct-7731-OPEN-SESAME"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    history = KeyHistory(rda.AGENT, rda.TOOLS, ScriptedProvider(lambda r: "x"))
    event = event_envelope(KEY, "ask", SECRET.encode(), time_ms=T0)
    history.send(event)
    return Inputs(tmp_path_factory.mktemp("redact"), history, event)


def _replay(inputs: Inputs, agent: str, registry: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [SCRIPT, *inputs.flags(agent=f"redact_agents:{agent}", registry=f"redact_agents:{registry}"), *extra],
        capture_output=True, text=True, env=env, cwd=AGENTS, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("agent", "registry", "code", "quoted"),
    [
        ("AGENT", "TOOLS_RUN", 3, f"order-cli lookup {SECRET}"),
        ("AGENT", "TOOLS_PATH", 3, f"order-{SECRET}.json"),
        ("AGENT_EXIT", "TOOLS", 1, f"no such order: {SECRET}"),
    ],
)
def test_redact_leaves_no_plaintext_in_any_message(
    inputs: Inputs, agent: str, registry: str, code: int, quoted: str
) -> None:
    plain = _replay(inputs, agent, registry)
    assert plain.returncode == code, plain.stderr
    assert quoted in plain.stdout + plain.stderr  # without --redact the message quotes it
    for extra in ((), ("--json",)):
        redacted = _replay(inputs, agent, registry, "--redact", *extra)
        assert redacted.returncode == code
        shown = redacted.stdout + redacted.stderr
        assert SECRET not in shown, shown
        assert "sha256:" in shown
