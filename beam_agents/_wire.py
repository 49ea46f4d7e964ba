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

from collections.abc import Iterable
from typing import Protocol

__all__ = ["BinaryWriter", "frame", "read_varint", "varint", "write_frames"]


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
