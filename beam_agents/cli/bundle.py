"""``bundle``: write one incident bundle (snapshot, trace slice, envelopes, agent) to a file."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from beam_agents.cli.docs import doc_page
from beam_agents.cli.output import report_refusal, write_output
from beam_agents.cli.parsing import CLI_NAMING, PROG, ExitCodesFormatter, Parser, UsageError
from beam_agents.cli.process import cwd_importable, isolate
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EXIT_OK

if TYPE_CHECKING:
    from beam_agents.replay.incidents.bundle import Bundle

_BUNDLE_EXIT_CODES_HELP = """\
exit codes:
  0  the bundle was written (-o FILE)
  2  usage error, inputs that do not belong together, an envelope not in --events,
     or FILE cannot be written
  3  the snapshot has a migration gap (a bundle of it could not replay)"""


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    parser = commands.add_parser(
        "bundle",
        help="write an incident bundle: snapshot, trace slice, envelopes, agent, in one file",
        description=(
            f"Write one self-describing incident bundle ({doc_page('incidents.md')}): the "
            "snapshot, the "
            "trace events of the activations it replays (the highest traced one, --seq N, or "
            "--all up to the snapshot's seq), the envelopes that triggered them (picked from "
            "--events by traced id and sha256), the agent, registry and HITL policy, and the "
            "package version. The same inputs give the same bytes. Replay it with "
            "beam-agents-replay FILE, tui FILE, or check FILE."
        ),
        epilog=_BUNDLE_EXIT_CODES_HELP,
        formatter_class=ExitCodesFormatter,
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


def _run_bundle_write(ns: argparse.Namespace) -> int:
    from beam_agents.replay.incidents.bundle import load_bundle, make_bundle
    from beam_agents.replay.inputs.agent_code import no_bytecode
    from beam_agents.replay.inputs.traces import seq_ranges
    from beam_agents.replay.refusal import ReplayRefused

    if ns.seq is not None and ns.seq < 0:
        raise UsageError(f"--seq must be a seq number (0 or more), got {ns.seq}", f"{PROG} bundle")
    if ns.output == "-":  # it wrote a file named '-'; refused before anything is read
        raise UsageError(
            "-o - is not standard output: a bundle is written to a file, whole or not at "
            "all; name a file (-o incident.bundle)",
            f"{PROG} bundle",
        )
    cwd_importable()  # --hitl names the operator's module
    isolate()  # before --hitl is imported
    try:
        with no_bytecode():  # importing --hitl writes no bytecode cache
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
                naming=CLI_NAMING,
            )
        bundle = load_bundle(
            data, naming=CLI_NAMING
        )  # what we wrote must be what every reader accepts
    except ReplayRefused as refused:
        return report_refusal("bundle", refused)
    # An existing FILE is replaced (docs/incidents.md: a bundle is a function of its inputs, so
    # re-running the command is the way to refresh it), and the summary says so.
    replaced = os.path.lexists(ns.output)
    try:
        write_output(ns.output, data)
    except OSError as exc:
        raise UsageError(
            f"cannot write {ns.output}: {exc.strerror or exc}", f"{PROG} bundle"
        ) from None
    message = bundle.message
    sys.stderr.write(
        f"{PROG} bundle: key {bundle.entity_key.hex()} seq {seq_ranges(bundle.seqs)}: "
        f"{len(message.trace_events)} trace events, {len(message.envelopes)} envelope(s), "
        f"snapshot at seq {_snapshot_seq(bundle)} -> {escape(ns.output)} "
        f"({len(data)} bytes{', replaced the existing file' if replaced else ''})\n"
    )
    return EXIT_OK


def _snapshot_seq(bundle: Bundle) -> int:
    if bundle.loaded_snapshot is not None:  # load_bundle parsed it: not again
        return bundle.loaded_snapshot[0].seq
    from beam_agents._protos import StateSnapshot

    return StateSnapshot.FromString(bundle.message.snapshot).seq
