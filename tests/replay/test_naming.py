"""Refusals name inputs as their caller named them: Python parameters, or the CLI's flags.

A Python caller of ``Replayer`` never typed ``--snapshot``; the replay package
takes its words for each input from the caller's ``Naming`` (docs/index.md, "How
the code is laid out"). Each case here refuses one bad input twice, through
``Replayer`` and through the console's ``main``, and checks both wordings.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import replay_agents as ra
from replay_harness import T0, Inputs

from beam_agents.cli import main
from beam_agents.cli.parsing import CLI_NAMING
from beam_agents.errors import ConfigError
from beam_agents.replay import (
    Replayer,
    ReplayOptions,
    Verdict,
    check_bundles,
    list_activations,
    make_bundle,
)
from beam_agents.replay.incidents.check_rows import WorkerStuck
from beam_agents.replay.isolation.time_limit import RerunRanPast
from beam_agents.replay.naming import CHECK_BUNDLES, REPLAYER, Input, Naming
from beam_agents.replay.refusal import InputError
from beam_agents.testing import event_envelope

FLAG = re.compile(r"(?<![\w-])--[a-z]")
"""A command-line flag anywhere in a text."""


@dataclass(frozen=True)
class Case:
    """One bad input: the Python call and what it must say, the CLI's and what it must say."""

    python: Callable[[Inputs, Replayer], str]
    python_says: tuple[str, ...]
    cli: Callable[[Inputs], list[str]]
    cli_says: tuple[str, ...]


def _error(inputs: Inputs, replayer: Replayer, **given: object) -> str:
    args: dict[str, object] = {
        "snapshot": inputs.history.export(),
        "traces": inputs.history.trace_bytes(),
        "event": inputs.event,
    }
    args.update(given)
    result = replayer.replay(**args)  # type: ignore[arg-type]
    assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2, result.reason
    assert "internal error" not in result.error
    return result.error


def _garbage(inputs: Inputs, name: str, data: bytes) -> str:
    path = inputs.directory / name
    path.write_bytes(data)
    return str(path)


