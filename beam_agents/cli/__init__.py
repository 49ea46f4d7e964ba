"""``beam-agents-replay``: replay one activation headless (default), as JSON, or in the TUI.

    beam-agents-replay --snapshot FILE --traces FILE|DIR [--traces ...] [--event FILE]
                       --agent module:ATTR --registry module:ATTR [--seq N]
                       [--hitl module:ATTR] [--headless] [--json]
    beam-agents-replay tui <the same flags but --headless/--json>
    beam-agents-replay convert-bq ROWS [-o OUT]
    beam-agents-replay --version | --help | COMMAND --help

The parser is ``build_parser()``: the default (replay) flags on the top-level parser and
one argparse subparser per command, each registered by one function in ``SUBCOMMANDS``.

Exit codes are the verdict's (0 reproduced or what-if, 1 diverged, 2 usage or
configuration error, 3 irreproducible). ``main`` returns the code instead of
exiting, so tests can call it in-process. Nothing heavy is imported on the way
to a headless verdict: no Beam, no Google or Kafka client, no Textual, and
DeepDiff only when there is a divergence to render.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from beam_agents._version import __version__
from beam_agents.replay.escape import escape
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import EXIT_OK, EXIT_USAGE, ReplayResult, Verdict

__all__ = ["PROG", "SUBCOMMANDS", "build_parser", "main"]

PROG = "beam-agents-replay"
_CONVERT_BQ = f"{PROG} convert-bq"

_EXIT_CODES_HELP = """\
exit codes:
  0  reproduced: the re-run matched the traced record (also: a what-if of a pending resume)
  1  diverged: the first diverging event is printed as a structured diff
  2  usage or configuration error, inputs that do not belong together, or a snapshot
     newer than the installed package
  3  irreproducible: a cache miss, a digest-only entry, a migration gap, a blocked network
     call, or a resume whose continuation is no longer in the snapshot

A FILE of - is read from standard input (for one flag at most).
See docs/replay.md for the report fields and the --json schema."""

_LS_EXIT_CODES_HELP = """\
exit codes:
  0  listed (a line that cannot replay is a listing, not an error)
  2  usage error, unreadable traces or snapshot, or a --key no traced activation has
  3  the snapshot has a migration gap (nothing it holds can be replayed)"""

_BUNDLE_EXIT_CODES_HELP = """\
exit codes:
  0  the bundle was written (-o FILE)
  2  usage error, inputs that do not belong together, an envelope not in --events,
     or FILE cannot be written
  3  the snapshot has a migration gap (a bundle of it could not replay)"""

_CONVERT_BQ_EXIT_CODES_HELP = """\
exit codes:
  0  the trace stream was written
  2  usage error, rows that are not trace-table rows, or OUT cannot be written"""


class _ExitCodesFormatter(argparse.HelpFormatter):
    """Wraps the description as usual, keeps an ``exit codes:`` epilog's layout as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit codes:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _UsageError(Exception):
    """A command line argparse (or our own checks) refuses; ``prog`` is whose ``--help`` to run."""

    def __init__(self, message: str, prog: str = PROG) -> None:
        super().__init__(message)
        self.prog = prog


class _Exit(Exception):
    """argparse asked to exit (``--help``, ``--version``) with this code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so ``main`` returns a code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message, self.prog)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def _replay_usage(prog: str, *, headless: bool) -> str:
    """The replay flags' usage lines, required ones without brackets.

    The four required flags are checked by ``_options`` rather than argparse's
    ``required=True``, so that a mistyped flag is reported as the unrecognized argument it
    is (argparse would first report the flag it failed to recognize as missing).
    """
    indent = " " * (len("usage: ") + len(prog) + 1)
    last = (
        f"[--hitl module:ATTR] [--what-if] [--headless | --json]\n{indent}"
        "[--full-values] [--redact]"
        if headless
        else "[--hitl module:ATTR] [--what-if] [--export-dir DIR]"
    )
    return (
        f"{prog} --snapshot FILE --traces FILE|DIR [--traces ...] --agent module:ATTR\n"
        f"{indent}--registry module:ATTR [--event FILE] [--events FILE|DIR] [--seq N]\n"
        f"{indent}{last}"
    )


def _add_replay_flags(parser: _Parser, *, headless: bool) -> None:
    """The flags naming one activation's inputs (--snapshot, --traces, --agent, --registry required)."""
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
    if headless:
        parser.add_argument(
            "--headless", action="store_true", help="print the report (the default; for scripts)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON document instead of the report"
        )
        _add_value_flags(parser)
    else:
        _add_export_dir_flag(parser)


