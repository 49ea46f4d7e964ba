"""The command line's shared pieces: the program name, argparse that returns instead of
exiting, the replay flags every replaying command takes, and their check into ``ReplayOptions``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import NoReturn

from beam_agents.cli.docs import doc_page
from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.options import (
    DEFAULT_TIME_LIMIT,
    MAX_TIME_LIMIT,
    ForkOptions,
    ReplayOptions,
    checked_time_limit,
)

PROG = "beam-agents-replay"

CLI_NAMING = Naming(
    names={
        Input.SNAPSHOT: "--snapshot",
        Input.TRACES: "--traces",
        Input.EVENT: "--event",
        Input.EVENTS: "--events",
        Input.SEQ: "--seq",
        Input.ALL: "--all",
        Input.KEY: "--key",
        Input.WHAT_IF: "--what-if",
        Input.TIME_LIMIT: "--time-limit",
        Input.AGENT: "--agent",
        Input.REGISTRY: "--registry",
        Input.HITL: "--hitl",
        Input.BUNDLE: "bundle",
        Input.ROWS: "ROWS",
        Input.IMPORT_RECORDED: "--import-recorded",
        Input.FORK: "--fork",
        Input.FORK_VALUE: "--set",
        Input.FORK_PROVIDER: "--fork-provider",
    },
    given_as={Input.FORK_VALUE: "--set @{}"},
    joiner=" ",
    raise_cap="{env}=<bytes> beam-agents-replay ...",
    raise_time_limit="raise the limit with --time-limit SECONDS (0: no limit)",
    import_advice=(
        "run beam-agents-replay where that module is importable (the current directory is on "
        "the import path; set PYTHONPATH for others)"
    ),
    without_switch="without the flag",
    list_keys="run ls without --key",
)
"""How the command line names replay's inputs in the messages that refuse them: by its flags
(the replay package takes this from its caller; docs/index.md, "How the code is laid out")."""
EXIT_CODES_HELP = f"""\
exit codes:
  0  reproduced: the re-run matched the traced record (also: a what-if of a pending resume,
     and a fork run to its end: verdict fork, a counterfactual, never "reproduced")
  1  diverged: the first diverging event is printed as a structured diff
  2  usage or configuration error, inputs that do not belong together, or a snapshot
     newer than the installed package
  3  irreproducible: a cache miss, a digest-only entry, a migration gap, a blocked network
     call, a resume whose continuation is no longer in the snapshot, or agent code that ran
     past --time-limit; a fork whose continuation met a request nothing may serve
137 (killed by SIGKILL, no verdict): agent code held the interpreter past twice
     --time-limit; replay's watchdog said so on standard error and ended the process

A FILE of - is read from standard input (for one flag at most).
The report's fields and the --json schema: {doc_page("replay.md")}"""


TUI_EXIT_CODES_HELP = EXIT_CODES_HELP.replace(
    "\nA FILE of - is read from standard input (for one flag at most).",
    "130  q (or ctrl+c) before the replay finished: no verdict\n\n"
    "No FILE may be - (the TUI reads its keys from standard input).",
)
"""The replay's exit codes, and the TUI's own (docs/tui.md): 130 when quit before a verdict."""



class ExitCodesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual, keeps an ``exit codes:`` epilog's layout as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit codes:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class UsageError(Exception):
    """A command line argparse (or our own checks) refuses; ``prog`` is whose ``--help`` to run."""

    def __init__(self, message: str, prog: str = PROG) -> None:
        super().__init__(message)
        self.prog = prog


