#!/usr/bin/env python3
"""Build (once) the venv Arize Phoenix runs in: the real OTLP receiver of the otlp:// tests.

Phoenix (``arize-phoenix`` on PyPI) takes OTLP over gRPC and over HTTP/protobuf and
answers what it stored on a REST API, so the sink tests read back exactly what a
tracing UI shows. Its dependencies clash with the project's (it pins protobuf 7), so it
gets its own venv:

    python scripts/peers/phoenix.py ensure --root .peers/phoenix

creates ``ROOT/venv`` from ``phoenix-requirements.txt`` (pinned) with the interpreter
running this script (Phoenix supports Python 3.10 to 3.13) and prints the venv's
``bin`` directory as its last line. A stamp holding the requirements' digest makes a
second run a no-op; a file lock makes concurrent runs wait for each other.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "phoenix-requirements.txt"


def ensure(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "venv"
    stamp = venv / ".beam-agents-ready"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text().strip() == wanted:
            return venv / "bin"
        shutil.rmtree(venv, ignore_errors=True)
        # The base interpreter, not a venv's python: a venv made from a venv works, but
        # its pip would see the outer venv's packages through nothing; keep it plain.
        python = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(wanted + "\n")
        return venv / "bin"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["ensure"])
    parser.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    print(ensure(args.root.resolve()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