def _add_export_dir_flag(parser: _Parser) -> None:
    parser.add_argument(
        "--export-dir",
        metavar="DIR",
        help="where 'e' writes the Markdown and JSON reports (default: the current directory); "
        "existing files are never overwritten",
    )


def _add_value_flags(parser: _Parser) -> None:
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


# --------------------------------------------------------------------------- subcommands
#
# Each subcommand is one function that registers its parser on the subparsers action and
# sets ``run`` (a function of the parsed namespace returning the exit code). To add one,
# write ``_register_x(commands)`` and append it to ``SUBCOMMANDS``; ``--help`` lists it.


def _register_tui(commands: argparse._SubParsersAction[_Parser]) -> None:
    parser = commands.add_parser(
        "tui",
        usage=(
            f"{_replay_usage(f'{PROG} tui', headless=False)}\n"
            f"       {PROG} tui BUNDLE [--seq N] ...  (an incident bundle; see BUNDLE --help)"
        ),
        help="open the replay of one activation in the terminal UI (the same flags, "
        "without --headless/--json)",
        description="Open the replay of one activation in the terminal UI.",
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    _add_replay_flags(parser, headless=False)
    parser.set_defaults(run=_run_tui)


def _register_convert_bq(commands: argparse._SubParsersAction[_Parser]) -> None:
    parser = commands.add_parser(
        "convert-bq",
        help="turn rows of the BigQuery trace table into a trace stream for --traces",
        description=(
            "Turn rows of the BigQuery trace table (a JSON array or newline-delimited JSON, as "
            "`bq query --format=json|prettyjson` or the client library save them) into a trace "
            "stream for --traces. Rows are sorted by (entity_key, seq, index); exact duplicates "
            "are kept once."
        ),
        epilog=_CONVERT_BQ_EXIT_CODES_HELP,
        formatter_class=_ExitCodesFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("rows", metavar="ROWS", help="the rows file, or - for standard input")
    parser.add_argument(
        "-o", "--output", metavar="OUT", default="-", help="the trace stream to write (default: -)"
    )
    parser.set_defaults(run=_run_convert_bq)


def _register_ls(commands: argparse._SubParsersAction[_Parser]) -> None:
    parser = commands.add_parser(
        "ls",
        help="list the traced activations of a key (or of every key), and which a snapshot "
        "can replay",
        description=(
            "List the traced activations, one line each: seq, kind, trigger, envelope id, "
            "outcome (done/suspended/released/failed), model calls, staged intents. Every key, "
            "with a count, unless --key or --snapshot names one. Given a snapshot, each line "
            "also says whether it replays from it: cached (every model response and recorded "
            "tool result is in the snapshot), evicted, expired, digest-only, minted-later, "
            "ambiguous (a recorded tool call with two results), not-committed (a failed "
            "activation's billed response), continuation-gone, after-snapshot, "
            "incomplete-trace, or the key's pending-resume (a what-if). See docs/incidents.md."
        ),
        epilog=_LS_EXIT_CODES_HELP,
        formatter_class=_ExitCodesFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--traces",
        metavar="FILE|DIR",
        action="append",
        default=[],
        required=True,
        help="a trace stream, or a directory of *.pb trace streams; may be repeated",
    )
    parser.add_argument(
        "--snapshot", metavar="FILE", help="list its key, and say what replays from it"
    )
    parser.add_argument("--key", metavar="HEX|TEXT", help="the key: hex of its bytes, or its text")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(run=_run_ls)


def _register_bundle(commands: argparse._SubParsersAction[_Parser]) -> None:
    parser = commands.add_parser(
        "bundle",
        help="write an incident bundle: snapshot, trace slice, envelopes, agent, in one file",
        description=(
            "Write one self-describing incident bundle (docs/incidents.md): the snapshot, the "
            "trace events of the activations it replays (the highest traced one, --seq N, or "
            "--all up to the snapshot's seq), the envelopes that triggered them (picked from "
            "--events by traced id and sha256), the agent, registry and HITL policy, and the "
            "package version. The same inputs give the same bytes. Replay it with "
            "beam-agents-replay FILE, tui FILE, or check FILE."
        ),
        epilog=_BUNDLE_EXIT_CODES_HELP,
        formatter_class=_ExitCodesFormatter,
        allow_abbrev=False,
    )
    required = parser.add_argument_group("required flags")
    required.add_argument("-o", "--output", metavar="FILE", required=True, help="the bundle")
    required.add_argument("--snapshot", metavar="FILE", required=True, help="the StateSnapshot")
    required.add_argument(
        "--traces", metavar="FILE|DIR", action="append", required=True, help="trace streams"
    )
    required.add_argument("--agent", metavar="module:ATTR", required=True, help="the Agent")
    required.add_argument("--registry", metavar="module:ATTR", required=True, help="its tools")
    parser.add_argument(
        "--events",
        metavar="FILE|DIR",
        action="append",
        default=[],
        help="topic dumps holding the triggering envelopes; may be repeated",
    )
    parser.add_argument("--event", metavar="FILE", help="one triggering envelope")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seq", metavar="N", type=int, help="bundle this activation")
    which.add_argument(
        "--all", action="store_true", help="bundle every traced activation up to the snapshot"
    )
    parser.add_argument("--hitl", metavar="module:ATTR", help="the pipeline's HitlPolicy")
    parser.set_defaults(run=_run_bundle_write)


def _register_check(commands: argparse._SubParsersAction[_Parser]) -> None:
    parser = commands.add_parser(
        "check",
        help="replay many incident bundles in parallel; a table grouped by verdict and cause",
        description=(
            "Replay every activation of every bundle (a directory stands for its *.bundle "
            "files), in worker processes, and print the verdicts grouped by verdict and cause "
            "(first divergence: event kind, name and fields; cache miss: the request "
            "components that differ). A file that is not a bundle is an error row; the run "
            "never stops at it. Exit code: the worst verdict, in the order error (2), "
            "diverged (1), irreproducible (3), reproduced (0)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("paths", metavar="PATH", nargs="+", help="bundle files or directories")
    parser.add_argument(
        "--agent", metavar="module:ATTR", help="replay with this agent, not each bundle's own"
    )
    parser.add_argument(
        "--registry", metavar="module:ATTR", help="replay with these tools, not each bundle's own"
    )
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes (default: the number of CPUs; 1 replays in this process)",
    )
    parser.set_defaults(run=_run_check)


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[_Parser]], None], ...] = (
    _register_tui,
    _register_convert_bq,
    _register_ls,
    _register_bundle,
    _register_check,
)


