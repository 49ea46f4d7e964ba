"""Reading replay's inputs as bytes: paths, ``-`` for standard input, bytes given, size caps.

Every failure becomes an ``InputError`` (exit 2) naming the input (as the caller's
``Naming`` names it: ``--snapshot FILE`` or ``snapshot=``) and the file; no
reader's own exception gets out, so bad input never shows a traceback.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from typing import BinaryIO, TypeVar

from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import FILE, InputError

__all__ = [
    "SIZE_CAPS",
    "STDIN",
    "CappedReader",
    "describe_source",
    "file_kind",
    "open_regular",
    "read_capped",
    "read_source",
    "read_source_mutable",
    "size_cap",
    "too_large",
]

STDIN = "-"


def describe_source(source: Source) -> str:
    """How a source is named in messages: its path, ``<stdin>`` or ``<N bytes>``."""
    if isinstance(source, bytes):
        return f"<{len(source)} bytes>"
    text = os.fspath(source)
    return "<stdin>" if text == STDIN else text


MiB = 1024 * 1024
SIZE_CAPS: dict[Input, tuple[str, int]] = {
    Input.SNAPSHOT: ("BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES", 256 * MiB),
    Input.EVENT: ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
    Input.EVENTS: ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
    Input.FORK_VALUE: ("BEAM_AGENTS_REPLAY_MAX_FORK_VALUE_BYTES", 16 * MiB),
    Input.TRACES: ("BEAM_AGENTS_REPLAY_MAX_TRACES_BYTES", 4096 * MiB),
    Input.BUNDLE: ("BEAM_AGENTS_REPLAY_MAX_BUNDLE_BYTES", 1024 * MiB),
    Input.ROWS: ("BEAM_AGENTS_REPLAY_MAX_ROWS_BYTES", 1024 * MiB),
}
"""Per input: the environment variable that raises its size cap, and the default cap (bytes).

A cap bounds what one input can make replay read (``/dev/zero`` has no end);
``--traces`` is streamed, so its cap (per file) bounds time, not memory."""


def size_cap(what: Input, naming: Naming) -> int:
    """The size cap of ``what`` in bytes: its environment variable, else the default.

    Raises:
        InputError: The environment variable is not a positive number of bytes.
    """
    env, default = SIZE_CAPS.get(what, SIZE_CAPS[Input.BUNDLE])
    raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(
            f"{env}={raw!r} is not a positive number of bytes",
            f"set it to the largest {naming.name(what)} input to accept, e.g. {env}={default}",
        )
    return value


def too_large(what: Input, naming: Naming, name: str, cap: int) -> InputError:
    """The refusal of an input over its size cap: it names the cap and its variable."""
    return _too_large(what, naming, name, cap)


def _too_large(what: Input, naming: Naming, name: str, cap: int) -> InputError:
    env, _ = SIZE_CAPS.get(what, SIZE_CAPS[Input.BUNDLE])
    def reason(shown: str) -> str:
        return f"{naming.given(what, shown)} is larger than the {cap}-byte cap for {naming.name(what)} inputs"

    return InputError(
        reason(name),
        f"if it is really that large, raise the cap: {naming.raise_cap.format(env=env)}",
        cause=reason(FILE),
    )


def _stdin(what: Input, naming: Naming) -> str:
    """How standard input is given for ``what``: ``-``, or as its naming spells a file when
    that is not the bare path (``--set @-``: ``--set -`` is the value ``-`` itself)."""
    return naming.given(what, "-") if what in naming.given_as else "-"


def _takes(what: Input, naming: Naming) -> str:
    """What an input that names a file takes, for a file that cannot be read."""
    if what is Input.BUNDLE:
        return f"{naming.name(what)} takes a file path"
    if what in naming.given_as:  # --set @FILE: the flag alone takes the value itself
        return (
            f"{naming.given(what, 'FILE')} takes a file path, or {_stdin(what, naming)} for "
            "standard input"
        )
    return f"{naming.name(what)} takes a file path, or - for standard input"


def file_kind(mode: int) -> str:
    """What a file that is no regular file is, for messages: ``a directory``, ``a FIFO
    (named pipe)``, ``a device``, ``a socket``."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "no regular file"


