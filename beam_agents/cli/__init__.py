"""``beam-agents-replay``: replay one activation headless (default), as JSON, or in the TUI.

    beam-agents-replay --snapshot FILE --traces FILE|DIR [--traces ...] [--event FILE]
                       --agent module:ATTR --registry module:ATTR [--seq N]
                       [--hitl module:ATTR] [--headless] [--json]
    beam-agents-replay BUNDLE [--seq N] [--json] ...
    beam-agents-replay tui <the same flags but --headless/--json> | tui BUNDLE ...
    beam-agents-replay ls | bundle | check | bisect | convert-bq ...
    beam-agents-replay --version | --help | COMMAND --help

The parser is ``build_parser()``: the default (replay) flags on the top-level parser and
one argparse subparser per command, each registered by one function in ``SUBCOMMANDS``.
This package is the top layer: one module per command (``replay``, ``tui``, ``ls``,
``bundle``, ``check``, ``convert_bq``), their shared flags in ``parsing``, and
``output``/``process``/``report_stream`` helpers (the last keeps the report's standard
output out of agent code's reach). It imports ``beam_agents.replay`` and, in ``tui`` only
when that command runs, ``replay_tui``; neither imports it (tests/test_layers.py).

Exit codes are the verdict's (0 reproduced or what-if, 1 diverged, 2 usage or
configuration error, 3 irreproducible). ``main`` returns the code instead of
exiting, so tests can call it in-process. Nothing heavy is imported on the way
to a headless verdict: no Beam, no Google or Kafka client, no Textual, and
DeepDiff only when there is a divergence to render.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from beam_agents._version import __version__
from beam_agents.cli import bisect, bundle, check, convert_bq, doctor, ls, tui
from beam_agents.cli.output import silence_stdout
from beam_agents.cli.parsing import (
    EXIT_CODES_HELP,
    PROG,
    Exit,
    Parser,
    UsageError,
    add_replay_flags,
    looks_like_a_file,
    replay_usage,
)
from beam_agents.cli.process import PROCESS_LIFE, finish
from beam_agents.cli.replay import bundle_parser, run_bundle, run_replay, usage_error_json
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EXIT_USAGE

__all__ = ["PROG", "SUBCOMMANDS", "build_parser", "main"]

# Each subcommand is a module of this package whose ``register(commands)`` adds its parser to
# the subparsers action and sets ``run`` (a function of the parsed namespace returning the exit
# code). To add one, write the module and append its ``register`` to ``SUBCOMMANDS``; ``--help``
# lists it.
SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[Parser]], None], ...] = (
    tui.register,
    convert_bq.register,
    ls.register,
    bundle.register,
    check.register,
    bisect.register,
    doctor.register,
)


def build_parser() -> Parser:
    """The whole command line (see ``_build``), for ``--help`` and for tests."""
    return _build()[0]


def _build() -> tuple[Parser, argparse._SubParsersAction[Parser]]:
    """The whole command line: the default (replay) flags, and one subparser per subcommand.

    ``beam-agents-replay --snapshot ...`` (no subcommand) is the headless/JSON replay;
    ``beam-agents-replay COMMAND ...`` runs that subcommand's parser on what follows it.
    """
    parser = Parser(
        prog=PROG,
        usage=(
            f"{replay_usage(PROG, headless=True)}\n"
            f"       {PROG} BUNDLE [--seq N] [--import-recorded] [--json] ...  (an incident "
            "bundle's replay; see BUNDLE --help)\n"
            f"       {PROG} COMMAND ...  (COMMAND --help for its flags)\n"
            f"       {PROG} -V | --version | --help"
        ),
        description=(
            "Re-run one traced activation offline, from a StateSnapshot, its trace stream and "
            "its triggering envelope, against a provider that serves nothing; then diff the "
            "re-run against the trace. Without a COMMAND, the replay is printed as a report "
            "(or, with --json, one JSON document)."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_replay_flags(parser, headless=True)
    parser.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", prog=PROG, parser_class=Parser
    )
    for register in SUBCOMMANDS:
        register(commands)
    parser.set_defaults(run=run_replay)
    return parser, commands


def _parse(args: Sequence[str]) -> argparse.Namespace:
    parser, commands = _build()
    if args[:1] and args[0] not in commands.choices and looks_like_a_file(args[0]):
        ns = bundle_parser(PROG, headless=True).parse_args(args)
        ns.command, ns.run = None, run_bundle
        return ns
    if args[:2] and args[0] == "tui" and len(args) > 1 and looks_like_a_file(args[1]):
        ns = bundle_parser(f"{PROG} tui", headless=False).parse_args(args[1:])
        ns.command, ns.run = "tui", tui.run_bundle_tui
        return ns
    if args[:1] and args[0] in commands.choices:
        # The subcommand's own parser sees everything after its name (and only that):
        # the default command's required flags do not apply to it.
        sub = commands.choices[args[0]]
        ns = sub.parse_args(args[1:])
        ns.command = args[0]
        return ns
    # A command after flags is named as such below; only then is a flag no flag of the replay.
    unknown = None if any(a in commands.choices for a in args) else _unknown_flag(parser, args)
    if unknown is not None:
        # Before argparse: it would take the flag's value for a COMMAND ("argument COMMAND:
        # invalid choice: '1'" for a mistyped --seq 1).
        raise UsageError(unknown)
    try:
        ns = parser.parse_args(args)
    except UsageError as exc:
        misplaced = [a for a in args if a in commands.choices]
        if misplaced:
            raise UsageError(
                f"{exc}; a command ('{misplaced[0]}') must come first, before its flags", exc.prog
            ) from None
        raise
    if ns.command is not None:
        raise UsageError(
            f"flags before the '{ns.command}' command: put the command first "
            f"({PROG} {ns.command} --help shows its flags)"
        )
    return ns


def _unknown_flag(parser: Parser, args: Sequence[str]) -> str | None:
    """The refusal of the first flag the replay does not have, with the nearest one it has."""
    import difflib

    known = sorted({flag for action in parser._actions for flag in action.option_strings})
    for arg in args:
        if arg == "--":
            return None
        if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
            continue
        flag = arg.split("=", 1)[0]
        if flag in known:
            continue
        near = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"unrecognized flag {escape(flag)}{hint}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it).

    Args:
        argv: The arguments after the program name; ``sys.argv[1:]`` if None.
    """
    PROCESS_LIFE["isolate"] = argv is None
    return finish(_main(list(sys.argv[1:] if argv is None else argv)))


def _main(args: list[str]) -> int:
    try:
        ns = _parse(args)
        run: Callable[[argparse.Namespace], int] = ns.run
        return run(ns)
    except Exit as exc:
        return exc.code
    except UsageError as exc:
        # Prefixed with the command whose --help it points to (`beam-agents-replay ls: error:`),
        # like a subcommand's own refusals (report_refusal), argparse's errors included.
        sys.stderr.write(
            f"{exc.prog}: error: {escape(str(exc))}. Run '{exc.prog} --help' for usage.\n"
        )
        # tui prints no JSON (and refuses --json): its usage error is the paragraph alone.
        if "--json" in args and args[:1] not in (["convert-bq"], ["tui"]):
            usage_error_json(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:  # outside emit (help, convert-bq): no verdict to keep
        silence_stdout()
        return EXIT_USAGE
    except Exception as exc:  # a bug of ours: a short report, exit 2 (never 0, no traceback)
        from beam_agents.cli.report_stream import restore_stderr
        from beam_agents.replay.refusal import InternalError

        restore_stderr()  # agent code may have set sys.stderr to None
        sys.stderr.write(f"{PROG}: {escape(InternalError(exc).message)}\n")
        return EXIT_USAGE
