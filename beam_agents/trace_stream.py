"""Trace streams: trace events as ``varint(len) + serialize_trace_event(ev)`` frames.

A trace stream is the binary interchange of traces (docs/replay.md §2):
the ``file://`` sink writes it, ``convert-bq`` produces it, and
``beam-agents-replay --traces`` reads it. Each frame is a base-128 varint
length followed by the deterministic bytes of one ``TraceEvent``.

Reading streams in fixed-size chunks, so memory stays bounded by the chunk
size (or the largest frame) whatever the file size. Replay usually wants the
events of one key out of a stream holding thousands of keys, so the reader
filters by key *before* parsing: deterministic serialization writes field 1
(``entity_key``) first, so every frame of key ``K`` starts with
``b"\\x0a" + varint(len(K)) + K`` and the others are skipped unparsed.

Bad bytes only ever raise this package's errors (``TraceStreamError`` and its
subclasses), each naming the source and the byte offset of the bad frame.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, NoReturn, Protocol

from google.protobuf.message import DecodeError

from beam_agents._protos import TraceEvent
from beam_agents._wire import BinaryWriter, varint
from beam_agents.errors import FrameTooLargeError, TraceStreamError, TruncatedStreamError
from beam_agents.trace_events import serialize_trace_event

__all__ = [
    "MAX_FRAME_BYTES",
    "iter_frames",
    "read_activation_frames",
    "read_trace_frames",
    "read_trace_stream",
    "trace_stream_files",
    "write_trace_stream",
]

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""The longest frame a trace stream may hold (16 MiB).

A trace event holds identities and digests, never payloads, so real frames
are a few hundred bytes; a length prefix over this limit means a corrupt or
foreign file, and refusing it keeps a bad length from making the reader
buffer gigabytes before noticing.
"""

_DEFAULT_CHUNK = 1 << 20
_MAX_VARINT_BYTES = 10  # a 64-bit varint never needs more
_WRITE_BATCH_BYTES = 1 << 20


class BinaryReader(Protocol):
    """A binary file object open for reading (a file, ``io.BytesIO``, a pipe, a socket file)."""

    def read(self, size: int = -1, /) -> bytes | None: ...


StreamSource = str | os.PathLike[str] | BinaryReader | bytes | bytearray | memoryview
"""What the readers accept: a path, a binary file object, or the stream's bytes."""


# --------------------------------------------------------------------------- writing


def _write_frames(out: BinaryWriter, events: Iterable[TraceEvent], source: str) -> int:
    """Write ``events`` as frames to ``out`` in batches; return how many were written."""
    count = 0
    offset = 0
    batch: list[bytes] = []
    batch_bytes = 0
    for event in events:
        data = serialize_trace_event(event)
        size = len(data)
        if size > MAX_FRAME_BYTES:
            # Refuse to write what every reader would refuse to read.
            raise FrameTooLargeError(
                f"{source}: trace event {count} serializes to {size} bytes, over the "
                f"{MAX_FRAME_BYTES}-byte frame limit (MAX_FRAME_BYTES)",
                source=source,
                offset=offset,
            )
        head = varint(size)
        batch.append(head)
        batch.append(data)
        frame_bytes = len(head) + size
        batch_bytes += frame_bytes
        offset += frame_bytes
        count += 1
        if batch_bytes >= _WRITE_BATCH_BYTES:
            out.write(b"".join(batch))
            batch.clear()
            batch_bytes = 0
    if batch:
        out.write(b"".join(batch))
    return count


NAME_MAX_BYTES = 255
"""The longest file name (in bytes) Linux, macOS and Windows file systems accept."""


