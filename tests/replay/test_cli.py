"""The command line: the seed's report shape, exit codes, --json, stdin, convert-bq, the tui hook."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from replay_harness import KEY, T0, Inputs

from beam_agents.bigquery_rows import trace_event_to_row
from beam_agents.cli import main
from beam_agents.cli.parsing import CLI_NAMING
from beam_agents.replay.options import ReplayOptions
from beam_agents.trace_stream import read_trace_stream

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
HEX64 = "[0-9a-f]{64}"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [["--help"], ["tui", "--help"]])
def test_the_written_usage_names_every_flag_help_lists(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The replay and tui usages are written by hand (replay_usage): --time-limit was listed
    # under options but missing from both usages.
    code, out, _ = run(argv, capsys)
    assert code == 0
    usage, _, rest = out.partition("\n\n")
    flags = set(re.findall(r"^  (--[a-z-]+)", rest, re.M)) - {"--help", "--version"}
    assert {"--snapshot", "--time-limit", "--what-if"} <= flags
    assert [flag for flag in sorted(flags) if flag not in usage] == []


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"], capsys) == (0, "beam-agents-replay 1.0.0a1\n", "")
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for flag in (
        "--snapshot",
        "--traces",
        "--event",
        "--agent",
        "--registry",
        "--seq",
        "--hitl",
        "--headless",
        "--json",
        "--version",
    ):
        assert flag in out
    assert "3  irreproducible" in out


def test_python_dash_m_is_the_console_script() -> None:
    # `python -m beam_agents.cli` and the console script are one program: same bytes, same code.
    for args in (["--version"], ["ls"]):
        script = subprocess.run([SCRIPT, *args], capture_output=True, timeout=60)
        module = subprocess.run(
            [sys.executable, "-m", "beam_agents.cli", *args], capture_output=True, timeout=60
        )
        assert (module.returncode, module.stdout, module.stderr) == (
            script.returncode,
            script.stdout,
            script.stderr,
        )
    assert script.returncode == 2 and b"beam-agents-replay ls: error:" in script.stderr


def test_help_lists_the_commands_and_marks_the_required_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["--help"], capsys)
    assert (code, err) == (0, "")
    usage = out.split("\n\n")[0]
    # Required flags appear bare in the usage, optional ones in brackets.
    for required in ("--snapshot FILE", "--traces FILE|DIR", "--agent module:ATTR"):
        assert f" {required}" in usage and f"[{required}" not in usage
    assert "--registry module:ATTR" in usage and "[--registry" not in usage
    for optional in (
        "[--event FILE]",
        "[--seq N]",
        "[--hitl module:ATTR]",
        "[--headless | --json]",
        "[--what-if]",
        "[--full-values]",
        "[--redact]",
        "[--time-limit SECONDS]",
    ):
        assert optional in usage
    assert "beam-agents-replay COMMAND ..." in usage
    assert "beam-agents-replay BUNDLE [--seq N]" in usage and "see BUNDLE --help" in usage
    sections = {block.split("\n", 1)[0]: block for block in out.split("\n\n")}
    required_section = sections["required flags:"]
    for flag in ("--snapshot", "--traces", "--agent", "--registry"):
        assert f"  {flag} " in required_section
    assert "--event" not in required_section and "--seq" not in required_section
    commands = sections["commands:"]
    assert re.search(
        r"^    tui +open the replay of one activation in the terminal UI", commands, re.M
    )
    assert re.search(r"^    convert-bq +turn rows of the BigQuery trace table", commands, re.M)


@pytest.mark.parametrize(
    ("command", "present", "absent"),
    [
        (
            "tui",
            [
                "usage: beam-agents-replay tui --snapshot FILE",
                "required flags:",
                "[--what-if] [--time-limit SECONDS]",
                "[--export-dir DIR]",
                "beam-agents-replay tui BUNDLE [--seq N]",
            ],
            ["  --json", "--headless"],
        ),
        ("convert-bq", ["usage: beam-agents-replay convert-bq [-h] [-o OUT] ROWS"], ["--snapshot"]),
    ],
)
def test_each_command_has_its_own_help(
    command: str, present: list[str], absent: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([command, "--help"], capsys)
    assert (code, err) == (0, "")
    for needle in present:
        assert needle in out
    for needle in absent:
        assert needle not in out


@pytest.mark.parametrize("command", [[], ["tui"]])
def test_the_replay_help_lists_import_recorded_and_the_flags_refuse_it(
    command: list[str], tmp_path: Path
) -> None:
    """Every replay of a bundle needs ``--import-recorded`` (or --agent and --registry):
    ``tui --help`` (and the top-level ``--help``) lists it, as ``check --help`` and
    ``BUNDLE --help`` do (it was only in ``tui FILE --help``). With the input flags it
    means nothing (the code is the --agent and --registry given): refused, exit 2, one
    paragraph that says what to do."""
    helped = subprocess.run(
        [SCRIPT, *command, "--help"], capture_output=True, text=True, check=False
    )
    assert helped.returncode == 0
    usage, _, flags = helped.stdout.partition("\n\n")
    assert "BUNDLE [--seq N] [--import-recorded]" in usage
    listed = re.search(r"^  --import-recorded +(.+?)\n\n", flags, re.M | re.S)
    assert listed is not None, flags
    assert "import (and so run) the agent and registry the bundle records" in " ".join(
        listed.group(1).split()
    )
    refused = subprocess.run(
        [
            SCRIPT, *command, "--snapshot", str(tmp_path / "s.pb"), "--traces",
            str(tmp_path), "--agent", "a:B", "--registry", "a:C", "--import-recorded",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert refused.stdout == "" and "Traceback" not in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert "--import-recorded consents to importing the code an incident bundle records" in (
        refused.stderr
    )
    assert "FILE --import-recorded" in refused.stderr


def test_ls_help_names_every_replay_word_of_the_listing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from beam_agents.replay.incidents import listing

    monkeypatch.setenv("COLUMNS", "1000")  # one line per paragraph: no word cut at a hyphen
    code, out, err = run(["ls", "--help"], capsys)
    assert (code, err) == (0, "")
    words = [
        value
        for name, value in vars(listing).items()
        if name.isupper() and isinstance(value, str) and value.islower() and " " not in value
    ]
    assert {"cached", "ambiguous", "incomplete-trace", "pending-resume"} <= set(words)
    for word in words:
        assert word in out, word


def test_a_command_after_flags_or_an_unknown_command_is_a_usage_error(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*inputs.flags(), "tui"], capsys)
    assert (code, out) == (2, "")
    assert "put the command first" in err and err.count("\n") == 1
    code, out, err = run(["--snapshot", "s", "tui", "--bogus"], capsys)
    assert (code, out) == (2, "")
    assert "a command ('tui') must come first" in err
    code, out, err = run(["replay-it"], capsys)
    assert (code, out) == (2, "")
    assert "invalid choice: 'replay-it'" in err and "'convert-bq'" in err
    code, _, err = run(["tui", "--agent", "a:b"], capsys)
    assert code == 2 and err.endswith("Run 'beam-agents-replay tui --help' for usage.\n")


def test_a_subcommand_is_one_registering_function(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """How a new command is added: a function adding its parser, appended to SUBCOMMANDS."""
    import argparse

    from beam_agents import cli

    def register(commands: Any) -> None:
        parser = commands.add_parser("echo", help="print NAME")
        parser.add_argument("name", metavar="NAME")
        parser.set_defaults(run=lambda ns: print(f"hello {ns.name}") or 7)

    monkeypatch.setattr(cli, "SUBCOMMANDS", (*cli.SUBCOMMANDS, register))
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)
    assert run(["echo", "you"], capsys) == (7, "hello you\n", "")
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and re.search(r"^    echo +print NAME", out, re.M)
    code, _, err = run(["echo"], capsys)
    assert code == 2 and "the following arguments are required: NAME" in err


def test_the_report_has_the_seeds_shape(inputs: Inputs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(inputs.flags(), capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:6] == [
        "beam-agents-replay 1.0.0a1",
        "  agent:  replay_agents:AGENT",
        f"  key:    {KEY.hex()}  seq: 1  now_ms: {T0}",
        "  kind:   start",
        "reproduced",
        "  provider calls: 0",
    ]
    assert re.fullmatch(
        rf"  outputs\[0\]: \d+ bytes, sha256={HEX64} \(matches the traced digest\)", lines[6]
    )
    # The snapshot was taken right after the activation: its memory is the committed one.
    assert re.fullmatch(
        rf"  memory blob: \d+ bytes, sha256={HEX64} \(matches the traced digest\)", lines[7]
    )
    assert re.fullmatch(
        rf"  memory writes: 2 key\(s\) set, 0 deleted, sha256={HEX64} \(matches the traced digest\)",
        lines[8],
    )
    assert lines[9].endswith("; its memory writes match the traced digest (2 key(s) set, 0 deleted)")
    assert "  registry: replay_agents:TOOLS" in lines
    assert any(line.startswith("  hitl policy: default (intent_ttl_ms=") for line in lines)
    assert run(["--headless", *inputs.flags()], capsys)[1] == out


def test_a_divergence_prints_the_structured_diff(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(inputs.flags(registry="replay_agents:TOOLS_CHANGED_LOOKUP"), capsys)
    assert code == 1
    assert "\ndiverged\n" in out
    assert "  first divergence: event 1 TOOL_CALL 'lookup_order'" in out
    assert re.search(
        rf"    attributes\['beam_agents.result_sha256'\]: traced \"{HEX64}\"  replayed \"{HEX64}\"",
        out,
    )


def test_a_cache_miss_names_key_event_and_differing_message(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(inputs.flags(agent="replay_agents:AGENT_NEW_PROMPT"), capsys)
    assert code == 3
    assert "\nirreproducible\n" in out
    assert "  cache miss: event 2 LLM_CALL model 'replay-test-model' (absent)" in out
    assert re.search(rf"    cache key:        {HEX64}\n", out)
    assert "(differs: the request changed)" in out
    assert "    differs in:       messages[0]" in out


def test_a_usage_error_is_one_paragraph_on_stderr(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(inputs.flags(agent="replay_agents:NOPE"), capsys)
    assert (code, out) == (2, "")
    assert err.startswith("beam-agents-replay: error: --agent replay_agents:NOPE")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "missing --snapshot, --traces, --agent, --registry"),
        (["--seq", "x"], "invalid int value"),
        (["--bogus"], "unrecognized flag --bogus"),
        (["--sequence", "1"], "unrecognized flag --sequence (did you mean --seq?)"),
        (["--trace", "DIR"], "unrecognized flag --trace (did you mean --traces?)"),
        (
            [
                "--snapshot",
                "-",
                "--event",
                "-",
                "--traces",
                "t",
                "--agent",
                "a:b",
                "--registry",
                "a:b",
            ],
            "--snapshot and --event all read standard input",
        ),
        (
            [
                "--snapshot",
                "s",
                "--traces",
                "t",
                "--agent",
                "a:b",
                "--registry",
                "a:b",
                "--seq",
                "-1",
            ],
            "--seq must be",
        ),
    ],
)
def test_bad_command_lines_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "")
    assert needle in err and err.startswith("beam-agents-replay: error:")


def test_unreadable_files_exit_2_naming_the_flag(
    inputs: Inputs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(inputs.flags(snapshot=str(tmp_path / "absent.pb")), capsys)
    assert code == 2 and "cannot read --snapshot" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(inputs.flags(traces=str(empty)), capsys)
    assert code == 2 and "no *.pb trace-stream files" in err
    code, _, err = run(inputs.flags(event=str(inputs.snapshot)), capsys)
    assert code == 2 and "--event" in err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize("flag", ["snapshot", "traces", "event"])
def test_a_dash_reads_that_file_from_stdin(
    inputs: Inputs, flag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = {
        "snapshot": inputs.snapshot,
        "traces": inputs.traces / "traces-0001.pb",
        "event": inputs.event_file,
    }[flag]
    _stdin(monkeypatch, source.read_bytes())
    code, out, err = run(inputs.flags(**{flag: "-"}), capsys)
    assert code == 0, err
    assert "\nreproduced\n" in out


def test_json_is_one_document_with_stable_fields(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["--json", *inputs.flags()], capsys)
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert {
        "verdict",
        "exit_code",
        "header",
        "events",
        "first_divergence",
        "cache_miss",
        "intents",
        "outputs",
        "memory",
        "reason",
    } <= set(doc)
    assert (doc["schema"], doc["verdict"], doc["exit_code"]) == (
        "beam-agents-replay/1",
        "reproduced",
        0,
    )
    assert doc["header"]["entity_key"] == KEY.hex()
    assert (doc["header"]["seq"], doc["header"]["now_ms"], doc["header"]["kind"]) == (
        1,
        T0,
        "start",
    )
    first = doc["events"][0]
    assert first["traced"]["kind"] == first["replayed"]["kind"] == "ACTIVATION_START"
    assert first["traced"]["entity_key"] == KEY.hex()
    assert first["traced"]["attributes"]["beam_agents.trigger"] == {
        "type": "string",
        "value": "event",
    }
    output = doc["outputs"][0]
    assert bytes.fromhex(output["hex"]).startswith(b"1:answer to:")
    assert doc["memory"]["size"] == len(bytes.fromhex(doc["memory"]["hex"]))
    assert doc["first_divergence"] is None and doc["cache_miss"] is None


def test_the_docs_json_table_names_each_field_of_the_document_once(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "replay.md").read_text()
    table = page[page.index("| Field | Type | Meaning |") :].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    _, out, _ = run(["--json", *inputs.flags()], capsys)
    assert sorted(documented) == sorted(json.loads(out))  # each once: no stale second row


def test_json_events_carry_the_engines_normalized_fields(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    # The traced model calls were billed misses; the re-run serves them from the cache. Those
    # two attributes differ raw, are normalized, and --json lists them per event, as decided.
    from beam_agents.replay.engine import replay

    code, out, _ = run(["--json", *inputs.flags()], capsys)
    doc = json.loads(out)
    assert code == 0
    options = ReplayOptions(
        snapshot=str(inputs.snapshot),
        traces=(str(inputs.traces),),
        event=str(inputs.event_file),
        agent="replay_agents:AGENT",
        registry="replay_agents:TOOLS",
    )
    expected = replay(options).events
    assert [e["normalized_fields"] for e in doc["events"]] == [
        list(p.normalized_fields) for p in expected
    ]
    llm = [e for e in doc["events"] if e["traced"]["kind"] == "LLM_CALL"]
    assert llm and all(
        e["normalized_fields"]
        == ["attributes['beam_agents.billed']", "attributes['beam_agents.cache_hit']"]
        and e["differs"] is False
        for e in llm
    )
    assert all(e["normalized_fields"] == [] for e in doc["events"] if e not in llm)


def test_json_of_a_divergence_and_of_a_usage_error(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        ["--json", *inputs.flags(registry="replay_agents:TOOLS_CHANGED_LOOKUP")], capsys
    )
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["exit_code"]) == (1, "diverged", 1)
    assert doc["first_divergence"]["index"] == 1
    assert doc["first_divergence"]["fields"][0]["path"] == "attributes['beam_agents.result_sha256']"
    assert doc["events"][1]["differs"] is True
    code, out, err = run(["--json", *inputs.flags(agent="replay_agents:NOPE")], capsys)
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["exit_code"]) == (2, "error", 2)
    assert "no attribute 'NOPE'" in doc["error"] and "no attribute 'NOPE'" in err


def test_tui_parses_the_same_flags_and_returns_the_apps_code(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []

    def run_tui(options: ReplayOptions) -> int:
        seen.append(options)
        return 3

    fake = types.ModuleType("replay_tui.app")
    fake.run_tui = run_tui  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "replay_tui.app", fake)
    assert main(["tui", *inputs.flags(seq="1")]) == 3
    (options,) = seen
    assert options == ReplayOptions(
        snapshot=str(inputs.snapshot),
        traces=(str(inputs.traces),),
        event=str(inputs.event_file),
        agent="replay_agents:AGENT",
        registry="replay_agents:TOOLS",
        seq=1,
        naming=CLI_NAMING,  # its refusals name the flags, not ReplayOptions' fields
    )


def test_an_internal_error_is_a_short_report_and_exit_2(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import beam_agents.replay.reporting.text as report

    def broken(result: object, **_: object) -> str:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(report, "render_report", broken)
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2
    assert "internal error: ZeroDivisionError: bug" in err and "Traceback" not in err


# --------------------------------------------------------------------------- convert-bq


def _rows(inputs: Inputs) -> list[dict[str, Any]]:
    rows = []
    for event in reversed(inputs.history.trace):  # a query returns rows in any order
        row = trace_event_to_row(event)
        rows.append(row)
    return rows + rows[:2]  # and best-effort de-duplication leaves copies


@pytest.mark.parametrize("shape", ["ndjson", "array"])
def test_convert_bq_turns_rows_into_a_replayable_stream(
    inputs: Inputs, tmp_path: Path, shape: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(inputs)
    rows_file = tmp_path / f"rows.{shape}"
    if shape == "ndjson":
        rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        rows_file.write_text(json.dumps(rows, indent=2))
    out = tmp_path / "converted.pb"
    code, _, err = run(["convert-bq", str(rows_file), "-o", str(out)], capsys)
    assert code == 0, err
    assert f"{len(inputs.history.trace)} trace events of 1 key(s)" in err
    assert list(read_trace_stream(out)) == inputs.history.trace
    code, stdout, _ = run(inputs.flags(traces=str(out)), capsys)
    assert code == 0 and "\nreproduced\n" in stdout


def test_convert_bq_refuses_bad_rows_and_a_terminal(
    inputs: Inputs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"entity_key": 5}]')
    code, _, err = run(["convert-bq", str(bad), "-o", str(tmp_path / "x.pb")], capsys)
    assert code == 2 and "convert-bq:" in err and "Traceback" not in err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_rows(inputs)))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, _, err = run(["convert-bq", str(good)], capsys)
    assert code == 2 and "binary trace stream" in err


# --------------------------------------------------------------------------- subprocesses

HEAVY = (
    "apache_beam",
    "google.cloud",
    "google.api_core",
    "google.auth",
    "grpc",
    "confluent_kafka",
    "opentelemetry",
    "textual",
    "replay_tui",
)


def test_the_console_script_exits_with_the_verdict(inputs: Inputs) -> None:
    ok = subprocess.run([SCRIPT, *inputs.flags()], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "\nreproduced\n" in ok.stdout
    diverged = subprocess.run(
        [SCRIPT, "--json", *inputs.flags(registry="replay_agents:TOOLS_CHANGED_LOOKUP")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert diverged.returncode == 1 and json.loads(diverged.stdout)["verdict"] == "diverged"
    bad = subprocess.run(
        [SCRIPT, *inputs.flags(snapshot=str(inputs.event_file))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr


def test_convert_bq_reads_rows_from_stdin(inputs: Inputs, tmp_path: Path) -> None:
    rows = "".join(json.dumps(r) + "\n" for r in _rows(inputs))
    out = subprocess.run(
        [SCRIPT, "convert-bq", "-"], input=rows.encode(), capture_output=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert list(read_trace_stream(out.stdout)) == inputs.history.trace


@pytest.mark.parametrize("registry", ["replay_agents:TOOLS", "replay_agents:TOOLS_CHANGED_LOOKUP"])
def test_a_replay_imports_nothing_heavy(inputs: Inputs, registry: str) -> None:
    code = (
        "import sys\n"
        "from beam_agents.cli import main\n"
        f"rc = main({inputs.flags(registry=registry)!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
        "print(rc, heavy, 'deepdiff' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = out.stderr.strip().splitlines()[-1]
    if registry.endswith("TOOLS"):
        assert last == "0 [] False"  # DeepDiff only renders a divergence
    else:
        assert last == "1 [] True"


def test_a_snapshot_passed_as_traces_is_named_in_the_error(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    # The operator's mix-up: the snapshot file given to --traces. The message names that file.
    code, out, err = run(inputs.flags(traces=str(inputs.snapshot)), capsys)
    assert (code, out) == (2, "")
    assert (
        f"--traces: {inputs.snapshot}: the frame at byte offset 0" in err and "<stream>" not in err
    )
    code, out, err = run(["ls", "--traces", str(inputs.snapshot)], capsys)
    assert code == 2 and f"--traces: {inputs.snapshot}: " in err


@pytest.mark.parametrize("flag", ["--json", "--headless"])
def test_tui_refuses_the_reports_flags_in_one_paragraph_and_nothing_on_stdout(
    flag: str, tmp_path: Path
) -> None:
    # main: "unrecognized arguments: --json", and a JSON error document on standard output.
    bundle = tmp_path / "b.bundle"
    bundle.write_bytes(b"not read: refused first")
    for argv in (
        ["tui", "--snapshot", "s", "--traces", "t", "--agent", "a:B", "--registry", "a:T", flag],
        ["tui", str(bundle), flag],
    ):
        done = subprocess.run([SCRIPT, *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert (done.returncode, done.stdout) == (2, ""), done.stdout
        assert f"{flag} asks for the headless report, which tui does not print" in done.stderr
        assert "without 'tui'" in done.stderr and done.stderr.count("\n") == 1


def test_tui_help_lists_130_for_a_quit_before_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["tui", "--help"], capsys)
    assert code == 0 and "130  q (or ctrl+c) before the replay finished: no verdict" in out  # main: none
    assert "A FILE of - is read from standard input" not in out  # tui reads its keys there


def test_the_build_line_says_same_build_and_what_it_covers_or_that_none_was_recorded(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    from beam_agents._protos import StateSnapshot

    # main: no line at all in both cases, so "no skew" and "nothing recorded" read alike.
    code, out, _ = run(inputs.flags(), capsys)
    assert code == 0, out
    [line] = [x for x in out.splitlines() if x.startswith("  build")]
    assert line.startswith("  build: the same as the snapshot's, replay_agents:")
    assert line.endswith(
        "(code is the sha256 of the agent class's module file only, not of the modules it imports)"
    )
    snapshot = StateSnapshot.FromString(inputs.snapshot.read_bytes())
    snapshot.ClearField("agent_build")  # as written before builds were recorded
    inputs.snapshot.write_bytes(snapshot.SerializeToString())
    code, out, _ = run(inputs.flags(), capsys)
    assert code == 0, out
    [line] = [x for x in out.splitlines() if x.startswith("  build")]
    assert line.startswith("  build: the snapshot records none (written before builds were recorded)")
