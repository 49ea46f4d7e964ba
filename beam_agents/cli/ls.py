"""``ls``: the traced activations of a key (or of every key), and which a snapshot can replay."""

from __future__ import annotations

import argparse

from beam_agents.cli.docs import doc_page
from beam_agents.cli.output import report_refusal, write_out
from beam_agents.cli.parsing import CLI_NAMING, ExitCodesFormatter, Parser
from beam_agents.cli.process import isolate
from beam_agents.cli.progress import Progress
from beam_agents.replay.result import EXIT_OK

LS_JSON_SCHEMA = "beam-agents-replay-ls/1"
"""``listing.LS_JSON_SCHEMA``, spelled here so that every command's help does not import the
listing (tests/replay/test_cli.py checks that the two agree)."""

_LS_EXIT_CODES_HELP = """\
exit codes:
  0  listed (a line that cannot replay is a listing, not an error)
  2  usage error, unreadable traces or snapshot, or a --key no traced activation has
  3  the snapshot has a migration gap (nothing it holds can be replayed)"""


def register(commands: argparse._SubParsersAction[Parser]) -> None:
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
            "activation's billed response), call-failed (the traced model call itself failed), "
            "continuation-gone, after-snapshot, "
            "incomplete-trace, or the key's pending-resume (a what-if). See "
            f"{doc_page('incidents.md')}."
        ),
        epilog=_LS_EXIT_CODES_HELP,
        formatter_class=ExitCodesFormatter,
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
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON document (schema {LS_JSON_SCHEMA}: one row per line)",
    )
    parser.set_defaults(run=_run_ls)


def _run_ls(ns: argparse.Namespace) -> int:
    from beam_agents.replay.incidents.listing import (
        list_activations,
        listing_lines,
        write_listing_json,
    )
    from beam_agents.replay.refusal import ReplayRefused

    isolate()  # it runs no agent code; isolated all the same (docs/replay.md, the re-run)
    with Progress("ls", "trace events read") as progress:
        try:
            listing = list_activations(
                ns.traces, snapshot=ns.snapshot, key=ns.key, naming=CLI_NAMING, progress=progress
            )
        except ReplayRefused as refused:
            progress.clear()
            return report_refusal("ls", refused)
    if ns.json:
        write_out(lambda out: write_listing_json(listing, out))
    else:
        write_out(lambda out: out.writelines(f"{line}\n" for line in listing_lines(listing)))
    return EXIT_OK
