"""Where the console script's report goes: a standard output agent code cannot write to.

Agent code runs in the replay's process (and, for ``check``, in workers that inherit its
descriptors). Its ``print`` went into the report stream: a diverging agent printing a
fake JSON document made ``--json`` start with ``"verdict": "reproduced"``, and
``os.dup2(devnull, 1)`` in a tool made the command exit 0 with no report at all;
``sys.stdout = None`` made the report's write fail with a traceback and exit 1.

So before any agent code runs, ``keep_report_stream()`` moves the real standard output
to a descriptor of its own (``os.dup``, not inherited by any process) and points
descriptor 1 at ``/dev/null``, for agent code and every worker it is inherited by:
what agent code prints is discarded, and ``sys.stdout`` is agent code's to replace.
The report (the headless text, ``--json``, ``check``'s table) is written to
``report_stream()``, a text stream over the saved descriptor, held here; the guard
refuses agent code duplicating another descriptor onto it, duplicating it, or opening
it as a file (``guard.protect_descriptor``). Standard error is kept the same way
(``sys.stderr`` as it was, ``restore_stderr``) for replay's own messages, and agent code's writes to it stay
visible, as a tool's warnings are.

In-process callers of ``main([...])`` (tests, tools) run no isolated process: the report
goes to ``sys.stdout`` as they have it.
"""

from __future__ import annotations

import os
import sys
from contextlib import suppress
from typing import TextIO

__all__ = [
    "flush_report",
    "keep_report_stream",
    "report_stream",
    "restore_stderr",
    "silence_report",
]

_KEPT: dict[str, TextIO] = {}
_DROPPED: list[TextIO] = []


def keep_report_stream() -> None:
    """From now on the report goes to a copy of standard output; descriptor 1 is /dev/null.

    Call it once, as the console script, before agent code is imported or a worker that
    imports it is started. Idempotent.
    """
    if "out" in _KEPT:
        return
    from beam_agents.replay.isolation.guard import protect_descriptor

    out = sys.stdout
    with suppress(AttributeError, OSError, ValueError):
        out.flush()
    encoding = getattr(out, "encoding", None) or "utf-8"
    errors = getattr(out, "errors", None) or "strict"
    saved = os.dup(1)  # not inheritable: no process agent code could start gets it
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    _KEPT["out"] = open(saved, "w", encoding=encoding, errors=errors)  # noqa: SIM115 - for life
    _KEPT["err"] = sys.stderr
    protect_descriptor(saved)


def report_stream() -> TextIO:
    """Where the report is written: the saved standard output, or ``sys.stdout`` in-process."""
    return _KEPT.get("out") or sys.stdout


def restore_stderr() -> None:
    """``sys.stderr`` as it was before agent code ran (which may have replaced it, even with
    None), for replay's own messages after the re-run."""
    err = _KEPT.get("err")
    if err is not None:
        sys.stderr = err


def flush_report() -> None:
    """Flush the report stream, if one is kept; nothing a closed descriptor does is raised."""
    out = _KEPT.get("out")
    if out is not None:
        with suppress(OSError, ValueError):
            out.flush()


def silence_report() -> bool:
    """The report's reader went away (``| head``): drop the kept stream, whose descriptor
    is closed, so nothing is written to it again. False when none is kept."""
    out = _KEPT.get("out")
    if out is None:
        return False
    _KEPT["out"] = open(os.devnull, "w")  # noqa: SIM115 - held until the process ends
    # Kept alive: collected, it would flush what the reader never took into the closed
    # descriptor and print "Exception ignored"; the process ends with os._exit first.
    _DROPPED.append(out)
    with suppress(Exception):
        os.close(out.fileno())
    return True
