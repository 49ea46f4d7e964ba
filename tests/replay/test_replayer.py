"""Replayer: the Python caller's replay, with the agent as an object and inputs as messages."""

from __future__ import annotations

import dataclasses

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import StateSnapshot
from beam_agents.activation import ActivationCommit
from beam_agents.errors import ConfigError
from beam_agents.replay import Replayer, Verdict, replay
from beam_agents.testing import event_envelope


def ask(text: str = "where is A1?", *, at: int = T0) -> object:
    return event_envelope(KEY, "ask", text.encode(), time_ms=at)


@pytest.fixture
def history() -> KeyHistory:
    return KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())


def test_messages_in_the_same_result_out_as_the_command_line(history: KeyHistory) -> None:
    event = ask()
    assert isinstance(history.send(event), ActivationCommit)
    snapshot = StateSnapshot.FromString(history.export())
    replayer = Replayer(agent=ra.AGENT, registry=ra.TOOLS)
    ours = replayer.replay(snapshot, list(history.trace), event)
    cli = replay(options(history.export(), history.trace_bytes(), event=event))
    assert ours.verdict is Verdict.REPRODUCED and ours.exit_code == 0, ours.reason
    assert ours.reason == cli.reason
    assert ours.events == cli.events and ours.state == cli.state and ours.values == cli.values
    # Only the header's names for the agent and registry differ: objects, not paths.
    assert ours.header.agent_path == "replay_agents:SupportAgent instance"
    assert cli.header.agent_path == "replay_agents:AGENT"
    strip = {"agent_path": "", "registry_path": ""}
    assert dataclasses.replace(ours.header, **strip) == dataclasses.replace(cli.header, **strip)


def test_a_changed_agent_diverges_and_bad_input_is_a_result_not_an_exception(
    history: KeyHistory,
) -> None:
    event = ask()
    history.send(event)
    changed = Replayer(agent=ra.AGENT_OTHER_OUTPUT, registry=ra.TOOLS, agent_label="v2")
    result = changed.replay(history.export(), history.trace_bytes(), event.SerializeToString())
    assert result.verdict is Verdict.DIVERGED and result.exit_code == 1
    assert result.header.agent_path == "v2"
    broken = Replayer(agent=ra.AGENT, registry=ra.TOOLS).replay(b"not a snapshot", [], event)
    assert broken.verdict is Verdict.USAGE_ERROR and broken.exit_code == 2
    assert "StateSnapshot" in broken.error and "internal error" not in broken.error


def test_the_replayer_refuses_a_path_where_an_object_belongs() -> None:
    with pytest.raises(ConfigError, match=r"agent= must be an instance of Agent, got str"):
        Replayer(agent="replay_agents:AGENT", registry=ra.TOOLS)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="registry= must be an instance of ToolRegistry"):
        Replayer(agent=ra.AGENT, registry=[ra.TOOLS])  # type: ignore[arg-type]


def test_an_input_of_the_wrong_type_is_a_usage_error_naming_it_not_an_internal_error(
    history: KeyHistory,
) -> None:
    # An int event was 'internal error: TypeError: expected str, bytes or os.PathLike' ("a bug").
    event = ask()
    history.send(event)
    replayer = Replayer(agent=ra.AGENT, registry=ra.TOOLS)
    for snapshot, event_arg, message in (
        (history.export(), 42, "Replayer.replay event= must be an AgentEnvelope, its bytes, a file path, or None, got int: 42"),
        (event, event, "Replayer.replay snapshot= must be a StateSnapshot, its bytes, or a file path, got AgentEnvelope"),
        (history.export(), StateSnapshot(), "Replayer.replay event= must be an AgentEnvelope"),
    ):
        result = replayer.replay(snapshot, history.trace_bytes(), event_arg)  # type: ignore[arg-type]
        assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2
        assert result.error.startswith(message) and "internal error" not in result.error


def test_messages_go_straight_into_the_engine_never_serialized_to_be_parsed_again(
    history: KeyHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replayer serialized the snapshot, the envelope and the trace events only to parse them
    again; the parsers are not reached now, and the result is the one bytes give."""
    from beam_agents.replay.inputs import envelopes, snapshot, traces

    event = ask()
    history.send(event)
    message = StateSnapshot.FromString(history.export())
    replayer = Replayer(agent=ra.AGENT, registry=ra.TOOLS)
    from_bytes = replayer.replay(history.export(), history.trace_bytes(), event.SerializeToString())

    def unreachable(*args: object, **kwargs: object) -> None:
        raise AssertionError("a message was serialized to be parsed again")

    monkeypatch.setattr(snapshot, "load_snapshot_for_replay", unreachable)
    monkeypatch.setattr(envelopes, "read_source", unreachable)
    monkeypatch.setattr(traces, "read_trace_frames", unreachable)
    from_messages = replayer.replay(message, list(history.trace), event)
    assert from_messages.verdict is Verdict.REPRODUCED, from_messages.error
    assert from_messages == from_bytes
    # The agent gets a copy of the event: the caller's message is not handed to agent code.
    assert event.envelope_id and from_messages.header.envelope_id == event.envelope_id
