"""The process a replay runs agent code in: the current directory importable, and, as the
console script, isolated for the rest of its life (``beam_agents.replay.isolation.guard``)."""

from __future__ import annotations

import os
import sys
from contextlib import suppress

from beam_agents.cli.parsing import PROG
from beam_agents.replay.reporting.escape import escape


def cwd_importable() -> None:
    # A console script's sys.path starts at its bin/ directory, not the current one;
    # operators run replay from their project and name its modules (myapp.agent:AGENT).
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


PROCESS_LIFE = {"isolate": False, "isolated": False, "redact": False}
"""``isolate``: set by ``main()`` run as the console script (``argv`` None): isolate the whole
process. ``isolated``: ``isolate()`` did. ``redact``: ``--redact`` was given (the late
attempts are reported with their addresses as digests too)."""


def isolate() -> None:
    """Before agent code is imported: refuse network, processes, native code and side
    effects for the rest of this process (threads, ``atexit``), as the console script.

    In-process callers of ``main([...])`` (tests, tools) keep the guard to the re-run.
    """
    if not PROCESS_LIFE["isolate"]:
        return
    from beam_agents.replay.isolation.guard import isolate_process
    from beam_agents.replay.isolation.process_exit import drop_exit_callbacks

    isolate_process()
    drop_exit_callbacks()  # the process ends with os._exit (finish): only agent code's run
    PROCESS_LIFE["isolated"] = True


def _report_late() -> None:
    from beam_agents.replay.isolation.guard import late_attempts

    late = late_attempts()
    if PROCESS_LIFE["redact"]:
        late = [a.redacted() for a in late]
    if late:
        shown = "; ".join(escape(a.describe()) for a in late[:5])
        more = f" (and {len(late) - 5} more)" if len(late) > 5 else ""
        sys.stderr.write(
            f"{PROG}: outside the re-run (at import, in a thread or an atexit hook, or past "
            f"its time limit), agent code also tried, and was refused: {shown}{more}\n"
        )


def finish(code: int) -> int:
    """``code``, the console script's exit code; an isolated process ends here.

    A replay ran what agent code runs at interpreter exit before its judgement
    (``isolation.process_exit``), and a re-run abandoned at its time limit has a thread
    that cannot be stopped: a normal interpreter exit would run agent code once more
    after the report (its threads, ``atexit`` hooks, finalizers) and could change the
    verdict's exit code. So the output is flushed, the late attempts reported, and the
    process ends at once with the verdict's code (docs/replay.md, "Time limit").
    """
    if not PROCESS_LIFE["isolated"]:
        return code
    from beam_agents.cli.report_stream import flush_report, restore_stderr
    from beam_agents.replay.isolation.guard import end_process

    flush_report()
    restore_stderr()
    with suppress(Exception):  # standard error gone: the exit code is all that is left
        _report_late()
    end_process(code)
