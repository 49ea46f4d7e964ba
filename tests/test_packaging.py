"""What a newcomer meets before any code runs: `make` and the package metadata."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

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


def test_make_installs_every_extra_and_the_dev_group() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --quiet -e '.[all]' --group dev" in makefile


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_operators_install_has_nothing_of_beam_kafka_gcp_or_opentelemetry() -> None:
    project = _pyproject()["project"]
    names = {re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0] for dep in project["dependencies"]}
    assert names == {"protobuf", "textual", "deepdiff"}
    extras = project["optional-dependencies"]
    assert {"replay", "pipeline", "kafka", "pubsub", "bigquery", "otlp", "doctor", "all"} <= set(
        extras
    )
    assert "dev" not in extras  # development pins are a dependency group, never published
    assert "pytest" in " ".join(_pyproject()["dependency-groups"]["dev"])
    for sink in ("kafka", "pubsub", "bigquery", "otlp"):
        assert "beam-agents[pipeline]" in extras[sink]
    assert extras["all"] == [
        "beam-agents[pipeline,kafka,pubsub,bigquery,otlp,doctor,openai,anthropic]"
    ]
    # The doctor is an author's tool: its shifted clock is not the operator's dependency.
    assert [re.split(r"[<>=]", dep)[0] for dep in extras["doctor"]] == ["time-machine"]


def test_the_metadata_names_license_classifiers_and_urls() -> None:
    project = _pyproject()["project"]
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert {"Homepage", "Documentation", "Source", "Issues"} <= set(project["urls"])


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


# -- the operator's install, from the built wheel -------------------------------------------

BEAM_AND_CLIENTS = ("apache_beam", "confluent_kafka", "google.cloud", "opentelemetry", "grpc")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) built the way a release is: the sdist, then the wheel from the sdist."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_the_wheel_ships_the_protos_and_their_descriptor_set(built: tuple[Path, Path]) -> None:
    import zipfile

    names = set(zipfile.ZipFile(built[1]).namelist())
    protos = {p.name for p in (ROOT / "protos" / "beam_agents" / "v1").glob("*.proto")}
    assert {f"beam_agents/_protos/v1/proto/beam_agents/v1/{n}" for n in protos} <= names
    assert "beam_agents/_protos/v1/beam_agents_v1.binpb" in names
    assert "replay_tui/app.tcss" in names
    licenses = [n for n in names if n.endswith("/LICENSE") or n.endswith("licenses/LICENSE")]
    assert licenses, "LICENSE is not in the wheel's metadata"


@pytest.mark.slow
def test_the_sdist_holds_what_its_tests_need(built: tuple[Path, Path]) -> None:
    import tarfile

    with tarfile.open(built[0]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in (
        "LICENSE",
        "Makefile",
        "docs/index.md",
        "docs/sinks.md",
        "protos/beam_agents/v1/trace.proto",
        "tests/conftest.py",
        "tests/test_core_golden.py",
        "tests/fixtures/blobs/memory-v1.bin",
        "examples/support_desk/agent.py",
        "scripts/gen_protos.py",
        "scripts/demo.py",
    ):
        assert needed in names, f"{needed} is not in the sdist"
    assert not [n for n in names if "__pycache__" in n or n.startswith(".venv/")]


@pytest.mark.slow
def test_the_wheel_in_a_fresh_venv_replays_a_demo_bundle_without_beam_or_any_client(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    """An operator's ``pip install beam-agents``: replay, check and the TUI's import, nothing else."""
    demo_out = tmp_path / "demo-out"
    demo_out.mkdir()
    (demo_out / ".beam-agents-demo").write_text("")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out", str(demo_out)],
        cwd=ROOT,
        env={**os.environ, "DEMO_HEADLESS": "1"},
        check=True,
        capture_output=True,
        timeout=600,
    )
    venv = tmp_path / "operator-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(built[1])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    absent = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util, json\n"
            "def has(name):\n"
            "    try:\n"
            "        return importlib.util.find_spec(name) is not None\n"
            "    except ModuleNotFoundError:\n"
            "        return False\n"
            f"print(json.dumps([m for m in {list(BEAM_AND_CLIENTS)!r} if has(m)]))\n",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert absent.stdout.strip() == "[]", f"the operator's install has {absent.stdout}"
    # The agent's code, where an operator has it: a checkout of the pipeline's repository.
    work = tmp_path / "work"
    shutil.copytree(
        ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    replay = venv / "bin" / "beam-agents-replay"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ran = subprocess.run(
        [str(replay), str(demo_out / "bundles" / "refund-v1.bundle"), "--import-recorded"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "reproduced" in ran.stdout
    assert str(venv) in subprocess.run(
        [str(python), "-c", "import beam_agents; print(beam_agents.__file__)"],
        capture_output=True, text=True, check=True, timeout=60, cwd=work,
    ).stdout  # fmt: skip
    checked = subprocess.run(
        [str(replay), "check", str(demo_out / "bundles"), "--import-recorded"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr  # v2's divergence is the worst
    tui = subprocess.run(
        [str(python), "-c", "import replay_tui.app"], capture_output=True, text=True, timeout=60
    )
    assert tui.returncode == 0, tui.stderr
    # The pipeline without its extra says what to install.
    pipeline = subprocess.run(
        [str(python), "-c", "from beam_agents import RunAgent"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=work,
    )
    assert pipeline.returncode == 1
    assert "pip install 'beam-agents[pipeline]'" in pipeline.stderr
    sink = subprocess.run(
        [
            str(python),
            "-c",
            "from beam_agents.sinks import open_sink\n"
            "open_sink('kafka://127.0.0.1:9092/traces', role='traces')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=work,
    )
    assert "pip install 'beam-agents[kafka]'" in sink.stderr, sink.stderr
