"""Issue 23, hostile pass: what agent code did through calls CPython raises no audit event for.

``os.mkfifo``, ``os.mknod`` and ``_posixshmem.shm_open`` made a FIFO, a file and a
/dev/shm object inside a re-run judged ``reproduced`` (exit 0), an ``atexit`` hook made a
FIFO at exit, and libc's ``mkdir`` called through ``ctypes.CFUNCTYPE(address)`` (no
``dlopen``, no ``dlsym``) made a directory. A ``weakref.finalize`` refused at exit printed
its traceback. Each runs here as the console script would run it: refused and named (exit 3),
nothing made, no traceback; in ``check`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import isolation_agents as ia
import pytest
from incident_history import Incident
from replay_harness import AGENTS

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
# registry -> the audit event the reason names
CASES = {
    "TOOLS_MKFIFO": "os.mkfifo",
    "TOOLS_MKNOD": "os.mknod",
    "TOOLS_ATEXIT_MKFIFO": "os.mkfifo",
    "TOOLS_FINALIZE_WRITE": "open",
    "TOOLS_CTYPES_ADDRESS": "ctypes.call",
}


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def _run(args: list[str], target: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")]),
        ia.WRITE_TARGET_ENV: str(target),
    }
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=180, env=env, cwd=AGENTS
    )


@pytest.mark.parametrize("registry", sorted(CASES))
def test_a_file_system_change_or_native_call_without_an_audit_event_is_refused(
    incident: Incident, tmp_path: Path, registry: str
) -> None:
    bundle = tmp_path / "x.bundle"
    bundle.write_bytes(incident.make(seq=1, registry=f"isolation_agents:{registry}"))
    target = tmp_path / "made"
    out = _run([str(bundle), "--import-recorded"], target)
    assert out.returncode == 3, out.stdout + out.stderr
    assert not os.path.lexists(target)
    assert "irreproducible" in out.stdout and CASES[registry] in out.stdout, out.stdout
    assert "Traceback" not in out.stdout + out.stderr and "Exception ignored" not in out.stderr


def test_a_posix_shared_memory_object_is_not_created(incident: Incident, tmp_path: Path) -> None:
    bundle = tmp_path / "x.bundle"
    bundle.write_bytes(incident.make(seq=1, registry="isolation_agents:TOOLS_SHM_OPEN"))
    target = tmp_path / f"shm-{os.getpid()}"
    made = Path("/dev/shm") / ia.shm_name(str(target)).lstrip("/")
    try:
        out = _run([str(bundle), "--import-recorded"], target)
        assert out.returncode == 3, out.stdout + out.stderr
        assert not made.exists()
        assert "_posixshmem.shm_open" in out.stdout and str(made) in out.stdout, out.stdout
    finally:
        made.unlink(missing_ok=True)


def test_check_refuses_them_in_each_row(incident: Incident, tmp_path: Path) -> None:
    folder = tmp_path / "bundles"
    folder.mkdir()
    for registry in CASES:
        (folder / f"{registry.lower()}.bundle").write_bytes(
            incident.make(seq=1, registry=f"isolation_agents:{registry}")
        )
    (folder / "good.bundle").write_bytes(incident.make(seq=1))
    target = tmp_path / "made"
    out = _run(["check", "--import-recorded", str(folder), "--jobs", "2", "--json"], target)
    assert out.returncode == 3, out.stderr
    verdicts = {
        Path(r["path"]).stem: r["verdict"]
        for g in json.loads(out.stdout)["groups"]
        for r in g["rows"]
    }
    assert verdicts == {"good": "reproduced", **{c.lower(): "irreproducible" for c in CASES}}
    assert not os.path.lexists(target)
    assert "Traceback" not in out.stderr
