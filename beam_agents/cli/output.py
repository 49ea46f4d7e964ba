"""Writing what a command produced: a refusal on stderr, a file whole or not at all, and a
standard output whose reader went away."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from beam_agents.cli.parsing import PROG
from beam_agents.cli.report_stream import report_stream, silence_report


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again (the
    report stream, once the console script keeps one, is dropped instead)."""
    if silence_report():
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def print_out(text: str) -> None:
    """Write ``text`` to the report's standard output (``report_stream``); a reader that went
    away (``| head``) is no error."""
    try:
        out = report_stream()
        out.write(text)
        out.flush()
    except BrokenPipeError:
        silence_stdout()


def write_out(write: Callable[[TextIO], None]) -> None:
    """``write(report_stream())``, then flush; a reader that went away (``| head``) is no
    error."""
    try:
        out = report_stream()
        write(out)
        out.flush()
    except BrokenPipeError:
        silence_stdout()


def report_refusal(command: str, refused: Exception) -> int:
    from beam_agents.replay.refusal import ReplayRefused
    from beam_agents.replay.reporting.escape import escape

    assert isinstance(refused, ReplayRefused)
    sys.stderr.write(f"{PROG} {command}: error: {escape(refused.message)}\n")
    return refused.verdict.exit_code


def check_output_path(path: str) -> None:
    """What ``write_output`` refuses about ``path`` itself, checked before the work that
    produces its bytes (``check --junit``: a long check would end refusing it).

    Raises:
        OSError: an empty name, an existing non-regular file, or a folder that is not one.
    """
    import errno
    import stat

    if not path:
        raise OSError(errno.EINVAL, "the file name is empty")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise OSError(errno.EINVAL, f"it exists and is {kind}; name a new or regular file")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise OSError(errno.ENOENT, f"its folder {folder} does not exist")


def write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (``bundle -o``, ``check --junit``).

    An existing ``path`` that is not a regular file (or a link) is refused: a FIFO
    would block forever, and renaming over a device (``/dev/null`` for root) or a
    directory would replace it. The bytes go to a fresh sibling (``O_EXCL``, never
    through someone else's file, its name within NAME_MAX) moved over ``path``, so a
    symbolic link at ``path`` is replaced, never written through.

    Raises:
        OSError: The file cannot be written (``ENOTSUP``-style errors name the cause).
    """
    from beam_agents.replay.isolation.guard import own_file_writes
    from beam_agents.trace_stream import temporary_sibling

    check_output_path(path)
    with own_file_writes():  # the operator's own file (isolated: only replay's writes pass)
        _write_output(path, data, temporary_sibling(Path(path)))


def _write_output(path: str, data: bytes, tmp: Path) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
