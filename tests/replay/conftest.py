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