def build_parser() -> _Parser:
    """The whole command line (see ``_build``), for ``--help`` and for tests."""
    return _build()[0]


def _build() -> tuple[_Parser, argparse._SubParsersAction[_Parser]]:
    """The whole command line: the default (replay) flags, and one subparser per subcommand.

    ``beam-agents-replay --snapshot ...`` (no subcommand) is the headless/JSON replay;
    ``beam-agents-replay COMMAND ...`` runs that subcommand's parser on what follows it.
    """
    parser = _Parser(
        prog=PROG,
        usage=(
            f"{_replay_usage(PROG, headless=True)}\n"
            f"       {PROG} BUNDLE [--seq N] [--json] ...  (an incident bundle's replay; "
            "see BUNDLE --help)\n"
            f"       {PROG} COMMAND ...  (COMMAND --help for its flags)\n"
            f"       {PROG} --version | --help"
        ),
        description=(
            "Re-run one traced activation offline, from a StateSnapshot, its trace stream and "
            "its triggering envelope, against a provider that serves nothing; then diff the "
            "re-run against the trace. Without a COMMAND, the replay is printed as a report "
            "(or, with --json, one JSON document)."
        ),
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    _add_replay_flags(parser, headless=True)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", prog=PROG, parser_class=_Parser
    )
    for register in SUBCOMMANDS:
        register(commands)
    parser.set_defaults(run=_run_replay)
    return parser, commands


