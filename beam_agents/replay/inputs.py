"""Loading replay's inputs: files, the snapshot, the event, and the operator's agent code.

Every failure becomes an ``InputError`` (exit 2) naming the flag and the file,
or a ``CannotReproduce`` (exit 3) for a migration gap; no parser's or
importer's own exception gets out, so bad input never shows a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import sys
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from google.protobuf.message import DecodeError

from beam_agents._protos import AgentEnvelope, StateSnapshot
from beam_agents.errors import (
    BlobTooNewError,
    CorruptBlobError,
    MigrationGapError,
    StateError,
)
from beam_agents.key_state import KeyState, load_snapshot_for_replay
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import CannotReproduce, InputError

T = TypeVar("T")

STDIN = "-"


def describe_source(source: Source) -> str:
    """How a source is named in messages: its path, ``<stdin>`` or ``<N bytes>``."""
    if isinstance(source, bytes):
        return f"<{len(source)} bytes>"
    text = os.fspath(source)
    return "<stdin>" if text == STDIN else text


MiB = 1024 * 1024
SIZE_CAPS: dict[str, tuple[str, int]] = {
    "--snapshot": ("BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES", 256 * MiB),
    "--event": ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
    "--events": ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
    "--traces": ("BEAM_AGENTS_REPLAY_MAX_TRACES_BYTES", 4096 * MiB),
    "bundle": ("BEAM_AGENTS_REPLAY_MAX_BUNDLE_BYTES", 1024 * MiB),
    "ROWS": ("BEAM_AGENTS_REPLAY_MAX_ROWS_BYTES", 1024 * MiB),
}
"""Per flag: the environment variable that raises its size cap, and the default cap (bytes).

A cap bounds what one input can make replay read (``/dev/zero`` has no end);
``--traces`` is streamed, so its cap (per file) bounds time, not memory."""


def size_cap(flag: str) -> int:
    """The size cap of ``flag`` in bytes: its environment variable, else the default.

    Raises:
        InputError: The environment variable is not a positive number of bytes.
    """
    env, default = SIZE_CAPS.get(flag, SIZE_CAPS["bundle"])
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
            f"set it to the largest {flag} input to accept, e.g. {env}={default}",
        )
    return value


def _too_large(flag: str, name: str, cap: int) -> InputError:
    env, _ = SIZE_CAPS.get(flag, SIZE_CAPS["bundle"])
    return InputError(
        f"{flag} {name} is larger than the {cap}-byte cap for {flag} inputs",
        f"if it is really that large, raise the cap: {env}=<bytes> beam-agents-replay ...",
    )


def open_regular(path: str, flag: str) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file within ``flag``'s size cap.

    Opened non-blocking first, so a FIFO with no writer cannot hang the open;
    devices (``/dev/zero``), FIFOs, sockets and directories are refused.

    Raises:
        InputError: Not a regular file, over the cap, or unreadable (naming flag and path).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise InputError(
            f"cannot read {flag} {path}: {exc.strerror or exc}",
            f"{flag} takes a file path" + (", or - for standard input" if flag != "bundle" else ""),
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = (
                "a directory"
                if stat.S_ISDIR(st.st_mode)
                else "a FIFO (named pipe)"
                if stat.S_ISFIFO(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "not a regular file"
            )
            raise InputError(
                f"{flag} {path} is {what}, not a regular file",
                f"{flag} reads regular files only (save the data to a file first"
                + (
                    "; a single input can come from standard input as -)"
                    if flag != "bundle"
                    else ")"
                ),
            )
        cap = size_cap(flag)
        if st.st_size > cap:
            raise _too_large(flag, path, cap)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(stream: BinaryIO, flag: str, name: str) -> bytes:
    """All of ``stream``, refusing (without reading it all) more than ``flag``'s cap."""
    cap = size_cap(flag)
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise _too_large(flag, name, cap)
    return data


def _read_capped_mutable(stream: BinaryIO, flag: str, name: str) -> bytearray:
    """``read_capped`` into a ``bytearray``, which its reader may empty when done with it."""
    cap = size_cap(flag)
    data = bytearray()
    while chunk := stream.read(min(1 << 20, cap + 1 - len(data))):
        data += chunk
        if len(data) > cap:
            raise _too_large(flag, name, cap)
    return data


class CappedReader:
    """A binary stream that refuses (``InputError``) to deliver more than ``flag``'s cap.

    For streamed inputs (``--traces``): a file that grows while read, or standard input.
    """

    def __init__(self, stream: BinaryIO, flag: str, name: str) -> None:
        self._stream = stream
        self._flag = flag
        self._name = name
        self._left = size_cap(flag)
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
            raise _too_large(self._flag, self._name, self._cap)
        return data


def read_source(source: Source, flag: str) -> bytes:
    """The bytes of a ``--snapshot`` or ``--event`` source (a regular file, ``-`` or bytes).

    Raises:
        InputError: The file cannot be read, is not a regular file, or is over the
            flag's size cap (naming the flag, the file, the cap and how to raise it).
    """
    return source if isinstance(source, bytes) else _read_file(source, flag, read_capped)


