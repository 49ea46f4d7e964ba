"""``beam-agents-replay check``: replay many incident bundles, grouped by verdict and cause.

``check_bundles(paths)`` replays every activation of every bundle (one row per
activation, ``check_workers``: in this process, or in isolated worker processes
as the CLI does), and reports the rows grouped by verdict and cause
(``check_rows``); ``check_render`` prints them (the table, ``--json``, JUnit).
Nothing here opens the TUI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

from beam_agents.replay.incidents.check_rows import (
    CheckReport,
    CheckRow,
    bundle_paths,
    empty_directory_rows,
)
from beam_agents.replay.incidents.check_workers import (
    CheckSettings,
    check_in_process,
    check_in_workers,
)
from beam_agents.replay.naming import CHECK_BUNDLES, Naming
from beam_agents.replay.options import DEFAULT_TIME_LIMIT, as_sources, checked_time_limit

__all__ = ["check_bundles"]


def check_bundles(
    paths: Iterable[str | os.PathLike[str]],
    *,
    agent: str | None = None,
    registry: str | None = None,
    import_recorded: bool = False,
    jobs: int = 1,
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    isolate: bool = True,
    naming: Naming = CHECK_BUNDLES,
    progress: Callable[[int], None] | None = None,
) -> CheckReport:
    """Replay every activation of every bundle and group the verdicts.

    Args:
        paths: Bundle files, or directories (their ``*.bundle`` files).
        agent: Replay with this agent (``module:ATTR``) instead of each bundle's recorded one.
        registry: Likewise for the tool registry.
        import_recorded: Consent to import the agent and registry each bundle records
            (where ``agent``/``registry`` is None); without it such a bundle is one
            ``error`` row naming that code, and nothing it names is imported.
        jobs: Worker processes at once.
        time_limit: Seconds each activation's agent code may run (import, re-run); past
            it the row is irreproducible. None or 0: no limit.
        isolate: Replay each activation in a fresh process of its own (the default): its
            verdict never depends on what else ran, and a worker agent code ends or hangs
            is an ``error`` or irreproducible row while this process carries on. False:
            one after the other in this process (agent code runs here, and shares it).
        naming: How the rows' messages name the inputs (default: these parameters; the
            command line passes its flags).
        progress: Told the number of rows (activations replayed, files refused) so far.

    Returns:
        The report: ``report.exit_code`` is the worst verdict's, ``report.groups`` the
        rows by verdict and cause. Bad files are rows, never exceptions.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, got {jobs}")
    try:
        time_limit = checked_time_limit(time_limit)
    except ValueError as exc:
        raise ValueError(f"time_limit {exc}") from None
    paths = list(as_sources(paths))  # one path is one path, not its characters
    files = bundle_paths(paths)
    started = time.perf_counter()
    rows: list[CheckRow] = empty_directory_rows(paths)
    workers = min(jobs, len(files))
    settings = CheckSettings(
        agent=agent,
        registry=registry,
        import_recorded=import_recorded,
        time_limit=time_limit,
        naming=naming,
    )
    if not isolate:
        rows.extend(check_in_process(files, settings, progress))
    elif files:
        rows.extend(check_in_workers(files, settings, max(workers, 1), progress))
    return CheckReport(
        rows=tuple(rows),
        bundles=len(files),
        jobs=max(workers, 1),
        seconds=time.perf_counter() - started,
    )
