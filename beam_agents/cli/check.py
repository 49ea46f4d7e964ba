"""``check``: replay many incident bundles in worker processes; a table grouped by verdict."""

from __future__ import annotations

import argparse
import os
import sys

from beam_agents.cli.docs import doc_page
from beam_agents.cli.output import check_output_path, print_out, write_out, write_output
from beam_agents.cli.parsing import (
    CLI_NAMING,
    PROG,
    ExitCodesFormatter,
    Parser,
    UsageError,
    add_time_limit_flag,
)
from beam_agents.cli.process import cwd_importable
from beam_agents.cli.progress import Progress
from beam_agents.cli.replay import keep_report
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EXIT_USAGE

_CHECK_EXIT_CODES_HELP = f"""\
exit codes: the worst verdict of every row, in this order
  2  error: a file that is not a bundle or cannot be read, a bundle whose replay was
     refused, a worker that ended without a verdict, or a usage error (nothing replayed)
  1  diverged: an activation's re-run differs from its trace
  3  irreproducible: a cache miss, a digest-only entry, a migration gap, a time limit
  0  every activation reproduced (or was a what-if)

The table, --json and --junit: {doc_page("incidents.md")}"""


def register(commands: argparse._SubParsersAction[Parser]) -> None:
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
        epilog=_CHECK_EXIT_CODES_HELP,
        formatter_class=ExitCodesFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("paths", metavar="PATH", nargs="+", help="bundle files or directories")
    parser.add_argument(
        "--agent", metavar="module:ATTR", help="replay with this agent, not each bundle's own"
    )
    parser.add_argument(
        "--registry", metavar="module:ATTR", help="replay with these tools, not each bundle's own"
    )
    parser.add_argument(
        "--import-recorded",
        action="store_true",
        help="import (and so run) the agent and registry each bundle records, where "
        "--agent/--registry do not replace them; without it such a bundle is an error row "
        "naming that code, and nothing a bundle names is imported",
    )
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes at once, one fresh process per activation, each isolated "
        "before it imports agent code (default: the number of CPUs); a worker agent code "
        "ends or hangs costs one row, never the check",
    )
    add_time_limit_flag(parser)
    for flag in FORK_FLAGS:  # known, so that they are refused with a reason (_run_check)
        parser.add_argument(flag, dest=f"refused_{flag[2:].replace('-', '_')}", help=argparse.SUPPRESS)
    parser.set_defaults(run=_run_check)


FORK_FLAGS = ("--fork", "--set", "--fork-provider")


def _run_check(ns: argparse.Namespace) -> int:
    from beam_agents.replay.incidents.check import check_bundles
    from beam_agents.replay.incidents.check_render import (
        render_check,
        render_junit,
        write_check_json,
    )

    prog = f"{PROG} check"
    forked = [f for f in FORK_FLAGS if getattr(ns, f"refused_{f[2:].replace('-', '_')}") is not None]
    if forked:
        raise UsageError(
            f"check does not fork ({', '.join(forked)}): it judges every activation as a "
            "reproduction, and a fork is one activation's counterfactual; fork one bundle's "
            f"activation with {PROG} BUNDLE --seq N --fork EVENT --set VALUE",
            prog,
        )
    if ns.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, got {ns.jobs}", prog)
    if ns.junit == "-":  # it wrote a file named '-'; refused before anything is replayed
        raise UsageError(
            "--junit - would mix JUnit XML into check's report on standard output: "
            "name a file (--junit junit.xml)",
            prog,
        )
    if ns.junit is not None:
        try:  # before the replays: a long check would end refusing it
            check_output_path(ns.junit)
        except OSError as exc:
            raise UsageError(
                f"cannot write --junit {escape(ns.junit)}: {escape(str(exc.strerror or exc))}",
                prog,
            ) from None
    for flag, value in (("--agent", ns.agent), ("--registry", ns.registry)):
        if value is not None and ":" not in value:
            raise UsageError(f"{flag} {value!r} is not of the form module:ATTR", prog)
    cwd_importable()  # before the workers start: they inherit the import path
    # And their standard output is /dev/null: what agent code prints in a worker never
    # reaches this command's table or --json (cli.report_stream).
    keep_report()
    # Each activation replays in a fresh worker process of its own, even with one job: its
    # verdict never depends on what else ran, agent code never runs in this process, and a
    # worker it ends, crashes or hangs is one row (docs/incidents.md).
    with Progress("check", "activation(s) replayed") as progress:
        report = check_bundles(
            ns.paths,
            agent=ns.agent,
            registry=ns.registry,
            import_recorded=ns.import_recorded,
            jobs=ns.jobs,
            time_limit=ns.time_limit,
            isolate=True,
            naming=CLI_NAMING,
            progress=progress,
        )
    if ns.junit is not None:
        try:
            write_output(ns.junit, render_junit(report))
        except OSError as exc:
            sys.stderr.write(
                f"{prog}: error: cannot write --junit {escape(ns.junit)}: "
                f"{escape(str(exc.strerror or exc))}\n"
            )
            return EXIT_USAGE
    if ns.json:
        write_out(lambda out: write_check_json(report, out))
    else:
        print_out(render_check(report))
    return report.exit_code