def _read_source_mutable(source: Source, flag: str) -> bytes | bytearray:
    """``read_source``, a file read into a ``bytearray`` (bytes given are returned as they are)."""
    return source if isinstance(source, bytes) else _read_file(source, flag, _read_capped_mutable)


DataT = TypeVar("DataT", bytes, bytearray)


def _read_file(
    source: str | os.PathLike[str], flag: str, read: Callable[[BinaryIO, str, str], DataT]
) -> DataT:
    path = os.fspath(source)
    try:
        if path == STDIN:
            return read(sys.stdin.buffer, flag, "<stdin>")
        with open_regular(path, flag) as f:
            return read(f, flag, path)
    except OSError as exc:
        raise InputError(
            f"cannot read {flag} {path}: {exc.strerror or exc}",
            f"{flag} takes a file path, or - for standard input",
        ) from None


def load_snapshot_source(source: Source) -> tuple[StateSnapshot, KeyState, dict[str, int]]:
    """Read, parse, version-check and migrate (in memory) the ``--snapshot`` file.

    Returns:
        ``(snapshot, key state at the current layouts, stored version of each blob)``.

    Raises:
        InputError: Unreadable, not a snapshot, a corrupt blob, or newer than this package.
        CannotReproduce: A blob has no migration path to the current version.
    """
    name = describe_source(source)
    # A bytearray, which the loader empties once it has copied the cache bodies out:
    # the file's bytes are not held alongside the parsed cache (issue 14: memory).
    data = _read_source_mutable(source, "--snapshot")
    try:
        # The snapshot comes without its two cache blobs: the state holds them parsed, and
        # nothing reads the stored bytes again (issue 14: memory ~ the snapshot's size).
        snapshot, state, versions = load_snapshot_for_replay(data)
        state.tool_cache.check_keys()
    except BlobTooNewError as exc:
        raise InputError(f"--snapshot {name}: {exc}") from None
    except MigrationGapError as exc:
        raise CannotReproduce(
            f"--snapshot {name}: migration gap: {exc}",
            "replay migrates old blobs with the same migrations the pipeline uses, and this "
            "version has none for that step",
        ) from None
    except CorruptBlobError as exc:
        what = (
            "is not a serialized StateSnapshot"
            if exc.kind == "snapshot"
            else f"holds a corrupt {exc.kind} blob"
        )
        raise InputError(
            f"--snapshot {name} {what}: {exc.detail}",
            "pass the snapshot sink's message value (one StateSnapshot), byte for byte",
        ) from None
    except StateError as exc:
        raise InputError(f"--snapshot {name} cannot be used: {exc}") from None
    return snapshot, state, versions


def load_event_source(source: Source) -> AgentEnvelope:
    """Read and parse the ``--event`` file (one serialized ``AgentEnvelope``).

    Raises:
        InputError: Unreadable, not an envelope, or an envelope with no body.
    """
    name = describe_source(source)
    data = read_source(source, "--event")
    try:
        envelope = AgentEnvelope.FromString(data)
    except DecodeError as exc:
        raise InputError(
            f"--event {name} is not a serialized AgentEnvelope ({len(data)} bytes: {exc})",
            "pass the envelope's bytes exactly as they were on the events topic",
        ) from None
    if envelope.WhichOneof("body") is None:
        raise InputError(
            f"--event {name} holds an AgentEnvelope with no body ({len(data)} bytes)",
            "it must carry the event, tool_result or approval that triggered the activation",
        )
    return envelope


@contextlib.contextmanager
def no_bytecode() -> Iterator[None]:
    """No ``.pyc`` written while inside: replay writes nothing, not even the agent's bytecode.

    The one place replay turns bytecode writing off (imports of agent code, the whole
    guarded replay); the previous setting is restored on the way out.
    """
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


def import_object(path: str, flag: str, expected: type[T]) -> T:
    """Import ``module:ATTR`` (ATTR may be dotted) and check it is an ``expected``.

    Bytecode caches are not written while importing: replay writes nothing.

    Raises:
        InputError: A malformed path, a module that fails to import (for any reason,
            its own exception named), a missing attribute, or a value of another type.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(
            f"{flag} {path!r} is not of the form module:ATTR",
            f"e.g. {flag} myapp.agent:{'AGENT' if flag == '--agent' else 'TOOLS'}",
        )
    try:
        with no_bytecode():
            module = importlib.import_module(module_name)
    except BaseException as exc:  # the operator's module may raise anything at import
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(
            f"{flag} {path}: importing module {module_name!r} failed with "
            f"{type(exc).__name__}: {exc}",
            "run beam-agents-replay where that module is importable (the current directory "
            "is on the import path; set PYTHONPATH for others)",
        ) from None
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise InputError(
                f"{flag} {path}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(value, expected):
        article = "an" if expected.__name__[:1] in "AEIOU" else "a"
        what = (
            f"the class {value.__name__}"
            if isinstance(value, type)
            else (f"a {type(value).__name__}")
        )
        raise InputError(
            f"{flag} {path} is {what}, not {article} {expected.__name__} instance",
            f"point {flag} at the {expected.__name__} instance the pipeline was built with",
        )
    return value