def temporary_sibling(path: Path) -> Path:
    """A fresh temporary name next to ``path``: ``.<name, cut>.<32 hex>.tmp``, never too long.

    The random part makes it unique; the leading dot and ``.tmp`` keep it out of
    ``*.pb`` scans. The final name is cut (at a character boundary) so the whole
    temporary name fits ``NAME_MAX_BYTES`` however long ``path``'s name is: a final
    name of 255 bytes must not fail because its temporary one is 293.
    """
    random = uuid.uuid4().hex
    budget = NAME_MAX_BYTES - len(f"..{random}.tmp")
    stem = path.name
    encoded = os.fsencode(stem)
    if len(encoded) > budget:
        # Whole UTF-8 characters only (a cut one, or a non-UTF-8 byte, is dropped).
        stem = encoded[:budget].decode("utf-8", errors="ignore")
    return path.with_name(f".{stem}.{random}.tmp")


def write_trace_stream(
    dest: str | os.PathLike[str] | BinaryWriter, events: Iterable[TraceEvent]
) -> int:
    """Write trace events as a trace stream.

    When ``dest`` is a path, the stream is written to a temporary file in the
    same directory (named ``.<name>.<random>.tmp``, so a directory scan for
    ``*.pb`` never picks it up), synced, and moved over ``dest`` with
    ``os.replace``: a crash leaves either the old file or the whole new one,
    never a truncated stream a reader would take for complete. When ``dest``
    is a binary file object, frames are written to it at its current position
    and it is neither flushed nor closed.

    Args:
        dest: A path, or a binary file object open for writing.
        events: The events, in stream order.

    Returns:
        The number of frames written.

    Raises:
        FrameTooLargeError: An event serializes to more than ``MAX_FRAME_BYTES``
            (for a path, nothing is written).
        OSError: The file cannot be written.
    """
    if not isinstance(dest, (str, os.PathLike)):
        return _write_frames(dest, events, "<stream>")
    path = Path(dest)
    tmp = temporary_sibling(path)
    # O_EXCL: never write through someone else's file; 0o666 so the umask decides
    # the final permissions, as for any file the user creates.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as out:
            count = _write_frames(out, events, str(path))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return count


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX only; Windows cannot open directories)."""
    if os.name != "posix":
        return
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --------------------------------------------------------------------------- reading


class _Chunks:
    """Hands the frame loops a buffer that starts at a frame boundary, refilled in chunks.

    The loops scan ``buf`` from 0, stop at the first frame that is not wholly
    inside it, and call ``refill(buf, pos, need)`` with that frame's start; the
    unread tail is kept and more bytes are appended. Memory is bounded by
    ``max(chunk_size, largest frame)`` plus one tail.
    """

    __slots__ = ("_data", "_eof", "_file", "_opened", "_path", "base", "chunk_size", "source")

    def __init__(self, source: StreamSource, chunk_size: int) -> None:
        # No I/O here: a path is opened by first(), inside the generator whose
        # finally closes it, so an iterator never started holds no file.
        self.chunk_size = chunk_size
        self.base = 0  # absolute offset of buf[0]
        self._eof = False
        self._data: bytes | None = None
        self._file: BinaryReader | None = None
        self._path: str | None = None
        self._opened: BinaryIO | None = None  # the file first() opened, closed by close()
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.source = "<bytes>"
            self._data = bytes(source)
        elif isinstance(source, (str, os.PathLike)):
            self.source = self._path = os.fspath(source)
        else:
            # An open file (or a wrapper with a ``name``) is named by it in errors.
            name = getattr(source, "name", None)
            self.source = name if isinstance(name, str) and name else "<stream>"
            self._file = source

    def first(self) -> bytes:
        """The first buffer: the whole input for bytes, the first chunk otherwise."""
        if self._data is not None:
            data, self._data, self._eof = self._data, None, True
            return data
        if self._path is not None:
            try:
                self._file = self._opened = open(self._path, "rb")  # noqa: SIM115 - see close()
            except OSError as exc:
                raise TraceStreamError(
                    f"cannot open trace stream {self._path}: {exc.strerror or exc}",
                    source=self._path,
                ) from exc
        return self._read(self.chunk_size)

    def _read(self, size: int) -> bytes:
        if self._file is None:
            self._eof = True
            return b""
        try:
            data = self._file.read(size)
        except OSError as exc:
            raise TraceStreamError(
                f"cannot read trace stream {self.source}: {exc.strerror or exc}",
                source=self.source,
                offset=self.base,
            ) from exc
        if data is None:
            # A non-blocking stream with nothing to read yet: waiting is the caller's job.
            raise TraceStreamError(
                f"{self.source} is a non-blocking stream with no data ready; "
                f"read trace streams from blocking files",
                source=self.source,
                offset=self.base,
            )
        if not data:
            self._eof = True
            return b""
        return data if isinstance(data, bytes) else bytes(data)

    def refill(self, buf: bytes, pos: int, need: int) -> bytes | None:
        """The next buffer, starting at ``buf[pos]``; None at a clean end of stream.

        Args:
            buf: The current buffer.
            pos: Where the first unconsumed frame starts in ``buf``.
            need: How many bytes that frame needs from ``pos`` (0 if unknown yet).

        Raises:
            TruncatedStreamError: The stream ends inside the frame at ``pos``.
        """
        tail = buf[pos:] if pos else buf
        self.base += pos
        if not self._eof:
            # Read the rest of a known-long frame in one go rather than chunk by chunk.
            data = self._read(max(self.chunk_size, need - len(tail)))
            if data:
                return tail + data if tail else data
        if tail:
            raise TruncatedStreamError(
                f"{self.source}: the stream ends inside the frame at byte offset {self.base} "
                + (
                    f"({len(tail)} of its {need} bytes present)"
                    if need
                    else f"({len(tail)} bytes present, its length prefix incomplete)"
                ),
                source=self.source,
                offset=self.base,
            )
        return None

    def close(self) -> None:
        """Close the file if this object opened it (a caller's file object stays open)."""
        if self._opened is not None:
            self._opened.close()
            self._opened = self._file = None


def _check_chunk_size(chunk_size: int) -> int:
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive number of bytes, got {chunk_size}")
    return chunk_size


def _varint_tail(buf: bytes, pos: int, chunks: _Chunks) -> tuple[int, int]:
    """Decode a varint of 3+ bytes at ``buf[pos]``: (value, position after it).

    Raises IndexError when the buffer ends inside the varint (the caller refills).
    """
    value = 0
    shift = 0
    p = pos
    while True:
        b = buf[p]  # IndexError: need more bytes
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if p - pos >= _MAX_VARINT_BYTES:
            raise TraceStreamError(
                f"{chunks.source}: the length prefix of the frame at byte offset "
                f"{chunks.base + pos} runs over {_MAX_VARINT_BYTES} bytes; this is not a "
                f"trace stream or it is corrupt",
                source=chunks.source,
                offset=chunks.base + pos,
            )
    if value > MAX_FRAME_BYTES:
        _raise_too_large(chunks, pos, value)
    return value, p


def _raise_too_large(chunks: _Chunks, pos: int, length: int) -> NoReturn:
    raise FrameTooLargeError(
        f"{chunks.source}: the frame at byte offset {chunks.base + pos} declares {length} "
        f"bytes, over the {MAX_FRAME_BYTES}-byte limit (MAX_FRAME_BYTES); the stream is "
        f"corrupt or not a trace stream",
        source=chunks.source,
        offset=chunks.base + pos,
    )


def iter_frames(
    source: StreamSource, *, chunk_size: int = _DEFAULT_CHUNK
) -> Generator[tuple[int, bytes], None, None]:
    """Split a trace stream into frames, without parsing them.

    Reads ``chunk_size`` bytes at a time, so memory stays bounded whatever
    the stream's size. A path is opened here and closed when the iterator
    ends or is closed; a file object is read from its current position to
    its end and left open.

    Args:
        source: A path, a binary file object, or the stream's bytes.
        chunk_size: How many bytes to read at a time.

    Yields:
        ``(offset, payload)``: the byte offset where the frame (its length
        prefix) starts, and the frame's payload bytes.

    Raises:
        TruncatedStreamError: The stream ends inside a frame.
        FrameTooLargeError: A frame declares more than ``MAX_FRAME_BYTES``.
        TraceStreamError: A length prefix is over-long, or the source cannot be read.
    """
    return _frames(_Chunks(source, _check_chunk_size(chunk_size)))


def _frames(chunks: _Chunks) -> Generator[tuple[int, bytes], None, None]:
    try:
        # The loop below is the hot path of every trace scan: locals only, the
        # one- and two-byte varints (frames under 16 KiB) decoded inline, and
        # the end of the buffer detected by the IndexError of reading past it
        # (free in Python 3.11 until it happens, about once per chunk).
        buf: bytes | None = chunks.first()
        while buf is not None:
            base = chunks.base
            end = len(buf)
            pos = 0
            need = 0
            try:
                while True:
                    b = buf[pos]
                    if b < 0x80:
                        p = pos + 1
                        q = p + b
                    else:
                        b2 = buf[pos + 1]
                        if b2 < 0x80:
                            p = pos + 2
                            q = p + ((b & 0x7F) | (b2 << 7))
                        else:
                            n, p = _varint_tail(buf, pos, chunks)
                            q = p + n
                    if q > end:
                        need = q - pos
                        break
                    yield base + pos, buf[p:q]
                    pos = q
            except IndexError:
                pass
            buf = chunks.refill(buf, pos, need)
    finally:
        chunks.close()


def _parse(frame: bytes, chunks: _Chunks, offset: int) -> TraceEvent:
    event = TraceEvent()
    try:
        event.ParseFromString(frame)
    except DecodeError as exc:
        raise TraceStreamError(
            f"{chunks.source}: the frame at byte offset {offset} ({len(frame)} bytes) is not a "
            f"TraceEvent: {exc}",
            source=chunks.source,
            offset=offset,
        ) from exc
    return event


def read_trace_stream(
    source: StreamSource,
    *,
    entity_key: bytes | None = None,
    chunk_size: int = _DEFAULT_CHUNK,
) -> Generator[TraceEvent, None, None]:
    """Read the trace events of a stream, optionally only those of one key.

    With ``entity_key``, frames of other keys are skipped without being parsed
    (so a corrupt frame of another key goes unnoticed). A frame written by
    ``serialize_trace_event`` starts with field 1, ``entity_key``, so a frame
    of key ``K`` starts with ``b"\\x0a" + varint(len(K)) + K``; the length is
    part of the comparison, so key ``b"k1"`` never matches ``b"k10"``. A frame
    that does not start with field 1 (an event with an empty key, or a
    foreign writer's field order) is parsed and its key compared, and a
    matching prefix is confirmed on the parsed event: the result is the same
    as parsing every frame and comparing keys (for frames that hold field 1
    at most once, as every protobuf writer produces them).

    Memory and file handling are as for ``iter_frames``.

    Args:
        source: A path, a binary file object, or the stream's bytes.
        entity_key: Yield only this key's events; ``None`` for all events.
        chunk_size: How many bytes to read at a time.

    Yields:
        The events, in stream order.

    Raises:
        TruncatedStreamError: The stream ends inside a frame.
        FrameTooLargeError: A frame declares more than ``MAX_FRAME_BYTES``.
        TraceStreamError: A length prefix is over-long, a frame is not a
            ``TraceEvent``, or the source cannot be read.
    """
    keys = None if entity_key is None else (bytes(entity_key),)
    return (
        event for event, _ in read_trace_frames(source, entity_keys=keys, chunk_size=chunk_size)
    )


def read_trace_frames(
    source: StreamSource,
    *,
    entity_keys: Sequence[bytes] | None = None,
    chunk_size: int = _DEFAULT_CHUNK,
) -> Generator[tuple[TraceEvent, bytes], None, None]:
    """``read_trace_stream`` with each event's frame (its bytes as the stream holds them),
    and optionally the events of several keys (``entity_keys``; None: every key).

    Frames of other keys are skipped unparsed, as ``read_trace_stream`` does for one.
    """
    chunks = _Chunks(source, _check_chunk_size(chunk_size))
    if entity_keys is None:
        return _all_frames(chunks)
    return _key_frames(chunks, tuple(dict.fromkeys(bytes(k) for k in entity_keys)))


def read_activation_frames(
    source: StreamSource,
    *,
    entity_key: bytes,
    seq: int,
    chunk_size: int = _DEFAULT_CHUNK,
) -> Generator[tuple[TraceEvent, bytes], None, None]:
    """``read_trace_frames`` of one key's activation ``seq`` only, the other activations'
    frames skipped unparsed too (what the TUI paints before the replay has read the whole
    trace: a 100,000-event activation after another is found without parsing the first).

    ``serialize_trace_event`` writes field 2 (``seq``) right after field 1, so a frame of
    that activation starts with the key's prefix, ``b"\\x10"`` and ``varint(seq)``; a
    frame of the key whose prefix is followed by another ``seq`` is of another activation.
    Any other frame of the key (seq 0, which is not written, or a foreign field order) is
    parsed and compared, as every frame that is yielded is: the events are those that
    parsing every frame and comparing key and seq would give (for frames that hold fields
    1 and 2 at most once, as every protobuf writer produces them).
    """
    key = bytes(entity_key)
    key_prefix = b"\x0a" + varint(len(key)) + key
    prefix = key_prefix + b"\x10" + varint(seq)
    seq_tag = len(key_prefix)
    chunks = _Chunks(source, _check_chunk_size(chunk_size))
    try:
        # The splitting loop of _frames, as _key_frames has it: a frame of another
        # activation costs a startswith or two, no slice and no parse.
        buf: bytes | None = chunks.first()
        while buf is not None:
            startswith = buf.startswith
            end = len(buf)
            pos = 0
            need = 0
            try:
                while True:
                    b = buf[pos]
                    if b < 0x80:
                        p = pos + 1
                        q = p + b
                    else:
                        b2 = buf[pos + 1]
                        if b2 < 0x80:
                            p = pos + 2
                            q = p + ((b & 0x7F) | (b2 << 7))
                        else:
                            n, p = _varint_tail(buf, pos, chunks)
                            q = p + n
                    if q > end:
                        need = q - pos
                        break
                    if not startswith(prefix, p, q) and p < q and buf[p] == 0x0A:
                        if not startswith(key_prefix, p, q):
                            pos = q  # another key
                            continue
                        if startswith(b"\x10", p + seq_tag, q):
                            pos = q  # another activation of the key
                            continue
                    frame = buf[p:q]
                    event = _parse(frame, chunks, chunks.base + pos)
                    if event.entity_key == key and event.seq == seq:
                        yield event, frame
                    pos = q
            except IndexError:
                pass
            buf = chunks.refill(buf, pos, need)
    finally:
        chunks.close()


def _all_frames(chunks: _Chunks) -> Generator[tuple[TraceEvent, bytes], None, None]:
    frames = _frames(chunks)
    try:
        for offset, frame in frames:
            yield _parse(frame, chunks, offset), frame
    finally:
        frames.close()


_PROBE_SAMPLE = 512


def _probe_position(buf: bytes, prefix: bytes) -> int:
    """The position in ``prefix`` where the keys of the first frames of ``buf`` vary most.

    Counts the distinct byte values at each position over a sample of frames
    (a position with ``d`` values lets about ``1/d`` of other keys through);
    ties go to the later position, where ids and counters vary. Only a speed
    choice: a frame that passes the probe is still compared in full.
    """
    size = len(prefix)
    seen: list[set[int]] = [set() for _ in range(size)]
    sample = _frames(_Chunks(buf, len(buf) or 1))
    try:
        for _, frame in itertools.islice(sample, _PROBE_SAMPLE):
            if len(frame) >= size and frame[0] == 0x0A:
                for i in range(1, size):
                    seen[i].add(frame[i])
    except TraceStreamError:
        pass  # the end of the first chunk, or a bad frame the real scan will report
    finally:
        sample.close()
    best = size - 1
    for i in range(size - 1, 0, -1):
        if len(seen[i]) > len(seen[best]):
            best = i
    return best


def _key_frames(
    chunks: _Chunks, keys: tuple[bytes, ...]
) -> Generator[tuple[TraceEvent, bytes], None, None]:
    if len(keys) != 1:
        yield from _keys_frames(chunks, keys)
        return
    key = keys[0]
    prefix = b"\x0a" + varint(len(key)) + key
    try:
        # The splitting loop of _frames with the key test in place of the
        # yield: a frame of another key (nearly every frame) costs a byte
        # comparison or two, or one startswith; no slice and no parse.
        first = chunks.first()
        # One byte of the prefix, compared by index, tells most other keys
        # apart more cheaply than a startswith call: the byte where the keys of
        # the first frames vary most (where keys vary depends on their shape).
        probe = _probe_position(first, prefix)
        probe_byte = prefix[probe]
        buf: bytes | None = first
        while buf is not None:
            startswith = buf.startswith
            end = len(buf)
            pos = 0
            need = 0
            try:
                while True:
                    b = buf[pos]
                    if b < 0x80:
                        p = pos + 1
                        q = p + b
                    else:
                        b2 = buf[pos + 1]
                        if b2 < 0x80:
                            p = pos + 2
                            q = p + ((b & 0x7F) | (b2 << 7))
                        else:
                            n, p = _varint_tail(buf, pos, chunks)
                            q = p + n
                    if q > end:
                        need = q - pos
                        break
                    # Skip at once a frame starting with field 1 whose byte at the
                    # probe position differs. Otherwise parse when the prefix
                    # matches, or when the frame does not start with field 1
                    # (p == q guards the index: an empty frame).
                    at = p + probe
                    if at < q and buf[at] != probe_byte and buf[p] == 0x0A:
                        pos = q
                        continue
                    if startswith(prefix, p, q) or p == q or buf[p] != 0x0A:
                        frame = buf[p:q]
                        event = _parse(frame, chunks, chunks.base + pos)
                        if event.entity_key == key:
                            yield event, frame
                    pos = q
            except IndexError:
                pass
            buf = chunks.refill(buf, pos, need)
    finally:
        chunks.close()


def _keys_frames(
    chunks: _Chunks, keys: tuple[bytes, ...]
) -> Generator[tuple[TraceEvent, bytes], None, None]:
    """``_key_frames`` for several keys (or none): a prefix test per key, no probe byte."""
    prefixes = tuple(b"\x0a" + varint(len(k)) + k for k in keys)
    wanted = frozenset(keys)
    frames = _frames(chunks)
    try:
        for offset, frame in frames:
            if frame[:1] == b"\x0a" and not frame.startswith(prefixes):
                continue
            event = _parse(frame, chunks, offset)
            if event.entity_key in wanted:
                yield event, frame
    finally:
        frames.close()


# --------------------------------------------------------------------------- files


def trace_stream_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace-stream files a ``--traces FILE|DIR`` argument names.

    A directory stands for its ``*.pb`` files (what the ``file://`` trace sink
    writes), sorted by name, not searched recursively; the ``.tmp`` files of
    writes in progress are not among them. Anything else that exists is
    taken as one stream.

    Args:
        path: A trace-stream file or a directory of them.

    Returns:
        The files, in reading order (possibly empty for a directory).

    Raises:
        TraceStreamError: ``path`` does not exist.
    """
    p = Path(path)
    if p.is_dir():
        return sorted((f for f in p.glob("*.pb") if f.is_file()), key=lambda f: f.name)
    if p.exists():
        return [p]
    raise TraceStreamError(
        f"no trace stream at {os.fspath(path)}: no such file or directory "
        "(a trace-stream file or a directory of *.pb files is expected)",
        source=os.fspath(path),
    )
