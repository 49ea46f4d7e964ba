"""``[`` and ``]`` in the console script's TUI replay each activation in a fresh process.

``shared_state_agents.COUNTING`` answers how many activations its interpreter ran: the
pipeline ran seq 1 and 2 of the key (outputs 1, then 2); alone, seq 2's re-run outputs 1
and diverges. Switched to from seq 1 in the same interpreter it read REPRODUCED (the
counter primed by seq 1). Driven in a real terminal (tmux).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import shared_state_agents as ssa
from incident_history import ask, dump
from replay_harness import AGENTS, T0, KeyHistory

from beam_agents.replay.incidents import bundle as bd
from beam_agents.testing import ScriptedProvider

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _bundle(path: Path) -> Path:
    ssa.COUNT[0] = 0
    history = KeyHistory(ssa.COUNTING, ssa.TOOLS, ScriptedProvider(lambda r: "x"), key=b"k")
    sent = [ask(f"q{i}", T0 + i * 1000, key=b"k") for i in range(2)]
    for envelope in sent:
        history.send(envelope)
    path.write_bytes(bd.make_bundle(
        snapshot=history.export(), traces=[history.trace_bytes()], events=[dump(sent)],
        agent="shared_state_agents:COUNTING", registry="shared_state_agents:TOOLS", all_seqs=True,
    ))  # fmt: skip
    return path


class Tmux:
    def __init__(self, socket: Path) -> None:
        self.base = ["tmux", "-S", str(socket)]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def wait_for(self, *texts: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never showed {texts}:\n{screen}")
            time.sleep(0.3)


def test_switching_activations_gives_each_the_verdict_it_has_alone(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "count.bundle")
    tmux = Tmux(tmp_path / "tmux.sock")
    done = tmp_path / "exit-code"
    command = (
        f"PYTHONPATH={AGENTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')} "
        f"{SCRIPT} tui {bundle} --import-recorded --seq 1; echo $? > {done}"
    )
    tmux("new-session", "-d", "-s", "t", "-x", "160", "-y", "45", "-c", str(AGENTS), command)
    try:
        tmux.wait_for("seq: 1", "REPRODUCED")
        tmux("send-keys", "-t", "t", "]")
        screen = tmux.wait_for("seq: 2", "exit 1")
        assert "DIVERGED" in screen and "REPRODUCED" not in screen  # as alone (exit 1)
        tmux("send-keys", "-t", "t", "[")
        tmux.wait_for("seq: 1", "REPRODUCED")
        tmux("send-keys", "-t", "t", "q")
        deadline = time.monotonic() + 60
        while not done.exists() or not done.read_text().strip():
            assert time.monotonic() < deadline, tmux.screen()
            time.sleep(0.2)
        assert done.read_text().strip() == "0"  # the last activation's verdict, as q gives it
    finally:
        subprocess.run([*tmux.base, "kill-server"], capture_output=True)