CASES = {
    "snapshot bytes": Case(
        lambda f, r: _error(f, r, snapshot=b"garbage"),
        ("snapshot=<7 bytes> is not a serialized StateSnapshot",),
        lambda f: f.flags(snapshot=_garbage(f, "bad-snap.pb", b"garbage")),
        ("--snapshot ", "bad-snap.pb is not a serialized StateSnapshot"),
    ),
    "snapshot file missing": Case(
        lambda f, r: _error(f, r, snapshot=str(f.directory / "none.pb")),
        ("cannot read snapshot=", "none.pb: No such file", "snapshot= takes a file path"),
        lambda f: f.flags(snapshot=str(f.directory / "none.pb")),
        ("cannot read --snapshot ", "--snapshot takes a file path"),
    ),
    "snapshot over its cap": Case(
        lambda f, r: _error(f, r, snapshot=str(f.snapshot)),
        (
            "snapshot.pb is larger than the 10-byte cap for snapshot= inputs",
            "set BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES=<bytes> in this process's environment",
        ),
        lambda f: f.flags(),
        (
            "snapshot.pb is larger than the 10-byte cap for --snapshot inputs",
            "BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES=<bytes> beam-agents-replay ...",
        ),
    ),
    "event bytes": Case(
        lambda f, r: _error(f, r, event=b"\xff\xff"),
        ("event=<2 bytes> is not a serialized AgentEnvelope",),
        lambda f: f.flags(event=_garbage(f, "bad-ev.pb", b"\xff\xff")),
        ("--event ", "bad-ev.pb is not a serialized AgentEnvelope"),
    ),
    "event missing": Case(
        lambda f, r: _error(f, r, event=None),
        ("event= is missing", "from the events topic with event="),
        lambda f: f.flags(event=None),
        ("--event is missing", "from the events topic with --event"),
    ),
    "event of another key": Case(
        lambda f, r: _error(f, r, event=event_envelope(b"other", "ask", b"x", time_ms=T0)),
        ("event= is for key 6f74686572",),
        lambda f: f.flags(
            event=_garbage(
                f, "other.pb", event_envelope(b"other", "ask", b"x", time_ms=T0).SerializeToString()
            )
        ),
        ("--event is for key 6f74686572",),
    ),
    "seq not traced": Case(
        lambda f, r: _error(f, r, seq=99),
        ("seq=99: the traces hold no activation",),
        lambda f: f.flags(seq="99"),
        ("--seq 99: the traces hold no activation",),
    ),
    "traces directory without streams": Case(
        lambda f, r: _error(f, r, traces=str(f.directory / "empty")),
        ("traces=", "empty is a directory with no *.pb", "Point traces= at the directory"),
        lambda f: f.flags(traces=str(f.directory / "empty")),
        ("--traces ", "empty is a directory with no *.pb", "Point --traces at the directory"),
    ),
    "traces that are no stream": Case(
        lambda f, r: _error(f, r, traces=b"\xff" * 12),
        ("traces: ",),
        lambda f: f.flags(traces=_garbage(f, "junk-traces.pb", b"\xff" * 12)),
        ("--traces: ",),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_refusal_names_the_python_parameter_for_replayer_and_the_flag_for_the_cli(
    case: Case, inputs: Inputs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (inputs.directory / "empty").mkdir()
    if case is CASES["snapshot over its cap"]:
        monkeypatch.setenv("BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES", "10")
    python = case.python(inputs, Replayer(agent=ra.AGENT, registry=ra.TOOLS))
    for words in case.python_says:
        assert words in python, python
    assert FLAG.search(python) is None, python

    assert main(case.cli(inputs)) == 2
    cli = capsys.readouterr().err
    for words in case.cli_says:
        assert words in cli, cli


def test_arguments_of_the_wrong_type_and_a_bad_limit_name_the_parameter(inputs: Inputs) -> None:
    replayer = Replayer(agent=ra.AGENT, registry=ra.TOOLS)
    error = _error(inputs, replayer, snapshot=42)
    assert error.startswith(
        "Replayer.replay snapshot= must be a StateSnapshot"
    ) and not FLAG.search(error)
    for seq in ("1", 1.0, True):  # "1" said "no activation at seq 1 (traced seqs: 1-3)"
        error = _error(inputs, replayer, seq=seq)
        assert error.startswith("Replayer.replay seq= must be an int or None"), error
        assert repr(seq) in error and not FLAG.search(error)
        with pytest.raises(ConfigError, match=r"^ReplayOptions seq= must be an int or None"):
            ReplayOptions(snapshot=b"", traces=(), agent="a:A", registry="a:R", seq=seq)  # type: ignore[arg-type]
    for bad in (-1, 86_401, "5"):
        with pytest.raises(ConfigError) as caught:
            Replayer(agent=ra.AGENT, registry=ra.TOOLS, time_limit=bad)  # type: ignore[arg-type]
        assert "Replayer time_limit=" in str(caught.value) and not FLAG.search(str(caught.value))


def test_the_time_limit_advice_names_the_api_that_set_it() -> None:
    def advice(naming: object) -> str:
        return RerunRanPast(0.5, None, None, naming).message  # type: ignore[arg-type]

    assert "raise the limit with Replayer(time_limit=SECONDS) (0 or None: no limit)" in advice(
        REPLAYER
    )
    assert not FLAG.search(advice(REPLAYER))
    # The command line's advice names the flag only (it said "...; Replayer(time_limit=...)
    # from Python)": Python words in a message to an operator at a terminal).
    assert advice(CLI_NAMING).endswith("raise the limit with --time-limit SECONDS (0: no limit)")
    def stuck(naming: Naming) -> str:
        return WorkerStuck(2.0, 70.0, naming.given(Input.TIME_LIMIT, "SECONDS")).message

    assert "raise the limit with check_bundles(time_limit=SECONDS) (0: no limit)" in stuck(
        CHECK_BUNDLES
    )
    assert not FLAG.search(stuck(CHECK_BUNDLES))
    assert "--time-limit SECONDS (0: no limit)" in stuck(CLI_NAMING)


def test_make_bundle_and_list_activations_name_their_parameters(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InputError) as caught:
        make_bundle(
            snapshot=inputs.history.export(),
            traces=[inputs.history.trace_bytes()],
            agent="replay_agents:AGENT",
            registry="replay_agents:TOOLS",
            seq=1,
            all_seqs=True,
        )
    assert caught.value.message.startswith("seq= and all_seqs=True were both given")
    with pytest.raises(InputError) as caught:
        list_activations([inputs.history.trace_bytes()], key="zz")
    message = caught.value.message
    assert message.startswith("key='zz': the traces hold no activation of that key")
    assert "Call list_activations without key= to see the traced keys" in message
    assert not FLAG.search(message)
    assert main(["ls", "--traces", str(inputs.traces), "--key", "zz"]) == 2
    err = capsys.readouterr().err
    assert (
        "--key 'zz': the traces hold no activation" in err and "Run ls without --key to see" in err
    )


def test_one_path_is_one_source_and_a_seq_is_an_int(inputs: Inputs, tmp_path: Path) -> None:
    """``traces="dir"`` was iterated character by character ("no trace stream at t ... --traces
    takes ..."), and ``seq="1"`` refused as "no activation at seq 1 (traced seqs: 1)"."""
    for traces in (str(inputs.traces), inputs.traces, inputs.history.trace_bytes()):
        assert [r.seq for r in list_activations(traces).rows] == [1]  # type: ignore[arg-type]
    bundle_args: dict[str, object] = {
        "snapshot": str(inputs.snapshot),
        "event": str(inputs.event_file),
        "agent": "replay_agents:AGENT",
        "registry": "replay_agents:TOOLS",
    }
    one = make_bundle(traces=str(inputs.traces), **bundle_args)  # type: ignore[arg-type]
    assert one == make_bundle(traces=[str(inputs.traces)], **bundle_args)  # type: ignore[arg-type]
    (tmp_path / "one.bundle").write_bytes(one)
    assert check_bundles(str(tmp_path / "one.bundle"), import_recorded=True).exit_code == 0
    with pytest.raises(InputError) as caught:
        make_bundle(traces=[str(inputs.traces)], seq="1", **bundle_args)  # type: ignore[arg-type]
    assert caught.value.message == "seq= must be an int or None, got str: '1'"
    with pytest.raises(InputError) as caught:
        list_activations([str(tmp_path / "nowhere")])
    assert "no trace stream at" in caught.value.message
    assert not FLAG.search(caught.value.message), caught.value.message


def test_replayer_traces_and_what_if_of_the_wrong_kind_are_refused_naming_them(
    inputs: Inputs,
) -> None:
    """traces=5 or None was "internal error: TypeError ... This is a bug in beam-agents", and a
    list of paths (as list_activations takes) "internal error: AttributeError"."""
    replayer = Replayer(agent=ra.AGENT, registry=ra.TOOLS)
    for traces in (5, None):
        error = _error(inputs, replayer, traces=traces)
        assert error.startswith("Replayer.replay traces= must be TraceEvents"), error
        assert type(traces).__name__ in error and not FLAG.search(error)
    error = _error(inputs, replayer, traces=[str(inputs.traces), 7])
    assert error.startswith("Replayer.replay traces= is a list of paths holding a int: 7")
    error = _error(inputs, replayer, traces=[*inputs.history.trace, "x"])
    assert error.startswith("Replayer.replay traces= holds a str: 'x'"), error
    error = _error(inputs, replayer, what_if="no")
    assert error == "Replayer.replay what_if= must be True or False, got str: 'no'"
    for traces in ([str(inputs.traces)], [inputs.traces, inputs.history.trace_bytes()]):
        result = replayer.replay(inputs.history.export(), traces, inputs.event)
        assert result.exit_code == 0, result.reason
    options = ReplayOptions(snapshot=b"", traces=str(inputs.traces), agent="a:A", registry="a:R")  # type: ignore[arg-type]
    assert options.traces == (str(inputs.traces),)  # not one source per character


def test_bundle_names_a_snapshot_that_does_not_parse_by_the_path_it_was_given(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _garbage(inputs, "bad-snapshot.pb", b"garbage")
    args = ["bundle", "--snapshot", bad, "--traces", str(inputs.traces)]
    args += ["--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS"]
    assert main([*args, "-o", str(inputs.directory / "out.bundle")]) == 2
    err = capsys.readouterr().err
    # It said "--snapshot <7 bytes>": the bytes it had read, not the file the operator named.
    assert f"--snapshot {bad} is not a serialized StateSnapshot" in err, err
    with pytest.raises(InputError) as caught:
        make_bundle(
            snapshot=b"garbage",
            traces=[inputs.history.trace_bytes()],
            agent="replay_agents:AGENT",
            registry="replay_agents:TOOLS",
        )
    assert caught.value.message.startswith("snapshot=<7 bytes> is not a serialized StateSnapshot")


def test_a_bundle_names_the_snapshot_it_holds_without_patching_text() -> None:
    naming = CHECK_BUNDLES.known_as(Input.SNAPSHOT, "its snapshot")
    assert naming.given(Input.SNAPSHOT, "<7 bytes>") == "its snapshot"
    assert naming.given(Input.SEQ, 3) == "seq=3" and CLI_NAMING.given(Input.SEQ, 3) == "--seq 3"
    assert naming.known_as(Input.EVENT, "a {brace}").given(Input.EVENT, 1) == "a {brace}"


# --------------------------------------------------------------------------- the layering rule

REPLAY = Path(__file__).resolve().parents[2] / "beam_agents" / "replay"

CLI_RENDERERS = {
    ("incidents/check_render.py", "render_check"): "the check table's '(--json lists all)'",
    ("reporting/redact.py", "_withheld"): "the report's 'run without --redact'",
    ("reporting/text.py", "value_text"): "the report's '--full-values prints all'",
    ("reporting/text.py", "render_report"): "the report's '--hitl PATH' header line",
    ("isolation/watchdog.py", "_fire"): "the console script's watchdog (only the CLI starts one)",
}
"""Functions that write the command line's own output (the headless report, the check
table, the console script's watchdog), and so may use its words: what they write is what
the CLI prints."""


def _flag_literals(path: Path) -> list[tuple[str, int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and FLAG.search(node.value)
        ):
            found.append((function, node.lineno, node.value))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    # Attribute docstrings (a string statement after an assignment) are documentation too.
    return [
        (function, line, text)
        for function, line, text in found
        if not _is_statement(tree, line, text)
    ]


def _is_statement(tree: ast.Module, line: int, text: str) -> bool:
    return any(
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and node.value.value == text
        and node.lineno == line
        for node in ast.walk(tree)
    )


def test_the_replay_package_spells_no_flag_outside_the_cli_renderers() -> None:
    """The rule of docs/index.md: words for inputs come from the caller's ``Naming``."""
    found = []
    paths = sorted(REPLAY.rglob("*.py"))
    assert len(paths) > 30  # every folder's modules, not only the top ones
    for path in paths:
        name = path.relative_to(REPLAY).as_posix()
        for function, line, text in _flag_literals(path):
            if (name, function) not in CLI_RENDERERS:
                found.append(f"{name}:{line} ({function or 'module'}): {text!r}")
    assert found == [], "\n".join(found)
    # Each exemption is still needed (a stale one would hide nothing, but says a wrong thing).
    for (name, function), why in CLI_RENDERERS.items():
        assert any(f == function for f, _, _ in _flag_literals(REPLAY / name)), why