class Exit(Exception):
    """argparse asked to exit (``--help``, ``--version``) with this code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so ``main`` returns a code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.prog)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise Exit(status)


def replay_usage(prog: str, *, headless: bool) -> str:
    """The replay flags' usage lines, required ones without brackets.

    The four required flags are checked by ``replay_options`` rather than argparse's
    ``required=True``, so that a mistyped flag is reported as the unrecognized argument it
    is (argparse would first report the flag it failed to recognize as missing).
    """
    indent = " " * (len("usage: ") + len(prog) + 1)
    last = (
        f"[--hitl module:ATTR] [--what-if] [--time-limit SECONDS]\n{indent}"
        "[--headless | --json] [--full-values] [--redact]"
        if headless
        else f"[--hitl module:ATTR] [--what-if] [--time-limit SECONDS]\n{indent}[--export-dir DIR]"
    )
    return (
        f"{prog} --snapshot FILE --traces FILE|DIR [--traces ...] --agent module:ATTR\n"
        f"{indent}--registry module:ATTR [--event FILE] [--events FILE|DIR] [--seq N]\n"
        f"{indent}{last}\n"
        f"{indent}[--reference module:ATTR] [--reference-path DIR]\n"
        f"{indent}[--fork N --set VALUE|@FILE [--fork-provider module:ATTR]]"
    )


IMPORT_RECORDED_HELP = (
    "import (and so run) the agent and registry the bundle records, where "
    "--agent/--registry do not replace them; without it the command names that code and "
    "imports nothing"
)
"""``--import-recorded`` of a bundle's replay (``BUNDLE``, ``tui BUNDLE``)."""


def add_replay_flags(parser: Parser, *, headless: bool) -> None:
    """The flags naming one activation's inputs (--snapshot, --traces, --agent, --registry
    required), and, listed apart, ``--import-recorded`` of a bundle's replay: the same
    command on a BUNDLE takes it (its ``--help`` lists every flag), and ``--help`` here is
    where an operator looks for it."""
    bundle = parser.add_argument_group(
        "with an incident BUNDLE instead of --snapshot and --traces (BUNDLE --help: all its flags)"
    )
    bundle.add_argument(
        "--import-recorded",
        action="store_true",
        help=f"{IMPORT_RECORDED_HELP}; every replay of a bundle needs it, or --agent and "
        "--registry naming the code to replay",
    )
    required = parser.add_argument_group("required flags")
    required.add_argument(
        "--snapshot",
        metavar="FILE",
        help="one serialized StateSnapshot (the sink's message value)",
    )
    required.add_argument(
        "--traces",
        metavar="FILE|DIR",
        action="append",
        default=[],
        help="a trace stream, or a directory of *.pb trace streams; may be repeated",
    )
    required.add_argument("--agent", metavar="module:ATTR", help="the Agent the pipeline ran")
    required.add_argument("--registry", metavar="module:ATTR", help="its ToolRegistry")
    parser.add_argument(
        "--event",
        metavar="FILE",
        help="the serialized AgentEnvelope that triggered the activation "
        "(leave out for a HITL timeout)",
    )
    parser.add_argument(
        "--events",
        metavar="FILE|DIR",
        action="append",
        default=[],
        help="instead of --event: a dump of the events/results/approvals topics (a "
        "varint-delimited stream of AgentEnvelopes, or a directory of *.pb files) to pick the "
        "triggering envelope from by its traced id and sha256; may be repeated",
    )
    parser.add_argument(
        "--seq",
        metavar="N",
        type=int,
        help="replay this traced activation instead of the key's highest traced one",
    )
    parser.add_argument(
        "--hitl",
        metavar="module:ATTR",
        help="the pipeline's HitlPolicy (default: HitlPolicy())",
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="allow replaying a pending resume, which was never traced: a what-if (exit 0 at "
        "its end, 3 at an uncached model call); without it such a replay is refused (exit 2)",
    )
    add_time_limit_flag(parser)
    add_reference_flags(parser)
    add_fork_flags(parser)
    if headless:
        parser.add_argument(
            "--headless", action="store_true", help="print the report (the default; for scripts)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON document instead of the report"
        )
        add_value_flags(parser)
    else:
        add_export_dir_flag(parser)
        add_report_only_flags(parser)


def add_report_only_flags(parser: Parser) -> None:
    """``--headless`` and ``--json`` on ``tui``: known (hidden), so that they are refused
    naming what prints the report (``refuse_report_flags``), not "unrecognized"."""
    for flag in ("--headless", "--json"):
        parser.add_argument(
            flag, dest=f"report_only_{flag[2:]}", action="store_true", help=argparse.SUPPRESS
        )


