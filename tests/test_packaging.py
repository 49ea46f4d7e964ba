"""What a newcomer meets before any code runs: `make` and the package metadata."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_license_is_an_spdx_expression_setuptools_does_not_warn_about() -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message) for w in caught if "license" in str(w.message).lower()] == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_make_installs_the_provider_extras() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -e '.[dev,openai,anthropic]'" in makefile


def _fake_python(path: Path, version: str | None) -> None:
    """A `python` that reports ``version`` (or, with None, no longer runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = f'echo "{version}"' if version else "exit 127"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml in a scratch directory, with an installed-looking .venv."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MAKEFLAGS": ""}
    return subprocess.run(
        ["make", "-n", *args], cwd=project, capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize(("venv_python", "said"), [("3.9", "3.9"), (None, "broken")])
def test_make_rebuilds_a_venv_of_another_or_a_vanished_python(
    project: Path, venv_python: str | None, said: str
) -> None:
    _fake_python(project / ".venv/bin/python", venv_python)
    (project / ".venv/.installed").touch()  # newer than pyproject.toml: "installed"
    out = _make(project, "install", f"PYTHON={sys.executable}")
    assert (
        f".venv was built with Python {said}, not {sys.executable} ({PY_VERSION}): rebuilding it"
        in out.stdout
    )
    assert not (project / ".venv").exists()
    assert f"{sys.executable} -m venv .venv" in out.stdout  # and the recipe makes it anew


def test_make_keeps_a_venv_of_the_same_python(project: Path) -> None:
    _fake_python(project / ".venv/bin/python", PY_VERSION)
    (project / ".venv/.installed").touch()
    out = _make(project, "install", f"PYTHON={sys.executable}")
    assert "rebuilding" not in out.stdout and "Nothing to be done" in out.stdout
    assert (project / ".venv/bin/python").exists()


def test_make_refuses_an_unsupported_python_saying_what_to_do(project: Path) -> None:
    old = project / "old/python3.9"
    _fake_python(old, "3.9")
    # The version check itself runs the fake, which exits 0 for any -c: make it fail.
    old.write_text('#!/bin/sh\ncase "$2" in *exit*) exit 1;; *) echo 3.9;; esac\n')
    env = {**os.environ, "MAKEFLAGS": ""}
    out = subprocess.run(
        ["make", "install", f"PYTHON={old}"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode != 0
    assert "is Python 3.9; beam-agents needs 3.11 or newer" in out.stdout
    assert not (project / ".venv").exists()


def test_importing_the_pipeline_prints_none_of_beams_cloud_client_warnings() -> None:
    code = (
        "import logging, sys\n"
        "from beam_agents import AgentConfig, RunAgent\n"
        "import apache_beam.io.gcp.internal.clients.bigquery\n"
        "root = logging.getLogger()\n"
        "print(root.handlers, root.filters, logging.getLogger('apache_beam.io.filesystems').filters)\n"
        "logging.getLogger('x').warning('other warnings still print')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout == "[] [] []\n"  # no basicConfig side effect, no filter left behind
    assert out.stderr == "other warnings still print\n"


def test_no_local_environment_or_outside_link_is_tracked() -> None:
    """A tracked ``.venv`` (c3c1bf3 committed one as a symlink) deletes every checkout's own
    ignored ``.venv`` on the next rebase; a tracked link to an absolute path breaks any clone."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    paths = {line.split("\t", 1)[1]: line.split()[0] for line in listed}
    assert not [p for p in paths if p.split("/", 1)[0] in {".venv", "demo-out", ".peers"}]
    links = [p for p, mode in paths.items() if mode == "120000"]
    absolute = [p for p in links if os.readlink(ROOT / p).startswith("/")] if links else []
    assert absolute == [], f"tracked symlinks to absolute paths: {absolute}"