def _looks_like_a_file(arg: str) -> bool:
    """A first argument that names a file (a bundle), not a command or a flag."""
    if arg.startswith("-"):
        return False
    return os.path.exists(arg) or os.sep in arg or "." in arg


def _parse(args: Sequence[str]) -> argparse.Namespace:
    parser, commands = _build()
    if args[:1] and args[0] not in commands.choices and _looks_like_a_file(args[0]):
        ns = _bundle_parser(PROG, headless=True).parse_args(args)
        ns.command, ns.run = None, _run_bundle
        return ns
    if args[:2] and args[0] == "tui" and len(args) > 1 and _looks_like_a_file(args[1]):
        ns = _bundle_parser(f"{PROG} tui", headless=False).parse_args(args[1:])
        ns.command, ns.run = "tui", _run_bundle_tui
        return ns
    if args[:1] and args[0] in commands.choices:
        # The subcommand's own parser sees everything after its name (and only that):
        # the default command's required flags do not apply to it.
        sub = commands.choices[args[0]]
        ns = sub.parse_args(args[1:])
        ns.command = args[0]
        return ns
    try:
        ns = parser.parse_args(args)
    except _UsageError as exc:
        misplaced = [a for a in args if a in commands.choices]
        if misplaced:
            raise _UsageError(
                f"{exc}; a command ('{misplaced[0]}') must come first, before its flags", exc.prog
            ) from None
        raise
    if ns.command is not None:
        raise _UsageError(
            f"flags before the '{ns.command}' command: put the command first "
            f"({PROG} {ns.command} --help shows its flags)"
        )
    return ns


