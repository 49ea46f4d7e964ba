"""The one trace scanner: every command reads ``--traces`` through it, with one duplicate rule."""

from __future__ import annotations

import pytest
import replay_agents as ra
from incident_history import Incident
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import TraceEvent
from beam_agents.replay.engine import replay
from beam_agents.replay.incidents.bundle import make_bundle
from beam_agents.replay.incidents.listing import list_activations
from beam_agents.replay.inputs.traces import (
    MAX_EVENT_ATTRIBUTES,
    TraceMessages,
    first_events,
    scan_traces,
    trace_events,
)
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def _forged(history: KeyHistory, index: int) -> TraceEvent:
    """The traced event at ``index`` with another name: the same kind, at the same position."""
    forged = TraceEvent()
    forged.CopyFrom(history.trace[index])
    forged.name = "forged"
    return forged


def test_an_exact_copy_is_read_once_by_every_command(incident: Incident) -> None:
    """At-least-once sinks: the same traces twice give replay, ls and bundle what once does."""
    once, twice = incident.traces, incident.traces + incident.traces
    assert [e[1:] for e in trace_events([twice], KEY)] == [e[1:] for e in trace_events([once], KEY)]
    assert list_activations([twice]) == list_activations([once])
    made = {"snapshot": incident.snapshot, "agent": ra.__name__ + ":AGENT", "registry": "x:Y"}
    assert make_bundle(traces=[twice], events=[incident.events], **made) == make_bundle(
        traces=[once], events=[incident.events], **made
    )
    history = incident.h
    result = replay(options(history.export(), twice, event=incident.sent[-1]))
    assert result.verdict is Verdict.REPRODUCED, result.reason


@pytest.mark.parametrize("index", [0, 1, 3])  # seq 1's start, its model call, its end
def test_a_different_event_at_one_position_is_refused_by_every_command(
    incident: Incident, index: int
) -> None:
    """``ls`` compared only kinds: two events of one kind at one position were listed (one
    of them taken), where replay refused them. One rule now, in one place."""
    history = incident.h
    assert history.trace[index].seq == 1
    conflicting = incident.traces + history.trace_bytes([_forged(history, index)])
    where = f"key {KEY.hex()} seq 1 index {index}"
    with pytest.raises(InputError, match=f"two different events for {where}"):
        list_activations([conflicting])
    with pytest.raises(InputError, match=f"two different events for {where}"):
        make_bundle(
            snapshot=incident.snapshot,
            traces=[conflicting],
            events=[incident.events],
            agent="replay_agents:AGENT",
            registry="replay_agents:TOOLS",
            all_seqs=True,
        )
    # replay of another activation of the key than the conflicting one sees it too
    result = replay(options(history.export(), conflicting, event=incident.sent[-1]))
    assert result.verdict is Verdict.USAGE_ERROR and where in result.error, result.error


def test_an_event_with_too_many_attributes_is_refused_by_ls_too(incident: Incident) -> None:
    bloated = TraceEvent()
    bloated.CopyFrom(incident.h.trace[0])
    for n in range(MAX_EVENT_ATTRIBUTES + 1):
        bloated.attributes[f"x.{n}"].int_value = n
    traces = incident.h.trace_bytes([bloated])
    with pytest.raises(InputError, match="more than the 4096 a trace event may have"):
        list_activations([traces])


def test_messages_are_scanned_as_they_are_and_read_as_the_stream_of_them(
    incident: Incident,
) -> None:
    history = incident.h
    as_messages = scan_traces([TraceMessages(tuple(history.trace))], KEY, seq=None)
    as_stream = scan_traces([history.trace_bytes()], KEY, seq=None)
    assert as_messages.seqs == as_stream.seqs and as_messages.kept_seq == as_stream.kept_seq
    assert as_messages.event_bytes == as_stream.event_bytes
    assert as_messages.history.keys() == as_stream.history.keys()
    other = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), key=b"someone-else")
    other.send(event_envelope(b"someone-else", "ask", b"hi", time_ms=T0))
    mixed = TraceMessages((*other.trace, *history.trace))
    assert scan_traces([mixed], KEY, seq=None).event_bytes == as_stream.event_bytes


def _activation_frames(seq: int, count: int, *, skip: int | None = None) -> bytes:
    from beam_agents._wire import varint
    from beam_agents.trace_events import serialize_trace_event

    out = b""
    for index in range(count):
        if index == skip:
            continue
        kind = TraceEvent.ACTIVATION_START if index == 0 else TraceEvent.TOOL_CALL
        if index == count - 1:
            kind = TraceEvent.ACTIVATION_END
        data = serialize_trace_event(
            TraceEvent(entity_key=KEY, seq=seq, index=index, kind=kind, name=f"e{index}")
        )
        out += varint(len(data)) + data
    return out


def test_first_events_stop_reading_once_the_first_rows_are_found() -> None:
    """The TUI's first rows: seq 2's first events, the trace read no further (a corrupt
    frame after them, which the whole scan refuses, is never reached)."""
    corrupt = b"\x05\xff\xff\xff\xff\xff"
    traces = _activation_frames(1, 50) + _activation_frames(2, 50) + corrupt
    got = first_events((traces,), KEY, 2, 10)
    assert [(e.seq, e.index) for e in got] == [(2, i) for i in range(10)]
    with pytest.raises(InputError):
        scan_traces((traces,), KEY, seq=2)


def test_first_events_of_a_short_activation_are_all_of_it() -> None:
    got = first_events((_activation_frames(1, 4),), KEY, 1, 500)
    assert [e.index for e in got] == [0, 1, 2, 3]
    assert got[-1].kind == TraceEvent.ACTIVATION_END


def test_first_events_are_the_unbroken_run_from_index_0() -> None:
    """An event missing from the trace: the rows before it only, none shown out of place."""
    got = first_events((_activation_frames(1, 20, skip=3),), KEY, 1, 10)
    assert [e.index for e in got] == [0, 1, 2]
