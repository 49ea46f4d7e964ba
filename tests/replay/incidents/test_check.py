"""``check``: many bundles, one row per activation, grouped by verdict and cause; JUnit; processes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from incident_history import Incident

from beam_agents.cli import main
from beam_agents.replay.incidents.check import check_bundles
from beam_agents.replay.incidents.check_render import render_junit
from beam_agents.replay.incidents.check_rows import CheckCause
from beam_agents.replay.result import Verdict


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    incident = Incident()
    root = tmp_path_factory.mktemp("incidents")
    (root / "all.bundle").write_bytes(incident.make(all_seqs=True))
    # The same history judged against a changed tool (diverges) and a changed prompt (misses).
    (root / "tool.bundle").write_bytes(
        incident.make(seq=1, registry="replay_agents:TOOLS_CHANGED_LOOKUP")
    )
    (root / "prompt.bundle").write_bytes(
        incident.make(seq=1, agent="replay_agents:AGENT_NEW_PROMPT")
    )
    (root / "prompt2.bundle").write_bytes(
        incident.make(all_seqs=True, agent="replay_agents:AGENT_NEW_PROMPT")
    )
    (root / "snapshot.bundle").write_bytes(incident.snapshot)  # not a bundle
    (root / "cut.bundle").write_bytes(incident.make(seq=2)[:-40])
    (root / "notes.txt").write_text("not a bundle and not named like one: not checked")
    return root


def summary(report) -> list[tuple[str, int | None, Verdict, str]]:  # type: ignore[no-untyped-def]
    return [(Path(r.path).name, r.seq, r.verdict, r.cause) for r in report.rows]


def test_rows_groups_and_the_worst_verdict(folder: Path) -> None:
    report = check_bundles([folder], import_recorded=True)
    rows = summary(report)
    assert [(n, s, v) for n, s, v, _ in rows] == [
        ("all.bundle", 1, Verdict.REPRODUCED),
        ("all.bundle", 2, Verdict.REPRODUCED),
        ("all.bundle", 3, Verdict.REPRODUCED),
        ("all.bundle", 4, Verdict.REPRODUCED),
        ("cut.bundle", None, Verdict.USAGE_ERROR),
        ("prompt.bundle", 1, Verdict.IRREPRODUCIBLE),
        ("prompt2.bundle", 1, Verdict.IRREPRODUCIBLE),
        ("prompt2.bundle", 2, Verdict.IRREPRODUCIBLE),
        ("prompt2.bundle", 3, Verdict.REPRODUCED),  # the resumes' requests have no system prompt
        ("prompt2.bundle", 4, Verdict.REPRODUCED),
        ("snapshot.bundle", None, Verdict.USAGE_ERROR),
        ("tool.bundle", 1, Verdict.DIVERGED),
    ]
    assert report.exit_code == 2 and report.bundles == 6
    causes = {(g.verdict, g.cause): len(g.rows) for g in report.groups}
    assert (
        causes[
            (Verdict.DIVERGED, "TOOL_CALL 'lookup_order': attributes['beam_agents.result_sha256']")
        ]
        == 1
    )
    assert causes[(Verdict.USAGE_ERROR, "the bundle is truncated or corrupt")] == 1
    assert causes[(Verdict.USAGE_ERROR, "the bundle is not an incident bundle")] == 1
    misses = {c: n for (v, c), n in causes.items() if v is Verdict.IRREPRODUCIBLE}
    assert misses == {"cache miss (absent): messages[0]": 3}  # one group, three activations
    assert report.groups[0].verdict is Verdict.USAGE_ERROR  # worst first
    text = report.render()
    assert "worst: error (exit 2)" in text and "tool.bundle seq 1" in text
    # 10 activations replayed; the two unreadable files are rows, not activations.
    assert text.startswith("beam-agents-replay check: 10 activation(s) in 6 file(s),")
    good = check_bundles([folder / "all.bundle", folder / "tool.bundle", folder / "prompt.bundle"], import_recorded=True)
    assert good.exit_code == 1  # diverged outranks irreproducible
    assert check_bundles([folder / "prompt.bundle"], import_recorded=True).exit_code == 3
    assert check_bundles([folder / "all.bundle"], import_recorded=True).exit_code == 0


def test_the_agent_override_and_two_processes_give_the_same_rows(folder: Path) -> None:
    files = sorted(folder.glob("*.bundle"))
    one = check_bundles(files, jobs=1, import_recorded=True)
    two = check_bundles(files, jobs=2, import_recorded=True)
    assert summary(one) == summary(two) and two.jobs == 2
    fixed = check_bundles([folder / "prompt.bundle"], agent="replay_agents:AGENT", jobs=2, import_recorded=True)
    assert [r.verdict for r in fixed.rows] == [Verdict.REPRODUCED]


def test_junit_has_one_case_per_activation(folder: Path) -> None:
    report = check_bundles([folder], import_recorded=True)
    root = ET.fromstring(render_junit(report))
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(report.rows) == int(suite.get("tests", "0"))
    assert (suite.get("failures"), suite.get("errors")) == ("1", "5")  # 2 bad files, 3 misses
    failing = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name", "").rsplit("/", 1)[-1] for c in failing] == ["tool.bundle seq 1"]


def test_the_cli_prints_the_table_writes_junit_and_exits_with_the_worst(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    code = main(["check", "--import-recorded", str(folder), "--jobs", "1", "--junit", str(junit)])
    out, err = capsys.readouterr()
    assert (code, err) == (2, "")
    assert "6  reproduced" in out and "diverged" in out and junit.read_bytes().startswith(b"<?xml")
    code = main(
        [
            "check",
            "--import-recorded",
            str(folder / "all.bundle"),
            str(folder / "prompt.bundle"),
            "--json",
            "--jobs",
            "1",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert (
        code == 3
        and doc["exit_code"] == 3
        and doc["counts"] == {"irreproducible": 1, "reproduced": 4}
    )
    assert main(["check", "--import-recorded", str(folder), "--jobs", "0"]) == 2
    assert "--jobs must be 1 or more" in capsys.readouterr().err


def test_junit_stays_well_formed_xml_whatever_the_names(folder: Path, tmp_path: Path) -> None:
    """XML 1.0 forbids U+FFFE, U+FFFF (and C0 controls, lone surrogates): file names carry them."""
    import os

    (tmp_path / "a\uffffb\ufffe.bundle").write_bytes((folder / "tool.bundle").read_bytes())
    (tmp_path / os.fsdecode(b"j\xff\x01\x1b[31m.bundle")).write_bytes(b"junk")
    report = check_bundles([tmp_path], import_recorded=True)
    document = render_junit(report)
    root = ET.fromstring(document)  # expat: raises on any character XML 1.0 forbids
    names = sorted(c.get("name", "").rsplit("/", 1)[-1] for c in root.iter("testcase"))
    assert names == ["a\\uffffb\\ufffe.bundle seq 1", "j\\udcff\\x01\\x1b[31m.bundle"]
    assert all(c.get("classname") for c in root.iter("testcase"))


def test_junit_output_never_blocks_on_a_fifo_nor_writes_through_a_link(
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)  # opening it for writing used to block forever (no reader)
    assert main(["check", "--import-recorded", str(folder / "all.bundle"), "--jobs", "1", "--junit", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write --junit {fifo}: it exists and is not a regular file" in err
    # An empty name was skipped silently (no JUnit written, no error).
    assert main(["check", "--import-recorded", str(folder / "all.bundle"), "--jobs", "1", "--junit", ""]) == 2
    assert "cannot write --junit : the file name is empty" in capsys.readouterr().err
    # '-' is no file: it wrote one named '-' in the current directory, after every replay
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--import-recorded", str(folder / "all.bundle"), "--jobs", "1", "--junit", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and not (tmp_path / "-").exists()
    assert "check: error: --junit - would mix JUnit XML into check's report" in err
    # a folder that is not there was found only after every replay had run
    missing = tmp_path / "no-such-folder" / "junit.xml"
    ran: list[object] = []
    monkeypatch.setattr("beam_agents.replay.incidents.check.check_bundles", lambda *a, **k: ran.append(a))
    assert main(["check", "--import-recorded", str(folder / "all.bundle"), "--jobs", "1", "--junit", str(missing)]) == 2
    assert ran == []  # refused before any replay
    err = capsys.readouterr().err
    assert f"cannot write --junit {missing}: its folder {missing.parent} does not exist" in err
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    link = tmp_path / "junit.xml"
    link.symlink_to(target)
    assert main(["check", "--import-recorded", str(folder / "all.bundle"), "--jobs", "1", "--junit", str(link)]) == 0
    assert target.read_bytes() == b"keep" and not link.is_symlink()
    assert ET.fromstring(link.read_bytes()).find("testsuite") is not None


def test_a_directory_without_bundles_is_an_error_row_not_a_pass(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "incidents"
    (empty / "nested").mkdir(parents=True)
    (empty / "nested" / "x.bundle").write_bytes((folder / "all.bundle").read_bytes())
    (empty / "notes.txt").write_text("no bundle here")
    report = check_bundles([empty], import_recorded=True)
    [row] = report.rows
    assert (row.path, row.seq, row.verdict) == (str(empty), None, Verdict.USAGE_ERROR)
    assert row.cause == "directory holds no *.bundle file" and "subfolders" in row.detail
    assert report.exit_code == 2 and report.bundles == 0
    # Beside real bundles the empty folder is still one error row, and it still decides the code.
    mixed = check_bundles([folder / "all.bundle", empty], import_recorded=True)
    assert [r.verdict for r in mixed.rows].count(Verdict.USAGE_ERROR) == 1
    assert mixed.exit_code == 2 and len(mixed.rows) == 5
    junit = tmp_path / "junit.xml"
    assert main(["check", "--import-recorded", str(empty), "--junit", str(junit)]) == 2
    out = capsys.readouterr().out
    assert "worst: error (exit 2)" in out and "directory holds no *.bundle file" in out
    assert out.startswith("beam-agents-replay check: 0 activation(s) in 0 file(s),")
    assert main(["check", "--import-recorded", str(empty), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["activations"], doc["files"], doc["counts"]) == (0, 0, {"error": 1})
    suite = ET.fromstring(junit.read_bytes()).find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("errors")) == ("1", "1")


def test_a_divergence_into_another_event_is_grouped_by_the_two_kinds(tmp_path: Path) -> None:
    # Every attribute of an LLM_CALL and of an ACTIVATION_END differs: the cause listed them all
    # (16 fields on the demo's bundles), one long line per pair of kinds.
    bundle = tmp_path / "no-model.bundle"
    bundle.write_bytes(Incident().make(seq=1, agent="replay_agents:AGENT_NO_MODEL"))
    [row] = check_bundles([bundle], import_recorded=True).rows
    assert row.verdict is Verdict.DIVERGED
    assert row.cause == "LLM_CALL 'replay-test-model': the re-run has ACTIVATION_END here"
    assert "differs: kind, name, attributes[" in row.detail  # the full reason stays in the detail


def test_a_cause_never_loses_letters_to_the_file_name(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause was the reason with the file's path replaced by FILE: a bundle named e
    diverged at "TOOL_CALL 'lookup_ordFILEr'". A refusal now says its cause where it is made,
    and a replay's cause is built from its typed facts."""
    monkeypatch.chdir(tmp_path)
    Path("e").write_bytes((folder / "tool.bundle").read_bytes())
    Path("d").write_bytes((folder / "cut.bundle").read_bytes())
    Path("u").write_bytes((folder / "snapshot.bundle").read_bytes())
    named = {r.path: (r.verdict, r.kind, r.cause) for r in check_bundles(["e", "d", "u"], import_recorded=True).rows}
    assert named == {
        "e": (
            Verdict.DIVERGED,
            CheckCause.DIVERGED,
            "TOOL_CALL 'lookup_order': attributes['beam_agents.result_sha256']",
        ),
        "d": (Verdict.USAGE_ERROR, CheckCause.REFUSED, "the bundle is truncated or corrupt"),
        "u": (Verdict.USAGE_ERROR, CheckCause.REFUSED, "the bundle is not an incident bundle"),
    }
    # The detail still names the file.
    assert any(r.detail.startswith("bundle d ") for r in check_bundles(["d"], import_recorded=True).rows)


def test_a_cause_is_built_from_the_results_stop_never_read_back_out_of_its_reason() -> None:
    """A time-limit row was recognized by its reason's first words and cut where they said."""
    from beam_agents.replay.incidents.check_rows import result_row
    from beam_agents.replay.isolation.time_limit import RAN_PAST
    from beam_agents.replay.result import ReplayHeader, ReplayResult, StopCause

    header = ReplayHeader(version="1", agent_path="a:A", registry_path="a:T")

    def row(stop: StopCause, reason: str) -> tuple[CheckCause, str]:
        result = ReplayResult(verdict=Verdict.IRREPRODUCIBLE, reason=reason, header=header, stop=stop)
        made = result_row("x.bundle", 1, b"k", result, 0.1, time_limit=5.0)
        return made.kind, made.cause

    assert row(StopCause.TIME_LIMIT, "anything at all") == (
        CheckCause.TIME_LIMIT,
        f"{RAN_PAST} 5 s",
    )
    looks_like_it = f"{RAN_PAST} 9 s and was not judged: network blocked"
    assert row(StopCause.BLOCKED, looks_like_it) == (CheckCause.BLOCKED, looks_like_it)
