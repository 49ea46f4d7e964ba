"""Loading replay's inputs: files, the snapshot, the event, and the operator's agent code.

Every failure becomes an ``InputError`` (exit 2) naming the input (as the caller's
``Naming`` names it: ``--snapshot FILE`` or ``snapshot=``) and the file,
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
from beam_agents.replay.naming import REPLAYER, Input, Naming
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
SIZE_CAPS: dict[Input, tuple[str, int]] = {
    Input.SNAPSHOT: ("BEAM_AGENTS_REPLAY_MAX_SNAPSHOT_BYTES", 256 * MiB),
    Input.EVENT: ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
    Input.EVENTS: ("BEAM_AGENTS_REPLAY_MAX_EVENT_BYTES", 16 * MiB),
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


def _too_large(what: Input, naming: Naming, name: str, cap: int) -> InputError:
    env, _ = SIZE_CAPS.get(what, SIZE_CAPS[Input.BUNDLE])
    return InputError(
        f"{naming.given(what, name)} is larger than the {cap}-byte cap for "
        f"{naming.name(what)} inputs",
        f"if it is really that large, raise the cap: {naming.raise_cap.format(env=env)}",
    )


def _takes(what: Input, naming: Naming) -> str:
    """What an input that names a file takes, for a file that cannot be read."""
    if what is Input.BUNDLE:
        return f"{naming.name(what)} takes a file path"
    return f"{naming.name(what)} takes a file path, or - for standard input"


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
        raise InputError(
            f"cannot read {naming.given(what, path)}: {exc.strerror or exc}",
            _takes(what, naming),
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
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
                f"{naming.given(what, path)} is {kind}, not a regular file",
                f"{naming.name(what)} reads regular files only (save the data to a file first"
                + (
                    "; a single input can come from standard input as -)"
                    if what is not Input.BUNDLE
                    else ")"
                ),
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


def _read_source_mutable(source: Source, what: Input, naming: Naming) -> bytes | bytearray:
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
        raise InputError(
            f"cannot read {naming.given(what, path)}: {exc.strerror or exc}",
            _takes(what, naming),
        ) from None


def load_snapshot_source(
    source: Source, naming: Naming = REPLAYER
) -> tuple[StateSnapshot, KeyState, dict[str, int]]:
    """Read, parse, version-check and migrate (in memory) the snapshot file (or bytes).

    Returns:
        ``(snapshot, key state at the current layouts, stored version of each blob)``.

    Raises:
        InputError: Unreadable, not a snapshot, a corrupt blob, or newer than this package.
        CannotReproduce: A blob has no migration path to the current version.
    """
    given = naming.given(Input.SNAPSHOT, describe_source(source))
    # A bytearray, which the loader empties once it has copied the cache bodies out:
    # the file's bytes are not held alongside the parsed cache (issue 14: memory).
    data = _read_source_mutable(source, Input.SNAPSHOT, naming)
    try:
        # The snapshot comes without its two cache blobs: the state holds them parsed, and
        # nothing reads the stored bytes again (issue 14: memory ~ the snapshot's size).
        snapshot, state, versions = load_snapshot_for_replay(data)
        state.tool_cache.check_keys()
    except BlobTooNewError as exc:
        raise InputError(f"{given}: {exc}") from None
    except MigrationGapError as exc:
        raise CannotReproduce(
            f"{given}: migration gap: {exc}",
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
            f"{given} {what}: {exc.detail}",
            "pass the snapshot sink's message value (one StateSnapshot), byte for byte",
        ) from None
    except StateError as exc:
        raise InputError(f"{given} cannot be used: {exc}") from None
    return snapshot, state, versions


def load_event_source(source: Source, naming: Naming = REPLAYER) -> AgentEnvelope:
    """Read and parse the event file (one serialized ``AgentEnvelope``, or its bytes).

    Raises:
        InputError: Unreadable, not an envelope, or an envelope with no body.
    """
    given = naming.given(Input.EVENT, describe_source(source))
    data = read_source(source, Input.EVENT, naming)
    try:
        envelope = AgentEnvelope.FromString(data)
    except DecodeError as exc:
        raise InputError(
            f"{given} is not a serialized AgentEnvelope ({len(data)} bytes: {exc})",
            "pass the envelope's bytes exactly as they were on the events topic",
        ) from None
    if envelope.WhichOneof("body") is None:
        raise InputError(
            f"{given} holds an AgentEnvelope with no body ({len(data)} bytes)",
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


def import_object(path: str, what: Input, expected: type[T], naming: Naming) -> T:
    """Import ``module:ATTR`` (ATTR may be dotted) and check it is an ``expected``.

    Bytecode caches are not written while importing: replay writes nothing.

    Raises:
        InputError: A malformed path, a module that fails to import (for any reason,
            its own exception named), a missing attribute, or a value of another type.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        example = f"myapp.agent:{'AGENT' if what is Input.AGENT else 'TOOLS'}"
        raise InputError(
            f"{naming.given(what, repr(path))} is not of the form module:ATTR",
            f"e.g. {naming.given(what, example)}",
        )
    try:
        with no_bytecode():
            module = importlib.import_module(module_name)
    except BaseException as exc:  # the operator's module may raise anything at import
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(
            f"{naming.given(what, path)}: importing module {module_name!r} failed with "
            f"{type(exc).__name__}: {exc}",
            naming.import_advice,
        ) from None
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise InputError(
                f"{naming.given(what, path)}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(value, expected):
        article = "an" if expected.__name__[:1] in "AEIOU" else "a"
        found = (
            f"the class {value.__name__}"
            if isinstance(value, type)
            else (f"a {type(value).__name__}")
        )
        raise InputError(
            f"{naming.given(what, path)} is {found}, not {article} {expected.__name__} instance",
            f"point {naming.name(what)} at the {expected.__name__} instance the pipeline was "
            "built with",
        )
    return value
