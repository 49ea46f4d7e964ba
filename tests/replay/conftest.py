"""Replay tests: make ``replay_agents`` importable by the CLI subprocesses these tests start.

``replay_agents:AGENT`` is what ``--agent`` names; a subprocess finds it through
PYTHONPATH, which it inherits. The in-process tests find it because pytest puts
this directory on ``sys.path``.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if HERE not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, *_paths])


import pytest  # noqa: E402
import replay_agents as ra  # noqa: E402
from replay_harness import KEY, T0, Inputs, KeyHistory  # noqa: E402

from beam_agents.testing import event_envelope  # noqa: E402


@pytest.fixture(autouse=True)
def _tui_sees_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process ``tui`` tests run under pytest, whose stdin is not a terminal: pretend it is.

    ``tests/replay/test_hostile_inputs.py`` undoes this to test the refusal itself.
    """
    from beam_agents.cli import tui

    monkeypatch.setattr(tui, "_has_terminal", lambda: True)


@pytest.fixture
def inputs(tmp_path: Path) -> Inputs:
    """A key that asked once, its snapshot, traces and event as files (``inputs.flags()``)."""
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    return Inputs(tmp_path, history, event)
