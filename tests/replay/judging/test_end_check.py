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
from beam_agents.replay.result import Mark, StopCause, UnseenWhy, Verdict
from beam_agents.testing import event_envelope
from beam_agents.trace_events import (
    ATTR_MEMORY_SHA256,
    ATTR_MEMORY_WRITES_SHA256,
    ATTR_OUTPUTS_SHA256,
    END_JUDGED_ATTRIBUTES,
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
    assert [f.path for f in div.fields] == [f"attributes[{ATTR_MEMORY_WRITES_SHA256!r}]"]
    assert "(changed 'last_status')" in result.reason
    assert result.memory is not None and result.memory.mark is Mark.DIFFERS
    assert result.outputs[0].mark is Mark.VERIFIED
    # The key named, with what production wrote (the snapshot's provenance says seq 1 wrote
    # it) and what the re-run wrote; then DeepDiff of that one value.
    assert (
        "changed: 'last_status': production set it to \"shipped\"; the re-run set it to "
        '"SHIPPED"' in div.detail
    )
    assert 'changed from "shipped" to "SHIPPED"' in div.detail
    writes = result.memory_writes
    assert writes is not None and writes.mark is Mark.DIFFERS
    assert writes.production is not None
    assert writes.production.set == {
        "last_event": {"seq": 1, "type": "ask"},
        "last_status": "shipped",
    }
    assert writes.replayed.set["last_status"] == "SHIPPED"


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


def test_a_memory_read_of_a_key_the_activation_writes_is_named_and_never_reproduced() -> None:
    # COUNTER does turns += 1: from the post-image it reads its own write (1), not the 0 the
    # original read. Every event matches, and so would a mutant: it is not judged (exit 3).
    history = KeyHistory(ra.COUNTER, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(history.export(), history.trace_bytes(), event=event, agent="replay_agents:COUNTER")
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3, result.reason
    assert result.stop is StopCause.MEMORY_UNSEEN
    read = "read 'turns', which this activation (seq 1) itself wrote"
    assert result.reason.startswith(f"not judged: the re-run {read}")
    assert [(r.key, r.why, r.seq) for r in result.unseen_reads] == [
        ("turns", UnseenWhy.OWN_WRITE, 1)
    ]
    lines = render_report(result).splitlines()
    assert lines[4].startswith(f"irreproducible (not judged: {read}")
    assert result_to_dict(result)["not_judged"].startswith(f"not judged: {read}")


def test_a_read_of_a_key_a_later_seq_rewrote_is_named_with_that_seq() -> None:
    history = KeyHistory(ra.COUNTER, ra.TOOLS, ra.make_provider())
    first = ask("one")
    history.send(first)
    history.send(ask("two", at=T0 + 1000))
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=first,
            seq=1,
            agent="replay_agents:COUNTER",
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE and result.exit_code == 3, result.reason
    assert result.unseen_reads[0].text == "read 'turns', which seq 2 rewrote"
    assert "a snapshot exported before seq 2 ran holds what seq 1 read" in result.reason


def test_a_changed_write_diverges_from_a_snapshot_taken_after_later_activations() -> None:
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
    # The snapshot holds seq 2's memory, but NOTES reads no key: what seq 1 wrote is judged.
    assert result.verdict is Verdict.DIVERGED and result.exit_code == 1, result.reason
    div = result.first_divergence
    assert div is not None and div.kind == "ACTIVATION_END"
    assert [f.path for f in div.fields] == [f"attributes[{ATTR_MEMORY_WRITES_SHA256!r}]"]
    # seq 2 rewrote both keys: the snapshot no longer says what seq 1 wrote, and says so.
    assert (
        "'last_status': the re-run set it to \"SHIPPED\"; whether production wrote it, and "
        "what, the snapshot cannot tell (seq 2 wrote it since)" in div.detail
    )
    assert result.memory_writes is not None and result.memory_writes.production is None


def test_the_same_writes_from_a_later_snapshot_reproduce_with_the_writes_verified() -> None:
    # AGENT writes a key per seq (and "last"), reading none: seq 2's key is in the snapshot.
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    first = ask("one")
    history.send(first)
    history.send(ask("two", at=T0 + 1000))
    result = replay(options(history.export(), history.trace_bytes(), event=first, seq=1))
    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert result.memory_writes is not None and result.memory_writes.mark is Mark.VERIFIED
    assert result.memory_writes.replayed.set == {"asked.0001": "one", "last": "one"}
    assert "its memory writes match the traced digest (2 key(s) set, 0 deleted)" in result.reason
    # The end memory is seq 2's plus the re-run's writes: reported, and said why it differs.
    assert result.memory is not None and result.memory.mark is Mark.DIFFERS
    why = "the snapshot holds the memory after seq 2, so the re-run started from another memory"
    assert result.memory_not_judged.startswith(why)
    line = next(x for x in render_report(result).splitlines() if "memory blob:" in x)
    assert f"(not judged: {why}" in line and "differs" not in line
    assert line.endswith(f"; traced sha256={result.memory.traced_sha256})")
    report = result_to_dict(result)
    assert report["memory"]["mark"] == "differs"
    assert report["memory_not_judged"] == result.memory_not_judged
    assert report["memory_writes"]["mark"] == "verified"


def _without(trace: list[TraceEvent], names: tuple[str, ...]) -> list[TraceEvent]:
    old = []
    for traced in trace:
        copy = TraceEvent()
        copy.CopyFrom(traced)
        for name in names:
            if name in copy.attributes:
                del copy.attributes[name]
        old.append(copy)
    return old


def test_a_trace_from_before_the_write_set_digest_judges_the_end_memory_as_before() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    old = history.trace_bytes(_without(history.trace, (ATTR_MEMORY_WRITES_SHA256,)))
    same = replay(options(history.export(), old, event=event, agent="replay_agents:NOTES"))
    assert same.verdict is Verdict.REPRODUCED, same.reason
    assert same.memory_writes is not None and same.memory_writes.mark is Mark.UNVERIFIABLE
    assert "memory writes: 2 key(s) set, 0 deleted" in render_report(same)
    assert "(not traced: the trace predates memory write digests" in render_report(same)
    other = replay(
        options(history.export(), old, event=event, agent="replay_agents:NOTES_OTHER_MEMORY")
    )
    assert other.verdict is Verdict.DIVERGED, other.reason
    assert other.first_divergence is not None
    assert [f.path for f in other.first_divergence.fields] == [
        f"attributes[{ATTR_MEMORY_SHA256!r}]"
    ]


@pytest.mark.parametrize("agent", ["AGENT_OTHER_OUTPUT", "AGENT"])
def test_a_trace_from_before_the_digests_replays_with_the_old_meaning(agent: str) -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    old = _without(history.trace, END_JUDGED_ATTRIBUTES)
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
    "corruption",
    ["no outputs digest", "no memory digest", "bytes digest", "unset digest", "writes alone"],
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
            elif corruption == "writes alone":  # the newest digest without the older two
                del copy.attributes[ATTR_OUTPUTS_SHA256]
                del copy.attributes[ATTR_MEMORY_SHA256]
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
        "writes alone": f"{ATTR_MEMORY_WRITES_SHA256!r} but not {ATTR_OUTPUTS_SHA256!r}",
    }[corruption]
    assert named in result.reason, result.reason