def _options(ns: argparse.Namespace, prog: str = PROG) -> ReplayOptions:
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
    if missing:
        raise _UsageError(
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
        raise _UsageError(
            f"{' and '.join(stdin_flags)} all read standard input (-); only one input can",
            prog,
        )
    if ns.seq is not None and ns.seq < 0:
        raise _UsageError(f"--seq must be a seq number (0 or more), got {ns.seq}", prog)
    if ns.event is not None and ns.events:
        raise _UsageError(
            "--event and --events both name the triggering envelope: give one of them", prog
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
    )


def _bundle_parser(prog: str, *, headless: bool) -> _Parser:
    """Replaying an incident bundle: the file, and what may override what it recorded."""
    parser = _Parser(
        prog=prog,
        description=(
            "Replay an activation of an incident bundle (beam-agents-replay bundle wrote it): "
            "its snapshot, traces, envelopes, agent and HITL policy come from the file."
        ),
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="the incident bundle")
    parser.add_argument(
        "--seq", metavar="N", type=int, help="which of its activations (default: its last)"
    )
    parser.add_argument(
        "--agent", metavar="module:ATTR", help="replay with this agent instead of the recorded one"
    )
    parser.add_argument(
        "--registry", metavar="module:ATTR", help="and this registry instead of the recorded one"
    )
    parser.add_argument(
        "--what-if", action="store_true", help="allow a pending resume's what-if (see --help)"
    )
    if headless:
        parser.add_argument("--headless", action="store_true", help="print the report (default)")
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        _add_value_flags(parser)
    else:
        _add_export_dir_flag(parser)
    return parser


def _bundle_replay_options(ns: argparse.Namespace) -> ReplayOptions | ReplayResult:
    """The options replaying ``ns.bundle``, or the usage-error result refusing it."""
    from beam_agents.replay.bundle import bundle_options, load_bundle
    from beam_agents.replay.refusal import ReplayRefused

    try:
        bundle = load_bundle(ns.bundle)
        options = bundle_options(bundle, seq=ns.seq, agent=ns.agent, registry=ns.registry)
        return dataclasses.replace(options, what_if=ns.what_if)
    except ReplayRefused as refused:
        from beam_agents.replay.result import ReplayHeader

        return ReplayResult(
            verdict=refused.verdict,
            reason=refused.reason,
            header=ReplayHeader(
                version=__version__, agent_path=ns.agent or "", registry_path=ns.registry or ""
            ),
            error=refused.message,
        )


def _run_bundle(ns: argparse.Namespace) -> int:
    loaded = _bundle_replay_options(ns)
    if isinstance(loaded, ReplayResult):
        return _emit(loaded, as_json=ns.json, ns=ns)
    _cwd_importable()
    _isolate()
    from beam_agents.replay.engine import replay

    return _emit(replay(loaded), as_json=ns.json, ns=ns)  # replay() writes no bytecode


def _run_bundle_tui(ns: argparse.Namespace) -> int:
    loaded = _bundle_replay_options(ns)
    if isinstance(loaded, ReplayResult):
        return _emit(loaded, as_json=False)
    from beam_agents.replay.bundle import load_bundle

    return _open_tui(
        loaded, seqs=load_bundle(ns.bundle).seqs, export_dir=getattr(ns, "export_dir", None)
    )


def _replayable_seqs(options: ReplayOptions) -> tuple[int, ...]:
    """The traced activations of the snapshot's key it can be asked to replay (for ``[``/``]``).

    Only with ``--events``: switching needs each activation's envelope. Empty when the
    inputs cannot be listed (the replay itself then says why).
    """
    if not options.events:
        return ()
    from beam_agents.replay.listing import AFTER_SNAPSHOT, INCOMPLETE, list_activations
    from beam_agents.replay.refusal import ReplayRefused

    try:
        listing = list_activations(options.traces, snapshot=options.snapshot)
    except ReplayRefused:
        return ()
    return tuple(
        row.seq
        for row in listing.rows
        if row.outcome != "pending" and row.replay not in (AFTER_SNAPSHOT, INCOMPLETE)
    )


def _cwd_importable() -> None:
    # A console script's sys.path starts at its bin/ directory, not the current one;
    # operators run replay from their project and name its modules (myapp.agent:AGENT).
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


_PROCESS_LIFE = {"isolate": False}
"""Set by ``main()`` run as the console script (``argv`` None): isolate the whole process."""


def _isolate() -> None:
    """Before agent code is imported: refuse network, processes, native code and side
    effects for the rest of this process (threads, ``atexit``), as the console script.

    In-process callers of ``main([...])`` (tests, tools) keep the guard to the re-run.
    """
    if not _PROCESS_LIFE["isolate"]:
        return
    import atexit

    from beam_agents.replay.network_guard import isolate_process, late_attempts

    isolate_process()

    def report_late() -> None:
        late = late_attempts()
        if late:
            shown = "; ".join(escape(a.describe()) for a in late[:5])
            more = f" (and {len(late) - 5} more)" if len(late) > 5 else ""
            sys.stderr.write(
                f"{PROG}: after the re-run, agent code (a thread or an atexit hook) also tried, "
                f"and was refused: {shown}{more}\n"
            )

    atexit.register(report_late)


def _run_replay(ns: argparse.Namespace) -> int:
    options = _options(ns)
    _cwd_importable()
    _isolate()
    from beam_agents.replay.engine import replay

    # Replay reads; it writes nothing, not even bytecode caches of what it imports
    # (replay() turns them off while it imports and runs agent code).
    return _emit(replay(options), as_json=ns.json, ns=ns)


def _emit(result: ReplayResult, *, as_json: bool, ns: argparse.Namespace | None = None) -> int:
    """Print ``result`` (report or JSON on stdout, a usage error on stderr); its exit code.

    ``ns`` carries ``--redact`` and ``--full-values`` where the command has them.
    """
    if ns is not None and getattr(ns, "redact", False):
        from beam_agents.replay.redact import redact

        result = redact(result)
    full_values = ns is not None and bool(getattr(ns, "full_values", False))
    try:
        if as_json:
            from beam_agents.replay.json_report import write_json

            write_json(result, sys.stdout)  # streamed: never the whole document in memory
        if result.verdict is Verdict.USAGE_ERROR:
            from beam_agents.replay.report import render_error

            sys.stderr.write(render_error(result))
        elif not as_json:
            from beam_agents.replay.report import render_report

            sys.stdout.write(render_report(result, full_values=full_values))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): the verdict stands, and is the exit code.
        _silence_stdout()
    return result.exit_code


