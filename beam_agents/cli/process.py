"""The process a replay runs agent code in: the current directory importable, and, as the
console script, isolated for the rest of its life (``beam_agents.replay.network_guard``)."""

from __future__ import annotations

import os
import sys

from beam_agents.cli.parsing import PROG
from beam_agents.replay.escape import escape


def cwd_importable() -> None:
    # A console script's sys.path starts at its bin/ directory, not the current one;
    # operators run replay from their project and name its modules (myapp.agent:AGENT).
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


PROCESS_LIFE = {"isolate": False}
"""Set by ``main()`` run as the console script (``argv`` None): isolate the whole process."""


def isolate() -> None:
    """Before agent code is imported: refuse network, processes, native code and side
    effects for the rest of this process (threads, ``atexit``), as the console script.

    In-process callers of ``main([...])`` (tests, tools) keep the guard to the re-run.
    """
    if not PROCESS_LIFE["isolate"]:
        return
    import atexit

    from beam_agents.replay.network_guard import isolate_process, late_attempts

    isolate_process()

    def report_late() -> None:
        late = late_attempts()
        if late:
            shown = "; ".join(escape(a.describe()) for a in late[:5])
            more = f" (and {len(late) - 5} more)" if len(late) > 5 else ""
            sys.stderr.write(
                f"{PROG}: after the re-run, agent code (a thread or an atexit hook) also tried, "
                f"and was refused: {shown}{more}\n"
            )

    atexit.register(report_late)
