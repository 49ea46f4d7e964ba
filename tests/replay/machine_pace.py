"""Time limits relative to this machine, for the tests whose behaviour is a time limit.

A test that gives agent code 0.3 s means the re-run's limit, not the import's; yet the
same limit covers importing the agent (docs/replay.md, "Time limit"), and on a machine
running other suites (load 8 on 2 cores) importing a helper agent in a fresh worker took
longer than that: the row said "importing ... ran past the time limit" and the test
failed, though the behaviour was right. ``limit_for_the_rerun(base)`` is ``base`` or, on
a slower moment of the machine, enough to import the agents several times over: the
time a fresh interpreter takes to import them, measured now (once per session), times
``HEADROOM``. A test states its expectations in that limit, never in a fixed number.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time

HEADROOM = 4.0


@functools.cache
def fresh_import_seconds(modules: tuple[str, ...] = ("isolation_agents", "last_resort_agents")) -> float:
    """Seconds a fresh interpreter takes, now, to import ``modules`` (and exit)."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "; ".join(f"import {m}" for m in modules)], check=True
    )  # PYTHONPATH holds the agents (tests/replay/conftest.py)
    return time.perf_counter() - started


def limit_for_the_rerun(base: float) -> float:
    """``base``, or longer where importing the agents now takes more than ``base`` allows."""
    return round(max(base, HEADROOM * fresh_import_seconds()), 1)
