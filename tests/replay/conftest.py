"""Replay tests, in folders mirroring ``beam_agents/replay/``; the helper agents in ``agents/``.

``replay_agents:AGENT`` is what ``--agent`` names: the agents are importable by
their module names from ``agents/`` (put on ``sys.path`` here for the in-process
tests, and on PYTHONPATH for the CLI subprocesses these tests start, which inherit
it). The harnesses (``replay_harness``, ``incident_history``, ``replay_fixtures``)
are importable from this directory: pytest puts it on ``sys.path`` for this file,
and it goes on PYTHONPATH too (Beam's worker processes unpickle what they use).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
AGENTS = str(Path(HERE) / "agents")
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [*(p for p in (AGENTS, HERE) if p not in _paths), *_paths]
)
if AGENTS not in sys.path:
    sys.path.insert(0, AGENTS)


import pytest  # noqa: E402
import replay_agents as ra  # noqa: E402
from replay_harness import KEY, T0, Inputs, KeyHistory  # noqa: E402

from beam_agents.testing import event_envelope  # noqa: E402


@pytest.fixture(autouse=True)
def _tui_sees_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process ``tui`` tests run under pytest, whose stdin is not a terminal: pretend it is.

    ``tests/replay/inputs/test_hostile_inputs.py`` undoes this to test the refusal itself.
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