def refuse_report_flags(ns: argparse.Namespace, prog: str) -> None:
    """Refuse ``tui --headless``/``--json``: they ask for the report, which tui never prints."""
    given = [f for f in ("--headless", "--json") if getattr(ns, f"report_only_{f[2:]}", False)]
    if given:
        raise UsageError(
            f"{' and '.join(given)} {'asks' if len(given) == 1 else 'ask'} for the headless "
            "report, which tui does not print (it opens the incident view): run the same "
            f"arguments without 'tui' ({PROG} --snapshot ... or {PROG} BUNDLE ...) for the "
            "report, adding --json for one JSON document",
            prog,
        )


def add_reference_flags(parser: Parser, *, bundle: bool = False) -> None:
    """The reference run's flags (docs/replay.md, "A reference run")."""
    parser.add_argument(
        "--reference",
        metavar="module:ATTR",
        help="first replay with this agent (the build that ran in production) in a fresh "
        "process; the values it proves by the trace's digests fill the traced side",
    )
    parser.add_argument(
        "--reference-path",
        metavar="DIR",
        help="run the reference importing the agent's modules from DIR (another checkout, "
        "e.g. a worktree of the production commit)",
    )
    if bundle:
        parser.add_argument(
            "--no-reference",
            action="store_true",
            help="with --agent, do not run the bundle's recorded agent as the reference",
        )


def add_fork_flags(parser: Parser) -> None:
    """A fork's flags (docs/replay.md, "A fork")."""
    group = parser.add_argument_group(
        "fork (a counterfactual, not a reproduction)",
        "answer one traced call differently and run on from there",
    )
    group.add_argument(
        "--fork",
        metavar="N",
        type=int,
        help="the event to answer differently: a model or tool call, by its index as the "
        "headless report numbers events; every event before it must reproduce",
    )
    group.add_argument(
        "--set",
        metavar="VALUE|@FILE",
        dest="fork_value",
        help="what it receives instead: a model call's response text, a tool call's result "
        "as JSON; @FILE reads it from a file (@@ for a value starting with @)",
    )
    group.add_argument(
        "--fork-provider",
        metavar="module:ATTR",
        help="a provider (or a factory of one) for the continuation's model calls the "
        "snapshot's cache cannot serve; without it such a call ends the fork (exit 3). A "
        "real one is the only network the run may open",
    )


def fork_options(ns: argparse.Namespace, prog: str = PROG) -> ForkOptions | None:
    """``--fork N --set VALUE|@FILE [--fork-provider module:ATTR]`` checked, or None."""
    at = getattr(ns, "fork", None)
    value = getattr(ns, "fork_value", None)
    provider = getattr(ns, "fork_provider", None)
    if at is None:
        given = [flag for flag, v in (("--set", value), ("--fork-provider", provider)) if v]
        if given:
            raise UsageError(
                f"{' and '.join(given)} {'belongs' if len(given) == 1 else 'belong'} to a "
                "fork: give --fork N (the event to answer "
                "differently) too",
                prog,
            )
        return None
    if at < 0:
        raise UsageError(
            f"--fork must be an event index (0 or more, as the headless report numbers "
            f"events), got {at}",
            prog,
        )
    if value is None:
        raise UsageError(
            f"--fork {at} needs --set VALUE (or --set @FILE): what event {at} receives instead "
            "(a model call's response text, a tool call's result as JSON)",
            prog,
        )
    reference = [
        flag
        for flag, v in (
            ("--reference", getattr(ns, "reference", None)),
            ("--reference-path", getattr(ns, "reference_path", None)),
        )
        if v
    ]
    if reference:
        raise UsageError(
            f"--fork and {' and '.join(reference)} do not go together: a fork compares the "
            "traced trajectory with a counterfactual, and a reference run proves the traced "
            "side of a reproduction; run the reference without --fork",
            prog,
        )
    if value.startswith("@@"):
        return ForkOptions(at=at, value=_argv_bytes(value[1:]), provider=provider)
    if value.startswith("@"):
        if value == "@":
            raise UsageError("--set @ names no file: give --set @FILE, or --set @@ for '@'", prog)
        return ForkOptions(at=at, value_file=value[1:], provider=provider)
    return ForkOptions(at=at, value=_argv_bytes(value), provider=provider)