def open_regular(path: str, what: Input, naming: Naming) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file within ``what``'s size cap.

    Opened non-blocking first, so a FIFO with no writer cannot hang the open;
    devices (``/dev/zero``), FIFOs, sockets and directories are refused.

    Raises:
        InputError: Not a regular file, over the cap, or unreadable (naming input and path).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise _cannot_read(what, naming, path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = file_kind(st.st_mode)
            stdin = (
                f"; a single input can come from standard input as {_stdin(what, naming)}"
                if what is not Input.BUNDLE
                else ""
            )
            raise InputError(
                f"{naming.given(what, path)} is {kind}, not a regular file",
                f"{naming.name(what)} reads regular files only (save the data to a file first"
                f"{stdin})",
                cause=f"{naming.given(what, FILE)} is {kind}, not a regular file",
            )
        cap = size_cap(what, naming)
        if st.st_size > cap:
            raise _too_large(what, naming, path, cap)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(stream: BinaryIO, what: Input, naming: Naming, name: str) -> bytes:
    """All of ``stream``, refusing (without reading it all) more than ``what``'s cap."""
    cap = size_cap(what, naming)
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise _too_large(what, naming, name, cap)
    return data


def _read_capped_mutable(stream: BinaryIO, what: Input, naming: Naming, name: str) -> bytearray:
    """``read_capped`` into a ``bytearray``, which its reader may empty when done with it."""
    cap = size_cap(what, naming)
    data = bytearray()
    while chunk := stream.read(min(1 << 20, cap + 1 - len(data))):
        data += chunk
        if len(data) > cap:
            raise _too_large(what, naming, name, cap)
    return data


class CappedReader:
    """A binary stream that refuses (``InputError``) to deliver more than ``what``'s cap.

    For streamed inputs (the traces): a file that grows while read, or standard input.
    """

    def __init__(self, stream: BinaryIO, what: Input, naming: Naming, name: str) -> None:
        self._stream = stream
        self._what = what
        self._naming = naming
        self._name = name
        self._left = size_cap(what, naming)
        self._cap = self._left

    @property
    def name(self) -> str:
        """The file (or ``<stdin>``) read: what errors about its content name."""
        return self._name

    def read(self, size: int = -1, /) -> bytes:
        want = self._left + 1 if size < 0 else min(size, self._left + 1)
        data = self._stream.read(want) or b""
        self._left -= len(data)
        if self._left < 0:
            raise _too_large(self._what, self._naming, self._name, self._cap)
        return data


def read_source(source: Source, what: Input, naming: Naming) -> bytes:
    """The bytes of a snapshot or event source (a regular file, ``-`` or bytes).

    Raises:
        InputError: The file cannot be read, is not a regular file, or is over the
            input's size cap (naming the input, the file, the cap and how to raise it).
    """
    if isinstance(source, bytes):
        return source
    return _read_file(source, what, naming, read_capped)


def read_source_mutable(source: Source, what: Input, naming: Naming) -> bytes | bytearray:
    """``read_source``, a file read into a ``bytearray`` (bytes given are returned as they are)."""
    if isinstance(source, bytes):
        return source
    return _read_file(source, what, naming, _read_capped_mutable)


DataT = TypeVar("DataT", bytes, bytearray)


def _read_file(
    source: str | os.PathLike[str],
    what: Input,
    naming: Naming,
    read: Callable[[BinaryIO, Input, Naming, str], DataT],
) -> DataT:
    path = os.fspath(source)
    try:
        if path == STDIN:
            return read(sys.stdin.buffer, what, naming, "<stdin>")
        with open_regular(path, what, naming) as f:
            return read(f, what, naming, path)
    except OSError as exc:
        raise _cannot_read(what, naming, path, exc) from None


def _cannot_read(what: Input, naming: Naming, path: str, exc: OSError) -> InputError:
    why = exc.strerror or exc
    return InputError(
        f"cannot read {naming.given(what, path)}: {why}",
        _takes(what, naming),
        cause=f"cannot read {naming.given(what, FILE)}: {why}",
    )


