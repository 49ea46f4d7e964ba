"""The default command: replay one activation (from flags, or from an incident bundle) and
print the report, or with ``--json`` one JSON document."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING

from beam_agents._version import __version__
from beam_agents.cli.output import silence_stdout
from beam_agents.cli.parsing import (
    CLI_NAMING,
    EXIT_CODES_HELP,
    IMPORT_RECORDED_HELP,
    PROG,
    TUI_EXIT_CODES_HELP,
    Parser,
    add_export_dir_flag,
    add_fork_flags,
    add_reference_flags,
    add_report_only_flags,
    add_time_limit_flag,
    add_value_flags,
    fork_options,
    replay_options,
)
from beam_agents.cli.process import PROCESS_LIFE, cwd_importable, isolate
from beam_agents.cli.report_stream import report_stream, restore_stderr
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import EXIT_USAGE, ReplayResult, Verdict

if TYPE_CHECKING:
    from beam_agents.cli.reference import ReferenceDocument


def run_replay(ns: argparse.Namespace) -> int:
    options = replay_options(ns)
    from beam_agents.cli.reference import reference_spec, run_reference

    spec = reference_spec(ns, options)
    ran = run_reference(spec) if spec is not None else None  # first: before isolate()
    # As the console script the process ends after this replay: what agent code runs at
    # interpreter exit runs before the judgement (beam_agents.replay.isolation.process_exit).
    # (The reference run above is given the options as they were.)
    options = dataclasses.replace(options, process_ends=PROCESS_LIFE["isolate"])
    cwd_importable()
    keep_report()
    start_last_resort(options.time_limit)
    isolate()
    from beam_agents.replay.engine import replay

    # Replay reads; it writes nothing, not even bytecode caches of what it imports
    # (replay() turns them off while it imports and runs agent code).
    return emit(with_reference(replay(options), ran), as_json=ns.json, ns=ns)


def with_reference(result: ReplayResult, ran: ReferenceDocument | None) -> ReplayResult:
    """``result`` with the reference run's proved values, if one ran (``cli.reference``)."""
    if ran is None or result.verdict is Verdict.USAGE_ERROR:
        return result
    from beam_agents.cli.reference import attach_reference

    return attach_reference(result, ran)