def _usage_error_json(message: str) -> None:
    """With --json, a refused command line still prints one document (verdict "error", exit 2)."""
    from beam_agents.replay.json_report import write_json
    from beam_agents.replay.result import ReplayHeader

    result = ReplayResult(
        verdict=Verdict.USAGE_ERROR,
        reason=f"usage error: {message}",
        header=ReplayHeader(version=__version__, agent_path="", registry_path=""),
        error=message,
    )
    try:
        write_json(result, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _run_tui(ns: argparse.Namespace) -> int:
    return _open_tui(_options(ns, f"{PROG} tui"), export_dir=getattr(ns, "export_dir", None))


def _has_terminal() -> bool:
    """Standard input and output are both a terminal (the TUI reads keys, draws a screen)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def _open_tui(
    options: ReplayOptions, *, seqs: Sequence[int] | None = None, export_dir: str | None = None
) -> int:
    """Open the TUI on ``options``; ``seqs`` for [ and ] (None: the traced ones, with --events)."""
    stdin_flags = [
        flag
        for flag, value in (
            ("--snapshot", options.snapshot),
            ("--event", options.event),
            *(("--traces", t) for t in options.traces),
            *(("--events", e) for e in options.events),
        )
        if isinstance(value, str) and value == "-"
    ]
    if stdin_flags:
        raise _UsageError(
            f"the TUI reads its keys from the terminal, so {stdin_flags[0]} cannot be - "
            "(standard input); save the input to a file, or drop 'tui' for the headless report",
            f"{PROG} tui",
        )
    if not _has_terminal():
        raise _UsageError(
            "the TUI needs a terminal (standard input and output are not both one); "
            "for scripts and pipes use the headless report: drop 'tui' (or add --headless, "
            "or --json)",
            f"{PROG} tui",
        )
    if seqs is None:
        seqs = _replayable_seqs(options)
    _cwd_importable()
    try:
        from replay_tui.app import run_tui
    except ImportError as exc:
        sys.stderr.write(
            f"{PROG}: error: the terminal UI is not available ({exc}); the headless report "
            "works without it (drop the 'tui' subcommand)\n"
        )
        return EXIT_USAGE
    _isolate()  # after Textual is imported, before the agent is
    from beam_agents.replay.inputs import no_bytecode

    with no_bytecode():  # as headless: replay writes nothing
        extra: dict[str, Any] = {}
        if seqs:
            extra["seqs"] = seqs
        if export_dir is not None:
            extra["export_dir"] = Path(export_dir)
        return int(run_tui(options, **extra))


def _refused(command: str, refused: Exception) -> int:
    from beam_agents.replay.escape import escape as safe_text
    from beam_agents.replay.refusal import ReplayRefused

    assert isinstance(refused, ReplayRefused)
    sys.stderr.write(f"{PROG} {command}: error: {safe_text(refused.message)}\n")
    return refused.verdict.exit_code


def _run_ls(ns: argparse.Namespace) -> int:
    import json

    from beam_agents.replay.listing import list_activations, listing_json, render_listing
    from beam_agents.replay.refusal import ReplayRefused

    try:
        listing = list_activations(ns.traces, snapshot=ns.snapshot, key=ns.key)
    except ReplayRefused as refused:
        return _refused("ls", refused)
    try:
        if ns.json:
            sys.stdout.write(json.dumps(listing_json(listing), indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(render_listing(listing))
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return EXIT_OK


def _write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (``bundle -o``, ``check --junit``).

    An existing ``path`` that is not a regular file (or a link) is refused: a FIFO
    would block forever, and renaming over a device (``/dev/null`` for root) or a
    directory would replace it. The bytes go to a fresh sibling (``O_EXCL``, never
    through someone else's file, its name within NAME_MAX) moved over ``path``, so a
    symbolic link at ``path`` is replaced, never written through.

    Raises:
        OSError: The file cannot be written (``ENOTSUP``-style errors name the cause).
    """
    import errno
    import stat
    from pathlib import Path

    from beam_agents.trace_stream import temporary_sibling

    if not path:
        raise OSError(errno.EINVAL, "the file name is empty")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise OSError(errno.EINVAL, f"it exists and is {kind}; name a new or regular file")
    tmp = temporary_sibling(Path(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _run_bundle_write(ns: argparse.Namespace) -> int:
    from beam_agents.replay.bundle import load_bundle, make_bundle
    from beam_agents.replay.refusal import ReplayRefused
    from beam_agents.replay.traced import seq_ranges

    if ns.seq is not None and ns.seq < 0:
        raise _UsageError(f"--seq must be a seq number (0 or more), got {ns.seq}", f"{PROG} bundle")
    _cwd_importable()  # --hitl names the operator's module
    try:
        data = make_bundle(
            snapshot=ns.snapshot,
            traces=ns.traces,
            events=ns.events,
            event=ns.event,
            agent=ns.agent,
            registry=ns.registry,
            seq=ns.seq,
            all_seqs=ns.all,
            hitl=ns.hitl,
        )
        bundle = load_bundle(data)  # what we wrote must be what every reader accepts
    except ReplayRefused as refused:
        return _refused("bundle", refused)
    # An existing FILE is replaced (docs/incidents.md: a bundle is a function of its inputs, so
    # re-running the command is the way to refresh it), and the summary says so.
    replaced = os.path.lexists(ns.output)
    try:
        _write_output(ns.output, data)
    except OSError as exc:
        raise _UsageError(
            f"cannot write {ns.output}: {exc.strerror or exc}", f"{PROG} bundle"
        ) from None
    message = bundle.message
    sys.stderr.write(
        f"{PROG} bundle: key {bundle.entity_key.hex()} seq {seq_ranges(bundle.seqs)}: "
        f"{len(message.trace_events)} trace events, {len(message.envelopes)} envelope(s), "
        f"snapshot at seq {_snapshot_seq(message.snapshot)} -> {escape(ns.output)} "
        f"({len(data)} bytes{', replaced the existing file' if replaced else ''})\n"
    )
    return EXIT_OK


def _run_check(ns: argparse.Namespace) -> int:
    import json

    from beam_agents.replay.bulk import check_bundles, check_json, render_check, render_junit

    prog = f"{PROG} check"
    if ns.jobs < 1:
        raise _UsageError(f"--jobs must be 1 or more, got {ns.jobs}", prog)
    for flag, value in (("--agent", ns.agent), ("--registry", ns.registry)):
        if value is not None and ":" not in value:
            raise _UsageError(f"{flag} {value!r} is not of the form module:ATTR", prog)
    _cwd_importable()  # before the workers start: they inherit the import path
    report = check_bundles(ns.paths, agent=ns.agent, registry=ns.registry, jobs=ns.jobs)
    if ns.junit is not None:
        try:
            _write_output(ns.junit, render_junit(report))
        except OSError as exc:
            sys.stderr.write(
                f"{prog}: error: cannot write --junit {escape(ns.junit)}: "
                f"{escape(str(exc.strerror or exc))}\n"
            )
            return EXIT_USAGE
    try:
        if ns.json:
            sys.stdout.write(json.dumps(check_json(report), indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(render_check(report))
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return report.exit_code


def _snapshot_seq(data: bytes) -> int:
    from beam_agents._protos import StateSnapshot

    return StateSnapshot.FromString(data).seq


def _run_convert_bq(ns: argparse.Namespace) -> int:
    from beam_agents.bigquery_rows import read_bigquery_rows, rows_to_trace_events
    from beam_agents.errors import FrameTooLargeError, TraceStreamError
    from beam_agents.replay.inputs import open_regular
    from beam_agents.replay.refusal import InputError
    from beam_agents.trace_stream import write_trace_stream

    source = "/dev/stdin" if ns.rows == "-" else ns.rows
    name = "<stdin>" if ns.rows == "-" else ns.rows
    if ns.rows != "-":
        try:  # a regular file within the ROWS cap: not /dev/zero, not a FIFO, not a directory
            open_regular(ns.rows, "ROWS").close()
        except InputError as exc:
            raise _UsageError(f"{exc.message}", _CONVERT_BQ) from None
    try:
        events = rows_to_trace_events(read_bigquery_rows(source), source=name)
    except TraceStreamError as exc:
        raise _UsageError(f"{exc}", _CONVERT_BQ) from None
    if ns.output == "-":
        if sys.stdout.isatty():
            raise _UsageError(
                "it writes a binary trace stream: pass -o FILE or redirect standard output",
                _CONVERT_BQ,
            )
        try:
            sys.stdout.flush()
            write_trace_stream(sys.stdout.buffer, events)
            sys.stdout.buffer.flush()
        except FrameTooLargeError as exc:
            raise _UsageError(f"{exc}", _CONVERT_BQ) from None
        except BrokenPipeError:
            raise
        except OSError as exc:  # e.g. a full disk (ENOSPC) behind standard output
            raise _UsageError(
                f"cannot write standard output: {exc.strerror or exc}", _CONVERT_BQ
            ) from None
    else:
        try:
            write_trace_stream(ns.output, events)
        except FrameTooLargeError as exc:
            raise _UsageError(f"{exc} (nothing was written)", _CONVERT_BQ) from None
        except OSError as exc:
            raise _UsageError(
                f"cannot write {ns.output}: {exc.strerror or exc}", _CONVERT_BQ
            ) from None
    keys = len({e.entity_key for e in events})
    out = "standard output" if ns.output == "-" else ns.output
    sys.stderr.write(
        f"{PROG} convert-bq: {len(events)} trace events of {keys} key(s) -> {escape(out)}\n"
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it).

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` if None.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    _PROCESS_LIFE["isolate"] = argv is None
    try:
        ns = _parse(args)
        run: Callable[[argparse.Namespace], int] = ns.run
        return run(ns)
    except _Exit as exc:
        return exc.code
    except _UsageError as exc:
        # Prefixed with the command whose --help it points to (`beam-agents-replay ls: error:`),
        # like a subcommand's own refusals (_refused), argparse's errors included.
        sys.stderr.write(
            f"{exc.prog}: error: {escape(str(exc))}. Run '{exc.prog} --help' for usage.\n"
        )
        if "--json" in args and args[:1] != ["convert-bq"]:
            _usage_error_json(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:  # outside _emit (help, convert-bq): no verdict to keep
        _silence_stdout()
        return EXIT_USAGE
    except Exception as exc:  # a bug of ours: a short report, exit 2 (never 0, no traceback)
        from beam_agents.replay.refusal import internal_error

        sys.stderr.write(f"{PROG}: {escape(internal_error(exc)[1])}\n")
        return EXIT_USAGE
