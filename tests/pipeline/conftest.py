"""Pipeline tests: make the test helper modules importable by Beam's worker processes.

The multi-process FnApiRunner starts SDK workers as subprocesses; they unpickle
the test agents and collecting DoFns by reference (``agents.SHOP_AGENT``,
``pipeline_harness.CollectToDir``), so they need this directory on their path.
Subprocesses inherit the environment, hence PYTHONPATH.
"""

from __future__ import annotations

import os
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if _HERE not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([_HERE, *_paths])