def _argv_bytes(text: str) -> bytes:
    """A command-line argument as the bytes it was given as (undecodable bytes came in as
    surrogates: ``os.fsencode`` gives them back, so the engine names them)."""
    return os.fsencode(text)


def time_limit(value: str) -> float:
    """``--time-limit SECONDS``: seconds from 0 to ``MAX_TIME_LIMIT`` (0: no limit)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    try:
        checked_time_limit(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 0 to {MAX_TIME_LIMIT:g} (a day; 0: no limit), "
            f"got {value!r}"
        ) from None
    return seconds


def add_time_limit_flag(parser: Parser) -> None:
    parser.add_argument(
        "--time-limit",
        metavar="SECONDS",
        type=time_limit,
        default=DEFAULT_TIME_LIMIT,
        help=f"how long agent code may run, importing it and then each re-run (default: "
        f"{DEFAULT_TIME_LIMIT:g}; 0: no limit; at most {MAX_TIME_LIMIT:g}); past it the activation "
        "is irreproducible (exit 3)",
    )


def add_export_dir_flag(parser: Parser) -> None:
    parser.add_argument(
        "--export-dir",
        metavar="DIR",
        help="where 'e' writes the Markdown and JSON reports (default: the current directory); "
        "existing files are never overwritten",
    )


def add_value_flags(parser: Parser) -> None:
    """How the re-run's values are printed (--full-values, --redact)."""
    parser.add_argument(
        "--full-values",
        action="store_true",
        help="print each value at the first divergence whole (default: cut to one line)",
    )
    parser.add_argument(
        "--redact",
        action="store_true",
        help="replace every value (arguments, results, messages, outputs, memory) by its "
        "sha256, for logs that must not hold plaintext; the verdict is the same",
    )


def looks_like_a_file(arg: str) -> bool:
    """A first argument that names a file (a bundle), not a command or a flag."""
    if arg.startswith("-"):
        return False
    return os.path.exists(arg) or os.sep in arg or "." in arg


def replay_options(ns: argparse.Namespace, prog: str = PROG) -> ReplayOptions:
    missing = [
        flag
        for flag, value in (
            ("--snapshot", ns.snapshot),
            ("--traces", ns.traces),
            ("--agent", ns.agent),
            ("--registry", ns.registry),
        )
        if not value
    ]
    if getattr(ns, "import_recorded", False):
        raise UsageError(
            "--import-recorded consents to importing the code an incident bundle records; "
            "with --snapshot and --traces the code replayed is the --agent and --registry "
            "given: drop --import-recorded, or name the bundle first "
            f"({prog} FILE --import-recorded)",
            prog,
        )
    if missing:
        raise UsageError(
            f"missing {', '.join(missing)}: a replay needs --snapshot, --traces, --agent and "
            "--registry (and --event or --events, unless the activation was a HITL timeout); "
            "or an incident bundle: beam-agents-replay FILE",
            prog,
        )
    stdin_flags = [
        flag
        for flag, value in (
            ("--snapshot", ns.snapshot),
            ("--event", ns.event),
            *(("--traces", t) for t in ns.traces),
        )
        if value == "-"
    ]
    if len(stdin_flags) > 1:
        raise UsageError(
            f"{' and '.join(stdin_flags)} all read standard input (-); only one input can",
            prog,
        )
    if ns.seq is not None and ns.seq < 0:
        raise UsageError(f"--seq must be a seq number (0 or more), got {ns.seq}", prog)
    if ns.event is not None and ns.events:
        raise UsageError(
            "--event and --events both name the triggering envelope: give one of them", prog
        )
    fork = fork_options(ns, prog)
    if fork is not None and fork.value_file == "-" and stdin_flags:
        raise UsageError(
            f"--set @- and {' and '.join(stdin_flags)} all read standard input (-); only one "
            "input can",
            prog,
        )
    return ReplayOptions(
        snapshot=ns.snapshot,
        traces=tuple(ns.traces),
        event=ns.event,
        events=tuple(ns.events),
        agent=ns.agent,
        registry=ns.registry,
        seq=ns.seq,
        hitl=ns.hitl,
        what_if=ns.what_if,
        time_limit=ns.time_limit,
        fork=fork,
        naming=CLI_NAMING,
    )
