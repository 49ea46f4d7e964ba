"""Outputs and memory traced as digests on ACTIVATION_END, and judged by replay.

Histories are played through ``run_activation`` as the DoFn does (``KeyHistory``);
the end-to-end tests run the same through Beam.
"""

from __future__ import annotations

import hashlib

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents import canonical_json
from beam_agents._protos import AgentEnvelope, TraceEvent
from beam_agents.activation import ActivationCommit
from beam_agents.cli import main
from beam_agents.replay.engine import replay
from beam_agents.replay.reporting.json_doc import result_to_dict
from beam_agents.replay.reporting.text import render_report
from beam_agents.replay.result import Mark, Verdict
from beam_agents.testing import event_envelope
from beam_agents.trace_events import (
    ATTR_MEMORY_SHA256,
    ATTR_OUTPUTS_SHA256,
    END_DIGEST_ATTRIBUTES,
)


def ask(text: str = "where is A1?", *, at: int = T0, type: str = "ask") -> AgentEnvelope:
    return event_envelope(KEY, type, text.encode(), time_ms=at)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_activation_end_carries_each_output_and_the_memory_digest() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    result = history.send(ask())
    assert isinstance(result, ActivationCommit)
    end = result.trace[-1]
    assert end.kind == TraceEvent.ACTIVATION_END
    assert end.attributes[ATTR_OUTPUTS_SHA256].string_value == sha(result.outputs[0])
    memory_json = canonical_json.dumps(result.state.memory)
    assert end.attributes[ATTR_MEMORY_SHA256].string_value == sha(memory_json)


def test_a_changed_output_diverges_at_activation_end_with_the_output_shown() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    original = history.send(event)
    assert isinstance(original, ActivationCommit)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:AGENT_OTHER_OUTPUT",
        )
    )
    assert result.verdict is Verdict.DIVERGED and result.exit_code == 1, result.reason
    div = result.first_divergence
    assert div is not None and div.kind == "ACTIVATION_END"
    assert div.index == len(original.trace) - 1
    assert [f.path for f in div.fields] == [f"attributes[{ATTR_OUTPUTS_SHA256!r}]"]
    assert result.outputs[0].mark is Mark.DIFFERS
    assert result.outputs[0].traced_sha256 == sha(original.outputs[0])
    # Every earlier event matched: the change is only in the output bytes, shown as a value.
    assert [p.differs for p in result.events] == [False] * (len(result.events) - 1) + [True]
    shown = original.outputs[0].upper().decode()
    assert shown in div.detail
    report = render_report(result)
    assert "first divergence: event" in report and "ACTIVATION_END" in report
    assert "outputs[0]: " in report and "(differs: traced sha256=" in report


def test_a_changed_memory_write_diverges_at_activation_end_with_a_structured_diff() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES_OTHER_MEMORY",
        )
    )
    assert result.verdict is Verdict.DIVERGED and result.exit_code == 1, result.reason
    div = result.first_divergence
    assert div is not None and div.kind == "ACTIVATION_END"
    assert [f.path for f in div.fields] == [f"attributes[{ATTR_MEMORY_SHA256!r}]"]
    assert result.memory is not None and result.memory.mark is Mark.DIFFERS
    assert result.outputs[0].mark is Mark.VERIFIED
    # DeepDiff's before -> after, naming the key and both values.
    assert "root['last_status']" in div.detail
    assert 'changed from "shipped" to "SHIPPED"' in div.detail
    assert "it is what production committed" in div.detail


def test_the_same_blind_writes_replay_with_memory_verified() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(history.export(), history.trace_bytes(), event=event, agent="replay_agents:NOTES")
    )
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.memory is not None and result.memory.mark is Mark.VERIFIED
    assert [o.mark for o in result.outputs] == [Mark.VERIFIED]
    report = render_report(result)
    assert "memory blob: " in report and "(matches the traced digest)" in report


def test_a_memory_read_of_a_key_the_activation_writes_is_reported_not_judged() -> None:
    # SupportAgent does turns += 1: from the post-image it writes 2 where production wrote 1.
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.memory is not None and result.memory.mark is Mark.DIFFERS
    assert "not judged" in result.reason and "'turns'" in result.reason


