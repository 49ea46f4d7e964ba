"""``convert-bq``: rows of the BigQuery trace table to a trace stream for ``--traces``."""

from __future__ import annotations

import argparse
import sys

from beam_agents.cli.parsing import CLI_NAMING, PROG, ExitCodesFormatter, Parser, UsageError
from beam_agents.cli.process import isolate
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EXIT_OK

_CONVERT_BQ = f"{PROG} convert-bq"

_CONVERT_BQ_EXIT_CODES_HELP = """\
exit codes:
  0  the trace stream was written
  2  usage error, rows that are not trace-table rows, or OUT cannot be written"""


def register(commands: argparse._SubParsersAction[Parser]) -> None:
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
        formatter_class=ExitCodesFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("rows", metavar="ROWS", help="the rows file, or - for standard input")
    parser.add_argument(
        "-o", "--output", metavar="OUT", default="-", help="the trace stream to write (default: -)"
    )
    parser.set_defaults(run=_run_convert_bq)


def _run_convert_bq(ns: argparse.Namespace) -> int:
    from beam_agents.bigquery_rows import read_bigquery_rows, rows_to_trace_events
    from beam_agents.errors import FrameTooLargeError, TraceStreamError
    from beam_agents.replay.inputs.sources import open_regular
    from beam_agents.replay.isolation.guard import own_file_writes
    from beam_agents.replay.naming import Input
    from beam_agents.replay.refusal import InputError
    from beam_agents.trace_stream import write_trace_stream

    isolate()  # it runs no agent code; isolated all the same (docs/replay.md, the re-run)
    source = "/dev/stdin" if ns.rows == "-" else ns.rows
    name = "<stdin>" if ns.rows == "-" else ns.rows
    if ns.rows != "-":
        try:  # a regular file within the ROWS cap: not /dev/zero, not a FIFO, not a directory
            open_regular(ns.rows, Input.ROWS, CLI_NAMING).close()
        except InputError as exc:
            raise UsageError(f"{exc.message}", _CONVERT_BQ) from None
    try:
        events = rows_to_trace_events(read_bigquery_rows(source), source=name)
    except TraceStreamError as exc:
        raise UsageError(f"{exc}", _CONVERT_BQ) from None
    if ns.output == "-":
        if sys.stdout.isatty():
            raise UsageError(
                "it writes a binary trace stream: pass -o FILE or redirect standard output",
                _CONVERT_BQ,
            )
        try:
            sys.stdout.flush()
            write_trace_stream(sys.stdout.buffer, events)
            sys.stdout.buffer.flush()
        except FrameTooLargeError as exc:
            raise UsageError(f"{exc}", _CONVERT_BQ) from None
        except BrokenPipeError:
            raise
        except OSError as exc:  # e.g. a full disk (ENOSPC) behind standard output
            raise UsageError(
                f"cannot write standard output: {exc.strerror or exc}", _CONVERT_BQ
            ) from None
    else:
        try:
            with own_file_writes():  # the operator's file (isolated: only replay's writes)
                write_trace_stream(ns.output, events)
        except FrameTooLargeError as exc:
            raise UsageError(f"{exc} (nothing was written)", _CONVERT_BQ) from None
        except OSError as exc:
            raise UsageError(
                f"cannot write {ns.output}: {exc.strerror or exc}", _CONVERT_BQ
            ) from None
    keys = len({e.entity_key for e in events})
    out = "standard output" if ns.output == "-" else ns.output
    sys.stderr.write(
        f"{PROG} convert-bq: {len(events)} trace events of {keys} key(s) -> {escape(out)}\n"
    )
    return EXIT_OK
