"""A peer's own venv, built once from a pinned requirements file: what the peer scripts share.

``ensure_venv`` creates ``ROOT/venv`` from the requirements (pinned), runs the peer's
own finishing step, and writes a stamp holding the requirements' digest, so a second
run is a no-op; a file lock makes concurrent runs (two pytest sessions in one tree)
wait for each other instead of racing. ``main`` is the scripts' ``ensure --root ROOT``
command line, which prints the venv's ``bin`` directory as its last line.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path


def ensure_venv(
    root: Path,
    requirements: Path,
    python: Callable[[], str],
    finish: Callable[[Path], None] | None = None,
) -> Path:
    """The ``bin`` directory of ``ROOT/venv``, built first if missing or stale.

    Args:
        root: Where the venv (and anything ``finish`` makes) lives.
        requirements: The pinned requirements file.
        python: Finds the interpreter to build the venv with (called only to build).
        finish: Run after the install with the venv's path (e.g. to fetch data files).
    """
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "venv"
    stamp = venv / ".beam-agents-ready"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == wanted:
            return venv / "bin"
        interpreter = python()
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", "-r", str(requirements)], check=True)
        if finish is not None:
            finish(venv)
        stamp.write_text(wanted + "\n")
        return venv / "bin"


def main(description: str, ensure: Callable[[Path], Path], argv: list[str] | None = None) -> int:
    """``SCRIPT ensure --root ROOT``: build the venv, print its ``bin`` directory."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("command", choices=["ensure"])
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    print(ensure(args.root.resolve()))
    return 0
