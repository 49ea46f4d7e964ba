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

import sys
from pathlib import Path

from peer_venv import ensure_venv, main

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "phoenix-requirements.txt"


def ensure(root: Path) -> Path:
    # The base interpreter, not the project venv's python: Phoenix's venv is its own.
    return ensure_venv(root, REQUIREMENTS, lambda: getattr(sys, "_base_executable", sys.executable))


if __name__ == "__main__":
    raise SystemExit(main(__doc__.split("\n\n")[0], ensure))
