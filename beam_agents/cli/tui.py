"""``tui``: open a replay in the terminal UI (``replay_tui``, imported only here, only when run)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beam_agents.cli.parsing import (
    PROG,
    TUI_EXIT_CODES_HELP,
    Parser,
    UsageError,
    add_replay_flags,
    refuse_report_flags,
    replay_options,
    replay_usage,
)
from beam_agents.cli.process import PROCESS_LIFE, cwd_importable, isolate
from beam_agents.cli.replay import bundle_replay_options, emit, start_last_resort
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.reporting.escape import escape

if TYPE_CHECKING:
    from beam_agents.cli.reference import ReferenceSpec
from beam_agents.replay.result import EXIT_USAGE, ReplayResult


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    parser = commands.add_parser(
        "tui",
        usage=(
            f"{replay_usage(f'{PROG} tui', headless=False)}\n"
            f"       {PROG} tui BUNDLE [--seq N] [--import-recorded] ...  (an incident "
            "bundle; see BUNDLE --help)"
        ),
        help="open the replay of one activation in the terminal UI (the same flags, "
        "without --headless/--json)",
        description="Open the replay of one activation in the terminal UI.",
        epilog=TUI_EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_replay_flags(parser, headless=False)
    parser.set_defaults(run=_run_tui)


def _run_tui(ns: argparse.Namespace) -> int:
    from beam_agents.cli.reference import reference_spec

    refuse_report_flags(ns, f"{PROG} tui")
    options = replay_options(ns, f"{PROG} tui")
    reference = reference_spec(ns, options)
    return open_tui(options, export_dir=getattr(ns, "export_dir", None), reference=reference)


def run_bundle_tui(ns: argparse.Namespace) -> int:
    from beam_agents.cli.reference import bundle_reference_spec

    refuse_report_flags(ns, f"{PROG} tui")
    loaded = bundle_replay_options(ns)
    if isinstance(loaded, ReplayResult):
        return emit(loaded, as_json=False)
    options, seqs = loaded  # the bundle is loaded once (it was loaded again for its seqs)
    reference = bundle_reference_spec(ns, options)
    return open_tui(
        options, seqs=seqs, export_dir=getattr(ns, "export_dir", None), reference=reference
    )


def _replayable_seqs(options: ReplayOptions) -> tuple[int, ...]:
    """The traced activations of the snapshot's key it can be asked to replay (for ``[``/``]``).

    Only with ``--events``: switching needs each activation's envelope. Empty when the
    inputs cannot be listed (the replay itself then says why).
    """
    if not options.events:
        return ()
    from beam_agents.replay.incidents.listing import AFTER_SNAPSHOT, INCOMPLETE, list_activations
    from beam_agents.replay.refusal import ReplayRefused

    try:
        listing = list_activations(options.traces, snapshot=options.snapshot, naming=options.naming)
    except ReplayRefused:
        return ()
    return tuple(
        row.seq
        for row in listing.rows
        if row.outcome != "pending" and row.replay not in (AFTER_SNAPSHOT, INCOMPLETE)
    )


def _has_terminal() -> bool:
    """Standard input and output are both a terminal (the TUI reads keys, draws a screen)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def open_tui(
    options: ReplayOptions,
    *,
    seqs: Sequence[int] | None = None,
    export_dir: str | None = None,
    reference: ReferenceSpec | None = None,
) -> int:
    """Open the TUI on ``options``; ``seqs`` for [ and ] (None: the traced ones, with --events);
    ``reference``: the reference run, run first (before this process isolates itself)."""
    stdin_flags = [
        flag
        for flag, value in (
            ("--snapshot", options.snapshot),
            ("--event", options.event),
            *(("--traces", t) for t in options.traces),
            *(("--events", e) for e in options.events),
            ("--set @", options.fork.value_file if options.fork is not None else None),
        )
        if isinstance(value, str) and value == "-"
    ]
    if stdin_flags:
        raise UsageError(
            f"the TUI reads its keys from the terminal, so {stdin_flags[0]} cannot be - "
            "(standard input); save the input to a file, or drop 'tui' for the headless report",
            f"{PROG} tui",
        )
    if export_dir is not None and not os.path.isdir(export_dir):
        # Refused before the replay, as check --junit is: 'e' creates no folder.
        what = "is not a folder" if os.path.exists(export_dir) else "does not exist"
        raise UsageError(
            f"--export-dir {escape(export_dir)} {what}: 'e' writes its reports into an "
            "existing folder and creates none (make it first, or leave the flag out for the "
            "current directory)",
            f"{PROG} tui",
        )
    if not _has_terminal():
        # --headless and --json are the top-level command's, not tui's: name the command.
        raise UsageError(
            "the TUI needs a terminal (standard input and output are not both one); for "
            "scripts and pipes run the same arguments without 'tui' (beam-agents-replay "
            "--snapshot ... or beam-agents-replay BUNDLE prints the report; add --json for one "
            "JSON document)",
            f"{PROG} tui",
        )
    if options.fork is not None:
        seqs = ()  # a fork is of one activation: its event index means nothing in another
    elif seqs is None:
        seqs = _replayable_seqs(options)
    switch_fd = os.environ.pop(SWITCH_FD_ENV, None)
    if len(seqs) > 1 and switch_fd is None and PROCESS_LIFE["isolate"]:
        # The console script with [ and ] to switch: each activation in a fresh process.
        return _one_process_per_activation(sys.argv[1:])
    cwd_importable()
    try:
        from replay_tui.app import run_tui
    except ImportError as exc:
        sys.stderr.write(
            f"{PROG}: error: the terminal UI is not available ({exc}); the headless report "
            "works without it (drop the 'tui' subcommand)\n"
        )
        return EXIT_USAGE
    if reference is not None:
        from beam_agents.cli.reference import run_reference
        from beam_agents.cli.replay import with_reference

        sys.stderr.write(f"{PROG}: running the reference ({reference.source}) first...\n")
        ran = run_reference(reference)
        extra_complete: dict[str, Any] = {"complete": lambda r: with_reference(r, ran)}
    else:
        extra_complete = {}
    start_last_resort(options.time_limit, terminal=True)  # before the agent is imported
    isolate()  # after Textual is imported, before the agent is
    from beam_agents.replay.inputs.agent_code import no_bytecode

    with no_bytecode():  # as headless: replay writes nothing
        extra: dict[str, Any] = {}
        if seqs:
            extra["seqs"] = seqs
        if export_dir is not None:
            extra["export_dir"] = Path(export_dir)
        if switch_fd is not None:
            extra["switch_to"] = _switch_writer(int(switch_fd))
        return int(run_tui(options, **extra, **extra_complete))


