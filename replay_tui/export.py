"""``e``: the result written as a Markdown report and its ``--json`` document, as new files.

Both are renderings of the one ``ReplayResult`` (``beam_agents.replay.reporting``):
the JSON is exactly what ``beam-agents-replay --json`` prints, so the two can never
disagree. Files are created, never overwritten, and links are never followed.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from beam_agents.replay.isolation.guard import own_file_writes
from beam_agents.replay.reporting.json_doc import render_json
from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.result import ReplayResult

__all__ = ["check_export_dir", "export_report", "report_basename"]

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_EXPORTS_OF_ONE_NAME = 1000


def report_basename(result: ReplayResult) -> str:
    """``replay-<agent>-<key hex, first 32 digits>-seq<seq>``: the exported files' common name.

    The agent is its ``module:ATTR`` path with anything but letters, digits, ``.``,
    ``_`` and ``-`` replaced by ``_`` (at most 60 characters): never a path separator.
    """
    h = result.header
    agent = _UNSAFE_NAME.sub("_", h.agent_path)[:60].strip("._") or "agent"
    key = h.entity_key.hex()[:32] if h.entity_key else "nokey"
    seq = "unknown" if h.seq is None else str(h.seq)
    return f"replay-{agent}-{key or 'empty'}-seq{seq}"


def _create(path: Path, text: str) -> bool:
    """Write ``text`` to a new file at ``path``; False if anything is already there.

    ``O_CREAT | O_EXCL`` never opens an existing file nor follows a symbolic link
    (a planted link, even a dangling one, counts as existing): nothing is ever
    overwritten or written through a link.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return True


def check_export_dir(directory: Path) -> None:
    """Refuse a ``directory`` that is not an existing folder: ``e`` creates no folder (as
    ``check --junit`` creates none: a mistyped name must not grow a tree of folders).

    Raises:
        FileNotFoundError: Nothing is there.
        NotADirectoryError: Something that is not a folder is there.
    """
    if not directory.exists():
        raise FileNotFoundError(
            errno.ENOENT, "no such folder (the report creates none: make it first)", str(directory)
        )
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(directory))


def export_report(
    result: ReplayResult, directory: Path, *, selected: int | None = None
) -> tuple[Path, Path]:
    """Write the Markdown and JSON reports as new files in ``directory``; returns both paths.

    The names are ``report_basename(result)`` plus ``.md`` / ``.json``; if either
    exists (a file, a directory or a symbolic link), ``-2``, ``-3``, ... is added
    until both are new. Existing files are never overwritten and links never followed.
    The Markdown quotes the values at the divergence, at the miss and at ``selected``
    (the event the operator had selected); the JSON holds every value.

    Raises:
        OSError: The directory is not an existing folder, or cannot be written (the app
            shows the message).
    """
    check_export_dir(directory)
    # The operator's own files, asked for with `e`: under the console script's isolation
    # only replay's own writes pass (beam_agents.replay.isolation.guard).
    with own_file_writes():
        return _export(result, directory, selected)


def _export(result: ReplayResult, directory: Path, selected: int | None) -> tuple[Path, Path]:
    base = report_basename(result)
    markdown, document = report_markdown(result, selected=selected), render_json(result)
    for n in range(1, _MAX_EXPORTS_OF_ONE_NAME + 1):
        stem = base if n == 1 else f"{base}-{n}"
        md_path, json_path = directory / f"{stem}.md", directory / f"{stem}.json"
        if os.path.lexists(json_path) or not _create(md_path, markdown):
            continue
        if not _create(json_path, document):
            md_path.unlink()  # ours, just written: the pair moves on to the next number
            continue
        return md_path.resolve(), json_path.resolve()
    raise FileExistsError(
        errno.EEXIST,
        f"{_MAX_EXPORTS_OF_ONE_NAME} reports of this activation already exist there",
        str(directory / base),
    )
