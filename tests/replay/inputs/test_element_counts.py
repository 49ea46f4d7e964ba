"""Issue 23: memory bounded by an input's size, not by how many elements it holds.

A parsed element costs hundreds of bytes however few it takes on the wire, so element
counts are capped before parsing (pending intents, resume records, cache entries),
an envelope id has a bounded number of different copies in ``--events``, a key a
bounded number of traced activations; pending intents need distinct, non-empty ids.
Each case through the console script."""

from __future__ import annotations

import io

import pytest
from replay_harness import KEY, T0, Inputs
from test_cli import run

from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent
from beam_agents._wire import frame, write_frames
from beam_agents.replay.inputs import traces as traces_module
from beam_agents.trace_events import serialize_trace_event


def _with_snapshot(inputs: Inputs, change) -> None:  # type: ignore[no-untyped-def]
    snapshot = StateSnapshot.FromString(inputs.snapshot.read_bytes())
    change(snapshot)
    inputs.snapshot.write_bytes(snapshot.SerializeToString(deterministic=True))


def test_a_snapshot_of_many_empty_pending_intents_is_refused_before_parsing(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    """2M empty intents (4 MB) took 1.29 GB; 40 MB crashed the parser."""
    inputs.snapshot.write_bytes(inputs.snapshot.read_bytes() + b"\x42\x00" * 10_001)
    code, out, err = run(inputs.flags(), capsys)
    assert (code, out) == (2, "")
    assert "holds more than 10000 pending intents (counted on the wire)" in err
    assert "Traceback" not in err


def test_pending_intents_inside_resume_records_count_too(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    def many_resumed(snapshot: StateSnapshot) -> None:
        record = snapshot.resumed_from.add(seq=1)
        for _ in range(10_001):
            record.pending.add()

    _with_snapshot(inputs, many_resumed)
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2 and "holds more than 10000 pending intents" in err


def test_many_tiny_cache_entries_are_refused_before_parsing(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    from beam_agents._protos import VersionedBlob

    def many_entries(snapshot: StateSnapshot) -> None:
        blob = VersionedBlob.FromString(snapshot.llm_cache)
        blob.body += b"\x0a\x00" * 10_001
        snapshot.llm_cache = blob.SerializeToString(deterministic=True)

    _with_snapshot(inputs, many_entries)
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2 and "holds more than 10000 replay-cache entries" in err


@pytest.mark.parametrize(
    ("ids", "needle"),
    [(["", ""], "a pending intent with an empty intent_id"), (["i-1", "i-1"], "two pending intents with intent_id 'i-1'")],
)
def test_pending_intents_with_empty_or_duplicate_ids_are_refused(
    inputs: Inputs, capsys: pytest.CaptureFixture[str], ids: list[str], needle: str
) -> None:
    def add(snapshot: StateSnapshot) -> None:
        for intent_id in ids:
            snapshot.pending.add(
                intent_id=intent_id, entity_key=KEY, seq=1, tool="lookup_order", args=b"{}",
                created_ms=T0, expires_at_ms=T0 + 1000,
            )  # fmt: skip

    _with_snapshot(inputs, add)
    code, _, err = run(inputs.flags(), capsys)
    assert code == 2 and needle in err


def test_events_with_too_many_copies_of_one_id_is_refused(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    """80k copies of one id took 87 s (each new copy compared with every one before); the
    traced one last was found and read 'reproduced'."""
    copies = []
    for i in range(1001):
        fake = AgentEnvelope()
        fake.CopyFrom(inputs.event)
        fake.event.payload = b"copy %d" % i
        copies.append(fake.SerializeToString())
    dump = io.BytesIO()
    write_frames(dump, [*copies, inputs.event.SerializeToString()])
    events = inputs.directory / "dump.pb"
    events.write_bytes(dump.getvalue())
    code, out, err = run([*inputs.flags(event=None), "--events", str(events)], capsys)
    assert (code, out) == (2, "")
    assert "is in the dump with more than 1000 different contents" in err
    # Exact repeats (at-least-once delivery) are one copy: still found.
    write_frames(dump := io.BytesIO(), [inputs.event.SerializeToString()] * 5000)
    events.write_bytes(dump.getvalue())
    code, _, err = run([*inputs.flags(event=None), "--events", str(events)], capsys)
    assert code == 0, err


def test_a_key_with_more_activations_than_the_cap_is_refused(
    inputs: Inputs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = b"".join(
        frame(serialize_trace_event(TraceEvent(
            entity_key=KEY, seq=s, index=0, kind=TraceEvent.ACTIVATION_START, name="start",
        )))
        for s in range(3, 6)
    )  # fmt: skip
    with open(inputs.traces / "traces-0001.pb", "ab") as f:
        f.write(tiny)
    code, _, err = run([*inputs.flags(), "--seq", "1"], capsys)
    assert code == 0, err
    monkeypatch.setattr(traces_module, "MAX_ACTIVATIONS_PER_KEY", 3)
    code, _, err = run([*inputs.flags(), "--seq", "1"], capsys)
    assert code == 2 and f"the traces hold more than 3 activations of key {KEY.hex()}" in err