def bundle_parser(prog: str, *, headless: bool) -> Parser:
    """Replaying an incident bundle: the file, and what may override what it recorded."""
    parser = Parser(
        prog=prog,
        description=(
            "Replay an activation of an incident bundle (beam-agents-replay bundle wrote it): "
            "its snapshot, traces, envelopes, agent and HITL policy come from the file."
        ),
        epilog=EXIT_CODES_HELP if headless else TUI_EXIT_CODES_HELP,
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
    parser.add_argument("--import-recorded", action="store_true", help=IMPORT_RECORDED_HELP)
    parser.add_argument(
        "--what-if", action="store_true", help="allow a pending resume's what-if (see --help)"
    )
    add_time_limit_flag(parser)
    add_reference_flags(parser, bundle=True)
    add_fork_flags(parser)
    if headless:
        parser.add_argument("--headless", action="store_true", help="print the report (default)")
        parser.add_argument("--json", action="store_true", help="print one JSON document")
        add_value_flags(parser)
    else:
        add_export_dir_flag(parser)
        add_report_only_flags(parser)
    return parser


def bundle_replay_options(
    ns: argparse.Namespace,
) -> tuple[ReplayOptions, tuple[int, ...]] | ReplayResult:
    """The options replaying ``ns.bundle`` and the seqs the bundle holds (loaded once), or
    the usage-error result refusing it."""
    from beam_agents.replay.incidents.bundle import bundle_options, load_bundle
    from beam_agents.replay.refusal import ReplayRefused

    fork = fork_options(ns)
    try:
        bundle = load_bundle(ns.bundle, naming=CLI_NAMING)
        options = bundle_options(
            bundle,
            seq=ns.seq,
            agent=ns.agent,
            registry=ns.registry,
            import_recorded=ns.import_recorded,
            naming=CLI_NAMING,
        )
        options = dataclasses.replace(
            options, what_if=ns.what_if, time_limit=ns.time_limit, fork=fork
        )
        return options, tuple(bundle.seqs)
    except ReplayRefused as refused:
        from beam_agents.replay.engine import refused_result
        from beam_agents.replay.result import ReplayHeader

        header = ReplayHeader(
            version=__version__, agent_path=ns.agent or "", registry_path=ns.registry or ""
        )
        return refused_result(refused, header)


def run_bundle(ns: argparse.Namespace) -> int:
    loaded = bundle_replay_options(ns)
    if isinstance(loaded, ReplayResult):
        return emit(loaded, as_json=ns.json, ns=ns)
    options, _seqs = loaded
    from beam_agents.cli.reference import bundle_reference_spec, run_reference

    spec = bundle_reference_spec(ns, options)
    ran = run_reference(spec) if spec is not None else None  # first: before isolate()
    options = dataclasses.replace(options, process_ends=PROCESS_LIFE["isolate"])
    cwd_importable()
    keep_report()
    start_last_resort(options.time_limit)
    isolate()
    from beam_agents.replay.engine import replay

    # replay() writes no bytecode
    return emit(with_reference(replay(options), ran), as_json=ns.json, ns=ns)


def keep_report() -> None:
    """As the console script, before any agent code runs: the report goes to a standard
    output of its own, which agent code can neither write to nor replace; what agent code
    prints goes to /dev/null (``cli.report_stream``)."""
    if PROCESS_LIFE["isolate"]:
        from beam_agents.cli.report_stream import keep_report_stream

        keep_report_stream()


def start_last_resort(time_limit: float | None, *, terminal: bool = False) -> None:
    """As the console script, before any agent code is imported: the watchdog that ends the
    process if agent code holds the interpreter lock past twice the time limit
    (``beam_agents.replay.isolation.watchdog``; docs/replay.md, "Time limit")."""
    if PROCESS_LIFE["isolate"] and time_limit:
        from beam_agents.replay.isolation.watchdog import start

        start(prog=PROG, terminal=terminal)


def emit(result: ReplayResult, *, as_json: bool, ns: argparse.Namespace | None = None) -> int:
    """Print ``result`` (report or JSON on stdout, a usage error on stderr); its exit code.

    ``ns`` carries ``--redact`` and ``--full-values`` where the command has them.
    """
    if ns is not None and getattr(ns, "redact", False):
        from beam_agents.replay.reporting.redact import redact

        PROCESS_LIFE["redact"] = True  # and what is reported when the process ends
        result = redact(result)
    full_values = ns is not None and bool(getattr(ns, "full_values", False))
    restore_stderr()  # agent code may have replaced sys.stderr (sys.stdout is not ours)
    out = report_stream()
    try:
        if as_json:
            from beam_agents.replay.reporting.json_doc import write_json

            write_json(result, out)  # streamed: never the whole document in memory
        if result.verdict is Verdict.USAGE_ERROR:
            from beam_agents.replay.reporting.text import render_error

            sys.stderr.write(render_error(result))
        elif not as_json:
            from beam_agents.replay.reporting.text import render_report

            out.write(render_report(result, full_values=full_values))
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): the verdict stands, and is the exit code.
        silence_stdout()
    except OSError as exc:
        # Standard output cannot take the report: a full disk behind it, or agent code that
        # closed it during the re-run (no audit event covers os.close). The verdict was
        # decided but not delivered: exit 2 says so, never a verdict's code without its report.
        silence_stdout()
        return _report_not_written(result, exc)
    return result.exit_code


def _report_not_written(result: ReplayResult, exc: OSError) -> int:
    import errno

    cause = exc.strerror or str(exc)
    if exc.errno is not None and exc.errno in errno.errorcode:
        cause += f" ({errno.errorcode[exc.errno]})"
    message = (
        f"{PROG}: error: the report could not be written to standard output: {cause}. "
        f"The re-run's verdict was {result.verdict.value} (exit {result.exit_code}), but a "
        "verdict without its report is not one this command delivers: exit 2. Check what "
        "standard output goes to (a full disk, a closed descriptor).\n"
    )
    try:
        sys.stderr.write(message)
        sys.stderr.flush()
    except OSError:
        pass  # standard error is gone too: the exit code is all that is left
    return EXIT_USAGE


def usage_error_json(message: str) -> None:
    """With --json, a refused command line still prints one document (verdict "error", exit 2)."""
    from beam_agents.replay.reporting.json_doc import write_json
    from beam_agents.replay.result import ReplayHeader

    result = ReplayResult(
        verdict=Verdict.USAGE_ERROR,
        reason=f"usage error: {message}",
        header=ReplayHeader(version=__version__, agent_path="", registry_path=""),
        error=message,
    )
    try:
        out = report_stream()
        write_json(result, out)
        out.flush()
    except BrokenPipeError:
        silence_stdout()
