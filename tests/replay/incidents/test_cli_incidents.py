"""The incident commands of the CLI: ls, --events, bundle, replaying a bundle (FILE, tui FILE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from incident_history import AGENT, TOOLS, Incident

from beam_agents._protos import IncidentBundle
from beam_agents.cli import main


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


@pytest.fixture
def files(incident: Incident, tmp_path: Path) -> dict[str, Path]:
    paths = {
        "snapshot": tmp_path / "snapshot.pb",
        "traces": tmp_path / "traces.pb",
        "events": tmp_path / "events.pb",
    }
    paths["snapshot"].write_bytes(incident.snapshot)
    paths["traces"].write_bytes(incident.traces)
    paths["events"].write_bytes(incident.events)
    return paths


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_ls_lists_every_key_then_one_with_replayability(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["ls", "--traces", str(files["traces"])], capsys)
    assert (code, err) == (0, "")
    assert "5 traced activation(s) of 2 key(s)" in out
    code, out, _ = run(
        ["ls", "--traces", str(files["traces"]), "--snapshot", str(files["snapshot"]), "--json"],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0 and doc["keys"] == 1 and doc["activations"] == 4
    assert [r["replay"] for r in doc["rows"]] == ["cached"] * 4
    code, out, err = run(["ls", "--traces", str(files["traces"]), "--key", "nobody"], capsys)
    assert (code, out) == (2, "") and "--key 'nobody'" in err and err.count("\n") == 1
    code, _, err = run(["ls"], capsys)
    assert code == 2 and "--traces" in err


def test_replay_with_events_and_the_conflicting_flags(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "--snapshot",
        str(files["snapshot"]),
        "--traces",
        str(files["traces"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
    ]
    for seq in ("1", "2", "3", "4"):
        code, out, err = run([*base, "--events", str(files["events"]), "--seq", seq], capsys)
        assert code == 0, err
        assert out.splitlines()[4] == "reproduced"
    code, _, err = run(
        [*base, "--events", str(files["events"]), "--event", str(files["events"])], capsys
    )
    assert code == 2 and "give one of them" in err
    other = files["events"].with_name("other.pb")
    other.write_bytes(b"")
    code, _, err = run([*base, "--events", str(other)], capsys)
    assert code == 2 and "is empty" in err


def test_bundle_writes_deterministically_and_replays(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_a, out_b = tmp_path / "a.bundle", tmp_path / "b.bundle"
    args = [
        "bundle",
        "--snapshot",
        str(files["snapshot"]),
        "--traces",
        str(files["traces"]),
        "--events",
        str(files["events"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
        "--all",
    ]
    code, out, err = run([*args, "-o", str(out_a)], capsys)
    assert code == 0 and out == "" and "seq 1-4" in err and str(out_a) in err
    assert run([*args, "-o", str(out_b)], capsys)[0] == 0
    assert out_a.read_bytes() == out_b.read_bytes()
    assert list(IncidentBundle.FromString(out_a.read_bytes()).seqs) == [1, 2, 3, 4]
    code, out, err = run([str(out_a), "--import-recorded"], capsys)
    assert code == 0, err
    assert "seq: 4" in out and out.splitlines()[4] == "reproduced"
    code, out, _ = run([str(out_a), "--import-recorded", "--seq", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["header"]["seq"] == 2
    code, out, _ = run(
        [str(out_a), "--import-recorded", "--seq", "1", "--agent", "replay_agents:AGENT_NEW_PROMPT"], capsys
    )
    assert code == 3
    code, _, err = run([str(out_a), "--seq", "9"], capsys)
    assert code == 2 and "holds the activation(s) at seq 1-4 only" in err


def test_bundle_refusals_exit_2_naming_the_problem(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        [
            "bundle",
            "-o",
            str(tmp_path / "x.bundle"),
            "--snapshot",
            str(files["snapshot"]),
            "--traces",
            str(files["traces"]),
            "--agent",
            AGENT,
            "--registry",
            TOOLS,
        ],
        capsys,
    )
    assert code == 2 and "no --events or --event" in err and not (tmp_path / "x.bundle").exists()
    code, _, err = run(["bundle", "--snapshot", "s"], capsys)
    assert code == 2 and "required" in err
    bad = tmp_path / "snapshot.bundle"
    bad.write_bytes(files["snapshot"].read_bytes())
    code, out, err = run([str(bad)], capsys)
    assert (code, out) == (2, "") and f"bundle {bad} is not an incident bundle" in err
    code, _, err = run([str(tmp_path / "missing.bundle")], capsys)
    assert code == 2 and "missing.bundle" in err


def test_tui_opens_a_bundle(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "i.bundle"
    args = [
        "bundle",
        "-o",
        str(path),
        "--snapshot",
        str(files["snapshot"]),
        "--traces",
        str(files["traces"]),
        "--events",
        str(files["events"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
        "--seq",
        "2",
    ]
    assert run(args, capsys)[0] == 0
    import replay_tui.app
    from beam_agents.replay.incidents import bundle as bundle_module

    loads: list[object] = []
    real_load = bundle_module.load_bundle

    def counting(*args: Any, **kwargs: Any) -> Any:
        loads.append(args)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(bundle_module, "load_bundle", counting)
    seen = []
    monkeypatch.setattr(
        replay_tui.app, "run_tui", lambda options, **kw: seen.append((options, kw)) or 0
    )
    assert run(["tui", str(path), "--import-recorded"], capsys)[0] == 0
    options, extra = seen[0]
    assert options.seq == 2 and options.agent == AGENT and options.events
    assert extra == {"seqs": (2,)}  # [ and ] switch among the bundle's activations
    assert len(loads) == 1  # the bundle was loaded a second time for its seqs


def test_tui_with_events_can_switch_between_the_traced_seqs(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import replay_tui.app

    seen: list[tuple[Any, Any]] = []
    monkeypatch.setattr(
        replay_tui.app, "run_tui", lambda options, **kw: seen.append((options, kw)) or 0
    )
    base = ["tui", "--snapshot", str(files["snapshot"]), "--traces", str(files["traces"]),
            "--agent", AGENT, "--registry", TOOLS]  # fmt: skip
    assert run([*base, "--events", str(files["events"])], capsys)[0] == 0
    assert seen[-1][1] == {"seqs": (1, 2, 3, 4)}
    assert run([*base, "--event", str(files["events"])], capsys)[0] == 0
    assert seen[-1][1] == {}  # one envelope: nothing to switch to


def test_bundle_output_never_replaces_a_special_file_nor_writes_through_a_link(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    args = [
        "bundle",
        "--snapshot",
        str(files["snapshot"]),
        "--traces",
        str(files["traces"]),
        "--events",
        str(files["events"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
    ]
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    code, _, err = run([*args, "-o", str(fifo)], capsys)
    assert code == 2 and f"cannot write {fifo}: it exists and is not a regular file" in err
    assert fifo.is_fifo()  # (as root, the same rename replaced /dev/null)
    code, _, err = run([*args, "-o", str(tmp_path)], capsys)
    assert code == 2 and "is a directory" in err
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    link = tmp_path / "link.bundle"
    link.symlink_to(target)
    assert run([*args, "-o", str(link)], capsys)[0] == 0
    assert target.read_bytes() == b"keep" and not link.is_symlink()
    code, _, err = run([*args, "-o", ""], capsys)
    assert code == 2 and "cannot write : the file name is empty" in err  # was an internal error
    # '-' means standard input or output everywhere else: it wrote a file named '-' here
    monkeypatch.chdir(tmp_path)
    code, out, err = run([*args, "-o", "-"], capsys)
    assert code == 2 and out == "" and not (tmp_path / "-").exists()
    assert "bundle: error: -o - is not standard output" in err and "name a file" in err
    long = tmp_path / ("x" * 250)  # a valid name whose old temporary name was too long
    code, _, err = run([*args, "-o", str(long)], capsys)
    assert code == 0, err
    assert long.read_bytes() == link.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bundle_and_junit_paths_never_drive_the_terminal(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = tmp_path / "e\x1b]0;owned\x07\u202eb.bundle"
    args = [
        "bundle",
        "-o",
        str(evil),
        "--snapshot",
        str(files["snapshot"]),
        "--traces",
        str(files["traces"]),
        "--events",
        str(files["events"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
    ]
    code, _, err = run(args, capsys)
    assert code == 0 and evil.is_file()
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "e\\x1b]0;owned\\x07\\u202eb.bundle" in err
    folder = tmp_path / "junit\x1b[2J"
    folder.mkdir()
    code, _, err = run(["check", "--import-recorded", str(evil), "--jobs", "1", "--junit", str(folder)], capsys)
    assert code == 2 and "cannot write --junit" in err and "is a directory" in err
    assert "\x1b" not in err and "junit\\x1b[2J" in err


@pytest.mark.parametrize("command", ["ls", "bundle", "convert-bq"])
def test_each_command_help_names_its_exit_codes(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    codes = out.split("\nexit codes:\n", 1)[1]
    listed = [line.split()[0] for line in codes.splitlines() if line[:3].strip().isdigit()]
    assert listed == (["0", "2"] if command == "convert-bq" else ["0", "2", "3"])


def test_ls_and_bundle_of_a_snapshot_with_a_migration_gap_exit_3(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from beam_agents._protos import StateSnapshot, VersionedBlob

    snapshot = StateSnapshot.FromString(files["snapshot"].read_bytes())
    snapshot.memory = VersionedBlob(kind="memory", schema_version=0, body=b"{}").SerializeToString()
    gap = tmp_path / "gap.pb"
    gap.write_bytes(snapshot.SerializeToString())
    traces = str(files["traces"])
    code, out, err = run(["ls", "--traces", traces, "--snapshot", str(gap)], capsys)
    assert (code, out) == (3, "") and "migration gap" in err
    out_file = tmp_path / "x.bundle"
    code, _, err = run(
        [
            "bundle",
            "-o",
            str(out_file),
            "--snapshot",
            str(gap),
            "--traces",
            traces,
            "--events",
            str(files["events"]),
            "--agent",
            AGENT,
            "--registry",
            TOOLS,
        ],
        capsys,
    )
    assert code == 3 and "migration gap" in err and not out_file.exists()


def test_bundle_replaces_an_existing_file_says_so_and_a_failed_run_keeps_it(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "bundle",
        "--traces",
        str(files["traces"]),
        "--events",
        str(files["events"]),
        "--agent",
        AGENT,
        "--registry",
        TOOLS,
    ]
    out_file = tmp_path / "incident.bundle"
    code, _, err = run([*args, "--snapshot", str(files["snapshot"]), "-o", str(out_file)], capsys)
    assert code == 0 and "bytes)\n" in err and "replaced" not in err
    first = out_file.read_bytes()
    out_file.write_bytes(b"an older bundle")
    code, _, err = run([*args, "--snapshot", str(files["snapshot"]), "-o", str(out_file)], capsys)
    assert code == 0 and err.endswith(", replaced the existing file)\n")
    assert out_file.read_bytes() == first  # documented choice: re-running refreshes the file
    code, _, err = run(
        [*args, "--snapshot", str(tmp_path / "nope.pb"), "-o", str(out_file)], capsys
    )
    assert code == 2 and "replaced" not in err
    assert out_file.read_bytes() == first  # a refused run leaves it as it was


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["ls"], "beam-agents-replay ls"),  # argparse's own error
        (["ls", "--traces", "no-such-dir-xyz"], "beam-agents-replay ls"),  # the command's refusal
        (["bundle", "--seq", "x"], "beam-agents-replay bundle"),
        (["convert-bq", "no-such-rows-xyz.json"], "beam-agents-replay convert-bq"),
        (["check"], "beam-agents-replay check"),
        (["--no-such-flag"], "beam-agents-replay"),
    ],
)
def test_an_error_is_prefixed_with_the_command_it_belongs_to(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"{prog}: error: ")
    assert not err.startswith(f"{prog}: error: {prog.split()[-1]}:")  # said once, not twice
