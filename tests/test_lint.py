"""The package stays ruff- and mypy-clean: CI runs the same checks as `make lint`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_ruff_finds_nothing() -> None:
    paths = ["beam_agents", "replay_tui", "tests", "bench", "examples", "scripts"]
    proc = subprocess.run(
        [str(BIN / "ruff"), "check", "--output-format", "concise", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_strict_finds_nothing() -> None:
    proc = subprocess.run(
        [
            str(BIN / "mypy"),
            "beam_agents",
            "replay_tui",
            "examples",
            "scripts/demo.py",
            "fuzz/targets.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