def test_a_snapshot_taken_after_later_activations_does_not_judge_memory() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    first = ask("one")
    history.send(first)
    history.send(ask("two", at=T0 + 1000, type="other"))
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=first,
            seq=1,
            agent="replay_agents:NOTES_OTHER_MEMORY",
        )
    )
    # The snapshot holds seq 2's memory: seq 1's re-run cannot be compared with its digest.
    assert result.verdict is Verdict.REPRODUCED, result.reason
    why = "the snapshot holds the memory after seq 2, not the memory this activation committed"
    assert f"memory not judged: {why}" in result.reason
    # The report's memory line leads with "not judged" and why; the mark stays DIFFERS (the
    # digests do differ) and --json says why in memory_not_judged.
    assert result.memory is not None and result.memory.mark is Mark.DIFFERS
    assert result.memory_not_judged.startswith(why)
    line = next(x for x in render_report(result).splitlines() if "memory blob:" in x)
    assert f"(not judged: {why}" in line and "differs" not in line
    assert line.endswith(f"; traced sha256={result.memory.traced_sha256})")
    report = result_to_dict(result)
    assert report["memory"]["mark"] == "differs"
    assert report["memory_not_judged"] == result.memory_not_judged


@pytest.mark.parametrize("agent", ["AGENT_OTHER_OUTPUT", "AGENT"])
def test_a_trace_from_before_the_digests_replays_with_the_old_meaning(agent: str) -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    old = []
    for traced in history.trace:
        copy = TraceEvent()
        copy.CopyFrom(traced)
        for name in END_DIGEST_ATTRIBUTES:
            if name in copy.attributes:
                del copy.attributes[name]
        old.append(copy)
    result = replay(
        options(
            history.export(), history.trace_bytes(old), event=event, agent=f"replay_agents:{agent}"
        )
    )
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert not result.end_digests_traced
    assert result.memory is not None and result.memory.mark is Mark.UNVERIFIABLE
    assert [o.mark for o in result.outputs] == [Mark.UNVERIFIABLE]
    report = render_report(result)
    assert report.count("not traced: the trace predates output and memory digests") == 2


def test_the_cli_exits_1_for_a_changed_output(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    (tmp_path / "s.pb").write_bytes(history.export())
    (tmp_path / "t.pb").write_bytes(history.trace_bytes())
    (tmp_path / "e.pb").write_bytes(event.SerializeToString())
    code = main(
        [
            "--snapshot", str(tmp_path / "s.pb"),
            "--traces", str(tmp_path / "t.pb"),
            "--event", str(tmp_path / "e.pb"),
            "--agent", "replay_agents:AGENT_OTHER_OUTPUT",
            "--registry", "replay_agents:TOOLS",
        ]
    )  # fmt: skip
    assert code == 1
    assert "diverged" in capsys.readouterr().out


@pytest.mark.parametrize(
    "corruption", ["no outputs digest", "no memory digest", "bytes digest", "unset digest"]
)
def test_an_activation_end_with_half_its_digests_is_refused_not_reproduced(
    corruption: str,
) -> None:
    """One flipped bit can drop one digest; judging the rest made a changed output exit 0."""
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    events = []
    for traced in history.trace:
        copy = TraceEvent()
        copy.CopyFrom(traced)
        if copy.kind == TraceEvent.ACTIVATION_END:
            if corruption == "no outputs digest":
                del copy.attributes[ATTR_OUTPUTS_SHA256]
            elif corruption == "no memory digest":
                del copy.attributes[ATTR_MEMORY_SHA256]
            elif corruption == "unset digest":  # the name is there, its value is not
                copy.attributes[ATTR_MEMORY_SHA256].Clear()
            else:
                text = copy.attributes[ATTR_OUTPUTS_SHA256].string_value
                copy.attributes[ATTR_OUTPUTS_SHA256].bytes_value = text.encode()
        events.append(copy)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(events),
            event=event,
            agent="replay_agents:AGENT_OTHER_OUTPUT",  # its output differs from production's
        )
    )
    assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2, result.reason
    assert "ACTIVATION_END holding" in result.reason and "corrupt or edited" in result.reason
    named = {
        "no outputs digest": f"{ATTR_MEMORY_SHA256!r} but not {ATTR_OUTPUTS_SHA256!r}",
        "no memory digest": f"{ATTR_OUTPUTS_SHA256!r} but not {ATTR_MEMORY_SHA256!r}",
        "bytes digest": f"{ATTR_OUTPUTS_SHA256!r} as bytes_value, not text",
        "unset digest": f"{ATTR_MEMORY_SHA256!r} as unset, not text",
    }[corruption]
    assert named in result.reason, result.reason
