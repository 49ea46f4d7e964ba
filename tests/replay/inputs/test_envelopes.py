"""``--events``: the triggering envelope picked out of a topic dump by traced id and sha256."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import AgentEnvelope
from beam_agents.replay.engine import replay
from beam_agents.replay.inputs.envelopes import load_envelopes, write_envelope_stream
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import Verdict
from beam_agents.testing import approval_envelope, event_envelope

OTHER = b"customer-other"


def ask(text: str, at: int, key: bytes = KEY, envelope_id: str = "") -> AgentEnvelope:
    return event_envelope(key, "ask", text.encode(), time_ms=at, envelope_id=envelope_id or None)


@pytest.fixture
def two_asks() -> tuple[KeyHistory, list[AgentEnvelope]]:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    sent = [ask("where is A1?", T0, envelope_id="m1"), ask("and A2?", T0 + 1000, envelope_id="m2")]
    for envelope in sent:
        history.send(envelope)
    return history, sent


def dump(*envelopes: AgentEnvelope) -> bytes:
    import io

    out = io.BytesIO()
    write_envelope_stream(out, [e.SerializeToString() for e in envelopes])
    return out.getvalue()


def with_events(history: KeyHistory, *events: bytes | Path, seq: int | None = None):  # type: ignore[no-untyped-def]
    return dataclasses.replace(
        options(history.export(), history.trace_bytes(), seq=seq), events=tuple(events)
    )


def test_the_envelope_is_picked_by_traced_id_for_each_seq(two_asks) -> None:  # type: ignore[no-untyped-def]
    history, sent = two_asks
    noise = [
        ask("hello", T0, key=OTHER, envelope_id="m1"),
        approval_envelope(OTHER, "x", approved=True, time_ms=T0),
    ]
    stream = dump(noise[0], sent[1], noise[1], sent[0])
    for seq in (1, 2, None):
        result = replay(with_events(history, stream, seq=seq))
        assert result.verdict is Verdict.REPRODUCED, result.error or result.reason
        assert result.header.envelope_id == ("m1" if seq == 1 else "m2")


def test_a_directory_of_single_envelope_files_and_streams(two_asks, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    history, sent = two_asks
    (tmp_path / "m1.pb").write_bytes(sent[0].SerializeToString())
    (tmp_path / "rest.pb").write_bytes(dump(sent[1]))
    (tmp_path / "notes.txt").write_text("not read")
    for seq in (1, 2):
        result = replay(with_events(history, tmp_path, seq=seq))
        assert result.verdict is Verdict.REPRODUCED, result.error


def test_a_missing_id_is_exit_2_naming_it(two_asks) -> None:  # type: ignore[no-untyped-def]
    history, sent = two_asks
    result = replay(with_events(history, dump(sent[0]), seq=2))
    assert result.exit_code == 2
    assert "envelope_id 'm2'" in result.error and "not in" in result.error


def test_same_id_other_bytes_is_refused_naming_both_digests(two_asks) -> None:  # type: ignore[no-untyped-def]
    history, sent = two_asks
    forged = ask("and A3?", T0 + 1000, envelope_id="m2")
    result = replay(with_events(history, dump(forged), seq=2))
    assert result.exit_code == 2
    assert "'m2'" in result.error and "other bytes" in result.error
    # The right copy next to a forged one is found by its digest: the traced bytes win.
    result = replay(with_events(history, dump(forged, sent[1]), seq=2))
    assert result.verdict is Verdict.REPRODUCED


def test_event_and_events_together_are_refused(two_asks) -> None:  # type: ignore[no-untyped-def]
    history, sent = two_asks
    opts = dataclasses.replace(with_events(history, dump(*sent)), event=sent[1].SerializeToString())
    result = replay(opts)
    assert result.exit_code == 2 and "both event= and events= were given" in result.error


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "is empty"),
        (b"\x05abc", "neither an envelope stream"),
        (b"\xff" * 12, "neither an envelope stream"),
    ],
)
def test_corrupt_dumps_are_input_errors_naming_the_file(
    data: bytes, needle: str, tmp_path: Path
) -> None:
    path = tmp_path / "dump.pb"
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        load_envelopes([path], KEY)
    assert str(path) in info.value.message and needle in info.value.message


def test_a_stream_that_breaks_after_envelopes_names_the_offset(tmp_path: Path) -> None:
    good = dump(ask("a", T0, envelope_id="a"), ask("b", T0, envelope_id="b"))
    path = tmp_path / "dump.pb"
    path.write_bytes(good + b"\x03zzz")
    with pytest.raises(InputError) as info:
        load_envelopes([path], KEY)
    assert "breaks after 2 envelopes" in info.value.message
    assert f"offset {len(good)}" in info.value.message


def test_only_the_keys_envelopes_are_kept_and_duplicates_once() -> None:
    mine = ask("a", T0, envelope_id="a")
    index = load_envelopes([dump(mine, ask("b", T0, key=OTHER, envelope_id="b"), mine)], KEY)
    assert [(i, raw) for i, raw in index.envelopes()] == [("a", mine.SerializeToString())]


def test_refusals_stay_one_paragraph_over_many_files_and_copies(two_asks, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A folder of 500 dumps, or 500 forged copies of one id, once listed every one."""
    history, sent = two_asks
    for i in range(500):
        (tmp_path / f"dump-{i:03}.pb").write_bytes(dump(sent[0]))
    result = replay(with_events(history, tmp_path, seq=2))
    assert result.exit_code == 2 and "envelope_id 'm2'" in result.error
    assert "and 497 more files" in result.error and len(result.error) < 1500
    forged = [ask(f"and A{i}?", T0 + i, envelope_id="m2") for i in range(500)]
    result = replay(with_events(history, dump(*forged), seq=2))
    assert result.exit_code == 2 and "other bytes" in result.error
    assert "and 497 more copies" in result.error and len(result.error) < 1500
