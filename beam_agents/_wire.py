"""Base-128 varints and length-delimited frames: the one encoder of every stream and blob.

Four formats share this wire shape, and each wrote its own varint before: trace
streams (``trace_stream``: ``varint(len) + event``), envelope streams (``--events``
dumps, ``incidents.bundle``'s envelopes), incident bundles (their trace slice is a
trace stream) and state blobs (``blobs.encode_blob`` writes a body's length after
its tag). The trace-stream reader keeps its own decoding of the one- and two-byte lengths,
inline in its hot loop (a million frames per scan: no call per frame); everything
else reads a varint with ``read_varint``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

__all__ = [
    "BinaryWriter",
    "frame",
    "message_fields",
    "packed_varints",
    "read_varint",
    "varint",
    "write_frames",
]


class BinaryWriter(Protocol):
    """A binary file object open for writing."""

    def write(self, data: bytes, /) -> object: ...


def varint(value: int) -> bytes:
    """The base-128 varint encoding of a non-negative int (protobuf's, least significant
    group first)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(data: bytes) -> bytes:
    """One frame of a stream: ``varint(len(data)) + data``."""
    return varint(len(data)) + data


def write_frames(out: BinaryWriter, items: Iterable[bytes]) -> None:
    """Write each of ``items`` as one frame (an envelope stream, a bundle's trace slice)."""
    for data in items:
        out.write(frame(data))


def read_varint(data: memoryview | bytes, at: int, limit: int = 10) -> tuple[int, int] | None:
    """``(value, position after it)`` of the varint at ``at`` of at most ``limit`` bytes;
    None when the data ends inside it or it is longer than ``limit``."""
    value = shift = 0
    while at < len(data) and shift < 7 * limit:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return None


def message_fields(data: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, wire type, value start, value end)`` of each top-level field of the
    message ``data``, without parsing it: to count a message's elements before the parser
    builds them (a parsed element costs hundreds of bytes, however few it takes on the
    wire). Stops at anything malformed (the parser then says what)."""
    at, size = 0, len(data)
    while at < size:
        tag = read_varint(data, at, limit=5)
        if tag is None:
            return
        key, at = tag
        number, wire_type = key >> 3, key & 7
        start = at
        if wire_type == 0:
            scalar = read_varint(data, at)
            if scalar is None:
                return
            at = scalar[1]
        elif wire_type in (1, 5):
            at += 8 if wire_type == 1 else 4
            if at > size:
                return
        elif wire_type == 2:
            length = read_varint(data, at)
            if length is None or length[1] + length[0] > size:
                return
            start, at = length[1], length[1] + length[0]
        else:
            return
        yield number, wire_type, start, at


def packed_varints(data: memoryview | bytes) -> int:
    """How many varints a packed repeated field's payload ``data`` holds (one per byte
    below 0x80: each ends one)."""
    return len(bytes(data).translate(None, _CONTINUATION_BYTES))


_CONTINUATION_BYTES = bytes(range(0x80, 0x100))
