"""``doctor``: sample activations through the pipeline's step, replayed under perturbations
that must not matter; each source of irreproducibility named at its line (docs/doctor.md)."""

from __future__ import annotations

import argparse
import sys

from beam_agents.cli.docs import doc_page
from beam_agents.cli.output import check_output_path, print_out, write_output
from beam_agents.cli.parsing import PROG, Parser, UsageError, add_time_limit_flag
from beam_agents.cli.process import cwd_importable
from beam_agents.replay.reporting.escape import escape

EXIT_USAGE = 2


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    parser = commands.add_parser(
        "doctor",
        help="find what makes an agent irreproducible before an incident needs it",
        description=(
            "Run sample activations through the pipeline's own per-key step, watching agent "
            "code, then replay each as beam-agents-replay would: in another process, under "
            "other hash seeds, a shifted wall clock, another directory and environment, the "
            "network closed. Each finding names its cause, file and line, the evidence, the "
            "verdict an operator would get, and the remedy. Exit 0: clean; 1: findings; "
            f"2: usage error. When to run it, the causes, the script format: "
            f"{doc_page('doctor.md')}"
        ),
        allow_abbrev=False,
    )
    parser.add_argument("--agent", metavar="module:ATTR", required=True, help="the Agent")
    parser.add_argument("--registry", metavar="module:ATTR", required=True, help="its tools")
    parser.add_argument("--events", metavar="FILE|DIR", action="append", default=[],
                        help="a dump of the events/results/approvals topics (repeatable)")
    parser.add_argument("--bundle", metavar="FILE|DIR", action="append", default=[],
                        help="incident bundles whose envelopes are the samples (repeatable)")
    parser.add_argument("--script", metavar="FILE", help="a JSON script of envelopes")
    parser.add_argument("--provider", metavar="module:ATTR",
                        help="the model the samples run on: a provider or a factory "
                        "(default: a stand-in answering with a line naming the request)")
    parser.add_argument("--hitl", metavar="module:ATTR", help="the pipeline's HitlPolicy")
    parser.add_argument("--jobs", metavar="N", type=int, default=None,
                        help="replays at once (default: the number of CPUs)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    add_time_limit_flag(parser)
    parser.set_defaults(run=_run_doctor)


def _run_doctor(ns: argparse.Namespace) -> int:
    from beam_agents.doctor.refusal import CLI, DoctorUsageError
    from beam_agents.doctor.run import diagnose

    prog = f"{PROG} doctor"
    if ns.junit is not None:
        if ns.junit == "-":
            raise UsageError("--junit - would mix JUnit XML into the report: name a file", prog)
        try:
            check_output_path(ns.junit)
        except OSError as exc:
            raise UsageError(f"cannot write --junit {escape(ns.junit)}: {exc.strerror or exc}", prog) from None
    cwd_importable()
    try:
        report = diagnose(
            agent=ns.agent,
            registry=ns.registry,
            events=ns.events,
            bundles=ns.bundle,
            script=ns.script,
            provider=ns.provider,
            hitl=ns.hitl,
            jobs=ns.jobs,
            time_limit=ns.time_limit,
            naming=CLI,
        )
    except DoctorUsageError as refused:
        sys.stderr.write(f"{prog}: error: {escape(refused.message)}\n")
        return EXIT_USAGE
    if ns.junit is not None:
        try:
            write_output(ns.junit, report.junit())
        except OSError as exc:
            sys.stderr.write(f"{prog}: error: cannot write --junit {escape(ns.junit)}: {exc}\n")
            return EXIT_USAGE
    if ns.json:
        import json

        print_out(json.dumps(report.document(), indent=2, sort_keys=True) + "\n")
    else:
        print_out(report.render())
    return report.exit_code
