"""``beam_agents._wire``: the one varint and frame encoder, checked against protobuf's own."""

from __future__ import annotations

import io

from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st

from beam_agents._protos import AgentEnvelope
from beam_agents._wire import frame, read_varint, varint, write_frames
from beam_agents.trace_stream import iter_frames

EDGES = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]


@given(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from(EDGES)))
def test_varint_is_protobufs_encoding_and_reads_back(value: int) -> None:
    data = varint(value)
    assert data == _VarintBytes(value)
    assert read_varint(data, 0) == (value, len(data)) == _DecodeVarint(data, 0)


def test_read_varint_refuses_a_cut_or_overlong_varint() -> None:
    assert read_varint(varint(300)[:1], 0) is None  # ends inside it
    assert read_varint(b"\x80" * 5 + b"\x01", 0, limit=5) is None  # six bytes where five fit
    assert read_varint(b"\x80" * 4 + b"\x01", 0, limit=5) == (1 << 28, 5)


def test_frames_are_what_the_stream_reader_splits() -> None:
    envelopes = [AgentEnvelope(envelope_id=f"e{i}" * i).SerializeToString() for i in range(200)]
    out = io.BytesIO()
    write_frames(out, envelopes)
    assert out.getvalue() == b"".join(frame(e) for e in envelopes)
    assert [data for _, data in iter_frames(out.getvalue())] == envelopes
