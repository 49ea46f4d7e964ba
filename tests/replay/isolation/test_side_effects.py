"""Replay reads: it opens no socket and writes no file (audit events recorded during a replay)."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory

from beam_agents.cli import main
from beam_agents.testing import event_envelope

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_FILE_CHANGES = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.replace",
        "os.rmdir",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.utime",
        "shutil.copyfile",
        "shutil.move",
        "shutil.rmtree",
    }
)


class _Recorder:
    """Audit events of interest, recorded only while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.writes: list[tuple[str, Any]] = []
        self.sockets: list[tuple[str, Any]] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes:
                self.writes.append((event, path))
        elif event in _FILE_CHANGES:
            self.writes.append((event, args[:1]))
        elif event.startswith("socket."):
            self.sockets.append((event, args[1:]))


_RECORDER = _Recorder()
sys.addaudithook(_RECORDER)  # audit hooks cannot be removed: inert unless active


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    _RECORDER.writes.clear()
    _RECORDER.sockets.clear()
    try:
        yield _RECORDER
    finally:
        _RECORDER.active = False


@pytest.fixture
def fresh_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A copy of replay_agents under a new name, so the replay itself imports it (and could
    write its bytecode cache)."""
    name = f"fresh_agents_{uuid.uuid4().hex}"
    shutil.copy(Path(ra.__file__), tmp_path / f"{name}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize("registry", ["TOOLS", "TOOLS_CHANGED_LOOKUP"])
def test_a_replay_opens_no_socket_and_writes_no_file(
    tmp_path: Path,
    recorder: _Recorder,
    fresh_agents: str,
    registry: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "snapshot.pb").write_bytes(history.export())
    (inputs / "traces.pb").write_bytes(history.trace_bytes())
    (inputs / "event.pb").write_bytes(event.SerializeToString())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = [
        "--snapshot",
        str(inputs / "snapshot.pb"),
        "--traces",
        str(inputs / "traces.pb"),
        "--event",
        str(inputs / "event.pb"),
        "--agent",
        f"{fresh_agents}:AGENT",
        "--registry",
        f"{fresh_agents}:{registry}",
        "--json",
    ]
    recorder.active = True
    code = main(argv)
    recorder.active = False
    capsys.readouterr()
    assert code == (0 if registry == "TOOLS" else 1)
    assert recorder.sockets == []
    assert recorder.writes == []
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no __pycache__