SWITCH_FD_ENV = "BEAM_AGENTS_REPLAY_TUI_SWITCH_FD"
"""Set by ``_one_process_per_activation`` for its child: the pipe the child writes the seq
``[`` or ``]`` chose to before it exits."""


def _one_process_per_activation(argv: list[str]) -> int:
    """Run the TUI (``argv``: this command line) in a child process, and again with
    ``--seq N`` each time ``[`` or ``]`` in it chose activation N; the first child's code
    (the activation the command line opened, as ``q`` gives it: docs/tui.md).

    Agent code keeps module state and threads: replayed in the same interpreter, an
    activation's verdict could depend on the one shown before it (a module-global counter
    primed by the first made the second read 'reproduced'). This process imports no agent
    code; each child is the console script, isolated as ever, and owns the terminal while it
    runs (a Ctrl+C reaches it; this process waits for it).
    """
    import signal
    import subprocess

    first: int | None = None  # the opened activation's code: q's, whatever [ ] showed since
    while True:
        read_end, write_end = os.pipe()
        # A handler, not SIG_IGN: an ignored SIGINT would stay ignored in the child.
        previous = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            child = subprocess.run(
                [sys.executable, "-m", "beam_agents.cli", *argv],
                env={**os.environ, SWITCH_FD_ENV: str(write_end)},
                pass_fds=(write_end,),
                check=False,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
            os.close(write_end)
        with os.fdopen(read_end, "rb") as chosen:
            text = chosen.read(32).decode("ascii", "replace")
        code = child.returncode if child.returncode >= 0 else 128 - child.returncode
        if first is None:
            first = code
        if not text.isdigit():
            return first
        argv = _with_seq(argv, int(text))


def _with_seq(argv: list[str], seq: int) -> list[str]:
    """``argv`` with its ``--seq`` (if any) replaced by ``--seq seq``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--seq":
            skip = True
        elif not arg.startswith("--seq="):
            out.append(arg)
    return [*out, "--seq", str(seq)]


def _switch_writer(fd: int) -> Callable[[int], None]:
    def switch_to(seq: int) -> None:
        os.write(fd, str(seq).encode("ascii"))
        os.close(fd)

    return switch_to
