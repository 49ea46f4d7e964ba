"""``beam-agents-replay``: replay one activation headless (default), as JSON, or in the TUI.

    beam-agents-replay --snapshot FILE --traces FILE|DIR [--traces ...] [--event FILE]
                       --agent module:ATTR --registry module:ATTR [--seq N]
                       [--hitl module:ATTR] [--headless] [--json]
    beam-agents-replay tui <the same flags but --headless/--json>
    beam-agents-replay convert-bq ROWS [-o OUT]
    beam-agents-replay --version | --help

Exit codes are the verdict's (0 reproduced or what-if, 1 diverged, 2 usage or
configuration error, 3 irreproducible). ``main`` returns the code instead of
exiting, so tests can call it in-process. Nothing heavy is imported on the way
to a headless verdict: no Beam, no Google or Kafka client, no Textual, and
DeepDiff only when there is a divergence to render.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from beam_agents._version import __version__
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayResult, Verdict

__all__ = ["PROG", "main"]

PROG = "beam-agents-replay"

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


class _UsageError(Exception):
    """A command line argparse (or our own checks) refuses."""


class _Exit(Exception):
    """argparse asked to exit (``--help``, ``--version``) with this code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so ``main`` returns a code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def _replay_parser(prog: str, *, headless: bool) -> _Parser:
    parser = _Parser(
        prog=prog,
        description=(
            "Re-run one traced activation offline, from a StateSnapshot, its trace stream and "
            "its triggering envelope, against a provider that serves nothing; then diff the "
            "re-run against the trace."
            if headless
            else "Open the replay of one activation in the terminal UI."
        ),
        epilog=_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--snapshot", metavar="FILE", help="one serialized StateSnapshot (the sink's message value)"
    )
    parser.add_argument(
        "--traces",
        metavar="FILE|DIR",
        action="append",
        default=[],
        help="a trace stream, or a directory of *.pb trace streams; may be repeated",
    )
    parser.add_argument(
        "--event",
        metavar="FILE",
        help="the serialized AgentEnvelope that triggered the activation "
        "(leave out for a HITL timeout)",
    )
    parser.add_argument("--agent", metavar="module:ATTR", help="the Agent the pipeline ran")
    parser.add_argument("--registry", metavar="module:ATTR", help="its ToolRegistry")
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
    if headless:
        parser.add_argument(
            "--headless", action="store_true", help="print the report (the default; for scripts)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON document instead of the report"
        )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def _options(ns: argparse.Namespace) -> ReplayOptions:
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
            "--registry (and --event, unless the activation was a HITL timeout)"
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
            f"{' and '.join(stdin_flags)} all read standard input (-); only one input can"
        )
    if ns.seq is not None and ns.seq < 0:
        raise _UsageError(f"--seq must be a seq number (0 or more), got {ns.seq}")
    return ReplayOptions(
        snapshot=ns.snapshot,
        traces=tuple(ns.traces),
        event=ns.event,
        agent=ns.agent,
        registry=ns.registry,
        seq=ns.seq,
        hitl=ns.hitl,
    )


def _cwd_importable() -> None:
    # A console script's sys.path starts at its bin/ directory, not the current one;
    # operators run replay from their project and name its modules (myapp.agent:AGENT).
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def _headless(args: Sequence[str]) -> int:
    ns = _replay_parser(PROG, headless=True).parse_args(args)
    options = _options(ns)
    _cwd_importable()
    from beam_agents.replay.engine import replay

    # Replay reads; it writes nothing, not even bytecode caches of what it imports.
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        result = replay(options)
        return _emit(result, as_json=ns.json)
    finally:
        sys.dont_write_bytecode = saved


def _emit(result: ReplayResult, *, as_json: bool) -> int:
    """Print ``result`` (report or JSON on stdout, a usage error on stderr); its exit code."""
    try:
        if as_json:
            from beam_agents.replay.json_report import render_json

            sys.stdout.write(render_json(result))
        if result.verdict is Verdict.USAGE_ERROR:
            from beam_agents.replay.report import render_error

            sys.stderr.write(render_error(result))
        elif not as_json:
            from beam_agents.replay.report import render_report

            sys.stdout.write(render_report(result))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): the verdict stands, and is the exit code.
        _silence_stdout()
    return result.exit_code


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _tui(args: Sequence[str]) -> int:
    ns = _replay_parser(f"{PROG} tui", headless=False).parse_args(args)
    options = _options(ns)
    _cwd_importable()
    try:
        from replay_tui.app import run_tui
    except ImportError as exc:
        sys.stderr.write(
            f"{PROG}: error: the terminal UI is not available ({exc}); the headless report "
            "works without it (drop the 'tui' subcommand)\n"
        )
        return 2
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # as headless: replay writes nothing
    try:
        return int(run_tui(options))
    finally:
        sys.dont_write_bytecode = saved


def _convert_bq(args: Sequence[str]) -> int:
    parser = _Parser(
        prog=f"{PROG} convert-bq",
        description=(
            "Turn rows of the BigQuery trace table (a JSON array or newline-delimited JSON, as "
            "`bq query --format=json|prettyjson` or the client library save them) into a trace "
            "stream for --traces. Rows are sorted by (entity_key, seq, index); exact duplicates "
            "are kept once."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("rows", metavar="ROWS", help="the rows file, or - for standard input")
    parser.add_argument(
        "-o", "--output", metavar="OUT", default="-", help="the trace stream to write (default: -)"
    )
    ns = parser.parse_args(args)
    from beam_agents.bigquery_rows import read_bigquery_rows, rows_to_trace_events
    from beam_agents.errors import TraceStreamError
    from beam_agents.trace_stream import write_trace_stream

    source = "/dev/stdin" if ns.rows == "-" else ns.rows
    name = "<stdin>" if ns.rows == "-" else ns.rows
    try:
        events = rows_to_trace_events(read_bigquery_rows(source), source=name)
    except TraceStreamError as exc:
        raise _UsageError(f"convert-bq: {exc}") from None
    if ns.output == "-":
        if sys.stdout.isatty():
            raise _UsageError(
                "convert-bq writes a binary trace stream: pass -o FILE or redirect standard output"
            )
        sys.stdout.flush()
        write_trace_stream(sys.stdout.buffer, events)
        sys.stdout.buffer.flush()
    else:
        try:
            write_trace_stream(ns.output, events)
        except OSError as exc:
            raise _UsageError(
                f"convert-bq: cannot write {ns.output}: {exc.strerror or exc}"
            ) from None
    keys = len({e.entity_key for e in events})
    out = "standard output" if ns.output == "-" else ns.output
    sys.stderr.write(f"{PROG} convert-bq: {len(events)} trace events of {keys} key(s) -> {out}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it).

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` if None.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["convert-bq"]:
            return _convert_bq(args[1:])
        if args[:1] == ["tui"]:
            return _tui(args[1:])
        return _headless(args)
    except _Exit as exc:
        return exc.code
    except _UsageError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}. Run '{PROG} --help' for usage.\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:  # outside _emit (help, convert-bq): no verdict to keep
        _silence_stdout()
        return 2
    except Exception as exc:  # a bug of ours: a short report, exit 2 (never 0, no traceback)
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        sys.stderr.write(
            f"{PROG}: internal error: {type(exc).__name__}: {exc}{where}. This is a bug in "
            f"beam-agents {__version__}, not a verdict; please report it with the command line.\n"
        )
        return 2
