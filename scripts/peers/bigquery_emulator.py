#!/usr/bin/env python3
"""Build (once) the venv the BigQuery emulator runs in, for the sink tests.

``local-bigquery`` needs Python 3.13 and DuckDB 1.5.5 with extension files
that DuckDB would otherwise download at run time (impossible offline), so it
gets its own venv, separate from the project's:

    python scripts/peers/bigquery_emulator.py ensure --root .peers/bigquery

creates ``ROOT/venv`` from ``bigquery-requirements.txt`` (pinned), installs the
icu, ducklake and spatial extensions from their PyPI packages into
``ROOT/home/.duckdb`` (run the emulator with ``HOME=ROOT/home``), and prints
the venv's ``bin`` directory as its last line. A stamp holding the
requirements' digest makes a second run a no-op; a file lock makes concurrent
runs (two pytest sessions in one tree) wait for each other instead of racing.

Python 3.13 is looked for in ``$BEAM_AGENTS_PY313``, then pyenv's versions,
then ``python3.13`` on PATH (each run once to check it works). Exit status 3 when it cannot be found.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from peer_venv import ensure_venv, main

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "bigquery-requirements.txt"
EXTENSIONS = ("icu", "ducklake", "spatial")


def _works(python: str) -> bool:
    # A pyenv shim on PATH exists even where its version is not selected: run it to know.
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return result.stdout.strip() == "True"


def find_python313() -> str | None:
    candidates = [os.environ.get("BEAM_AGENTS_PY313", "")]
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv"), "/root/.pyenv"]
    for root in filter(None, roots):
        pattern = os.path.join(root, "versions", "3.13*", "bin", "python3.13")
        candidates.extend(sorted(glob.glob(pattern), reverse=True))
    candidates.append(shutil.which("python3.13") or "")
    for candidate in filter(None, candidates):
        if _works(candidate):
            return candidate
    return None


def ensure(root: Path) -> Path:
    home = root / "home"

    def python() -> str:
        found = find_python313()
        if found is None:
            print("Python 3.13 not found (set BEAM_AGENTS_PY313)", file=sys.stderr)
            raise SystemExit(3)
        return found

    def install_extensions(venv: Path) -> None:
        # DuckDB installs extensions under $HOME/.duckdb; the emulator runs with
        # HOME=ROOT/home so it finds them there and never tries to download.
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        code = (
            "import duckdb_extensions as d\n"
            f"for name in {EXTENSIONS!r}:\n"
            "    d.import_extension(name, force_install=True)\n"
        )
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", code],
            check=True,
            env={**os.environ, "HOME": str(home)},
        )

    return ensure_venv(root, REQUIREMENTS, python, install_extensions)


if __name__ == "__main__":
    raise SystemExit(main(__doc__.split("\n\n")[0], ensure))
