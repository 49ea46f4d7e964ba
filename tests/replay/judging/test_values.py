"""Verified values: every mark (verified / differs / unverifiable) from real re-runs.

Histories are played through ``run_activation`` as the DoFn does (``KeyHistory``),
replayed through the engine, and rendered by the headless report, ``--json`` and
``--redact``; the demo test does the same on the Beam pipeline's incident.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents import canonical_json
from beam_agents._protos import AgentEnvelope
from beam_agents.activation import ActivationCommit
from beam_agents.replay.engine import replay
from beam_agents.replay.reporting.json_doc import render_json, result_to_dict
from beam_agents.replay.reporting.redact import redact
from beam_agents.replay.reporting.text import VALUE_WIDTH, render_report
from beam_agents.replay.result import Mark, ReplayResult, Value, Verdict
from beam_agents.testing import approval_envelope, event_envelope


def ask(text: str = "where is A1?", *, at: int = T0, type: str = "ask") -> AgentEnvelope:
    return event_envelope(KEY, type, text.encode(), time_ms=at)


def by_path(result: ReplayResult, index: int) -> dict[str, Value]:
    return {v.path: v for v in result.values if v.event_index == index}


def test_a_reproduced_run_has_every_traced_value_verified() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    original = history.send(event)
    assert isinstance(original, ActivationCommit)
    result = replay(
        options(history.export(), history.trace_bytes(), event=event, agent="replay_agents:NOTES")
    )
    assert result.verdict is Verdict.REPRODUCED, result.reason
    start, tool, call, end = (by_path(result, i) for i in range(4))
    assert start["envelope"].value["event"] == {"type": "ask", "payload": "where is A1?"}
    assert tool["args"].value == {"order_id": "A1"}
    assert tool["result"].value == {"order_id": "A1", "status": "shipped"}
    assert call["request.model"].value == ra.MODEL
    assert call["request.messages[0]"].value == {"role": "user", "content": "where is A1?"}
    assert call["response.text"].value == "answer to: where is A1?"
    assert end["outputs[0]"].value == "answer to: where is A1?"
    assert end["memory"].value["last_status"] == "shipped"
    assert {v.path: v.mark for v in result.values if v.mark is not Mark.VERIFIED} == {}
    # A verified value's digest is the traced one, and is the sha256 of what is shown.
    args = tool["args"]
    assert args.traced_digest == args.digest
    assert args.digest == hashlib.sha256(canonical_json.dumps(args.value)).hexdigest()


def test_a_tool_result_the_agent_edits_after_the_call_is_shown_as_the_tool_returned_it() -> None:
    """Hostile pass: the capture held the agent's own object, so an edit after the call
    marked a reproduced run's result 'differs', and a NaN put in it ended --json with an
    internal error."""
    history = KeyHistory(ra.NOTES_EDITS_RESULT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES_EDITS_RESULT",
        )
    )
    assert result.verdict is Verdict.REPRODUCED, result.reason
    tool = by_path(result, 1)
    assert tool["result"].value == {"order_id": "A1", "status": "shipped"}
    assert tool["result"].mark is Mark.VERIFIED
    assert json.loads(render_json(result))["verdict"] == "reproduced"


def test_a_changed_tool_result_differs_and_its_arguments_stay_verified() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES",
            registry="replay_agents:TOOLS_CHANGED_LOOKUP",
        )
    )
    assert result.verdict is Verdict.DIVERGED
    tool = by_path(result, 1)
    assert tool["args"].mark is Mark.VERIFIED
    assert tool["result"].mark is Mark.DIFFERS
    assert tool["result"].value["status"] == "lost in transit"
    assert tool["result"].traced_digest != tool["result"].digest
    report = render_report(result)
    assert '"status": "lost in transit"' in report
    assert "[differs: traced sha256=" in report and "args: " in report and "[verified]" in report


def test_a_changed_prompt_marks_the_message_that_differs_and_the_others_verified() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:AGENT_NEW_PROMPT",
        )
    )
    assert result.verdict is Verdict.IRREPRODUCIBLE
    call = by_path(result, 2)
    assert call["request"].mark is Mark.DIFFERS
    # The traced request's entry is still cached: its fingerprint marks each component.
    assert call["request.messages[0]"].mark is Mark.DIFFERS
    assert call["request.messages[0]"].value["content"] == "You are a terse support agent."
    assert call["request.messages[1]"].mark is Mark.VERIFIED
    assert call["request.model"].mark is Mark.VERIFIED


def test_a_failed_activation_shows_the_message_and_the_agent_frame() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask("oops", type="boom")
    history.send(event)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    assert result.verdict is Verdict.REPRODUCED, result.reason
    failed = by_path(result, len(result.events) - 1)
    assert failed["error.type"].value == "ValueError"
    assert failed["error.type"].mark is Mark.VERIFIED
    assert failed["error.message"].value == "cannot handle 'oops'"
    assert failed["error.message"].mark is Mark.UNVERIFIABLE  # no trace carries a message
    where = failed["error.raised_at"].value
    assert "replay_agents.py:" in where and "in start" in where and "raise ValueError" in where


def test_a_what_if_has_every_value_unverifiable() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    refund = ask("refund please", type="refund")
    suspended = history.send(refund)
    assert isinstance(suspended, ActivationCommit)
    intent = suspended.approval_requests[0].intent_id
    snapshot = history.export()
    result = replay(
        options(
            snapshot,
            history.trace_bytes(),
            event=approval_envelope(KEY, intent, approved=False, time_ms=T0 + 5000),
            what_if=True,
        )
    )
    assert result.verdict is Verdict.WHAT_IF, result.reason
    assert any(v.path == "outputs[0]" for v in result.values)
    assert result.values
    assert {v.mark for v in result.values} == {Mark.UNVERIFIABLE}


def test_json_carries_every_value_with_its_mark() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES",
            registry="replay_agents:TOOLS_CHANGED_LOOKUP",
        )
    )
    document = json.loads(json.dumps(result_to_dict(result)))
    rows = {(v["event_index"], v["path"]): v for v in document["values"]}
    assert len(rows) == len(result.values)
    assert rows[(1, "result")]["mark"] == "differs"
    assert rows[(1, "result")]["value"]["status"] == "lost in transit"
    assert rows[(1, "args")]["mark"] == "verified"
    assert rows[(1, "args")]["traced_digest"] == rows[(1, "args")]["digest"]


def test_redact_replaces_every_value_by_its_digest_and_keeps_the_verdict() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask("my secret order")
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES_OTHER_MEMORY",
        )
    )
    hidden = redact(result)
    assert (hidden.verdict, hidden.reason) == (result.verdict, result.reason)
    assert [v.mark for v in hidden.values] == [v.mark for v in result.values]
    report = render_report(hidden)
    document = json.dumps(result_to_dict(hidden))
    for secret in ("my secret order", "shipped", "SHIPPED"):
        assert secret not in report and secret not in document
    assert "sha256:" in report


def test_long_values_are_cut_and_printed_whole_on_request() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask("x" * 1000)
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES",
            registry="replay_agents:TOOLS_CHANGED_LOOKUP",
        )
    )
    # The divergence is the tool result; the long request text is shown at its own event.
    assert result.first_divergence is not None and result.first_divergence.index == 1
    long_value = next(v for v in result.values if v.path == "request.messages[0]")
    assert len(long_value.text) > VALUE_WIDTH
    from beam_agents.replay.reporting.text import value_text

    assert "more characters; --full-values prints all" in value_text(long_value)
    assert value_text(long_value, width=None) == long_value.text


def test_a_hostile_value_is_printed_escaped() -> None:
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask("\x1b[2J\u202eboom")
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:NOTES",
            registry="replay_agents:TOOLS_CHANGED_LOOKUP",
        )
    )
    from beam_agents.replay.reporting.text import value_lines

    shown = "\n".join(
        line for i in range(len(result.events)) for line in value_lines(result, i, width=None)
    )
    assert "boom" in shown and "\\x1b[2J" in shown and "\\u202e" in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    assert result.verdict is Verdict.DIVERGED  # the same verdict a plain text gets


def test_a_cache_miss_shows_the_replayed_request_with_the_differing_message_flagged() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(
            history.export(),
            history.trace_bytes(),
            event=event,
            agent="replay_agents:AGENT_NEW_PROMPT",
        )
    )
    assert result.cache_miss is not None
    report = render_report(result).split("  cache miss: ")[1]
    lines = report.splitlines()
    flagged = next(line for line in lines if "request.messages[0]" in line)
    assert flagged.lstrip().startswith("≠ ") and "You are a terse support agent." in flagged
    other = next(line for line in lines if "request.messages[1]" in line)
    assert not other.lstrip().startswith("≠") and "where is A1?" in other


def test_the_report_of_a_failed_activation_shows_the_message_and_the_line() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = ask("oops", type="boom")
    history.send(event)
    result = replay(options(history.export(), history.trace_bytes(), event=event))
    report = render_report(result)
    failure = report.split("  the re-run failed:\n")[1].splitlines()[:3]
    assert failure[0].strip() == "error.type: ValueError  [verified]"
    assert failure[1].strip() == "error.message: cannot handle 'oops'  [unverifiable]"
    assert "replay_agents.py:" in failure[2] and "raise ValueError" in failure[2]


def test_a_value_that_cannot_be_decoded_never_changes_the_verdict(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from beam_agents.replay import engine

    def broken(*_: object, **__: object) -> tuple[Value, ...]:
        raise UnicodeError("a value our decoder chokes on")

    monkeypatch.setattr(engine, "collect_values", broken)
    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(history.export(), history.trace_bytes(), event=event, agent="replay_agents:NOTES")
    )
    assert result.verdict is Verdict.REPRODUCED and result.exit_code == 0
    assert result.values == () and "a value our decoder chokes on" in result.values_error
    assert "values: not shown — decoding them failed (UnicodeError" in render_report(result)
    assert result_to_dict(result)["values_error"].startswith("UnicodeError")


def test_values_are_derived_when_read_and_read_the_same_every_time() -> None:
    """The engine keeps no ``Value`` (issue 14): each read derives them again, identically."""
    from beam_agents.replay.judging.values import ReplayValues
    from beam_agents.replay.result import ValueList, event_values

    history = KeyHistory(ra.NOTES, ra.TOOLS, ra.make_provider())
    event = ask()
    history.send(event)
    result = replay(
        options(history.export(), history.trace_bytes(), event=event, agent="replay_agents:NOTES")
    )
    values = result.values
    assert isinstance(values, ReplayValues) and isinstance(values, ValueList)
    eager = tuple(values)
    assert values == eager and len(values) == len(eager) and bool(values)
    assert [v for v in values] == list(eager) and values[-1] == eager[-1]
    assert values[0] is not values[0]  # derived again, not kept
    per_event = [event_values(values, i) for i in range(len(result.events))]
    assert tuple(v for vs in per_event for v in vs) == eager
    assert event_values(values, 2) == event_values(eager, 2)  # a tuple is filtered alike
    assert event_values(values, 2) is event_values(values, 2)  # one event's values are kept
    assert event_values(values, 99) == ()
    # The document and the redacted one read them lazily too, and say the same.
    assert (
        result_to_dict(result)["values"] == result_to_dict(replace(result, values=eager))["values"]
    )
    hidden = redact(result).values
    assert tuple(hidden) == tuple(redact(replace(result, values=eager)).values)
    assert event_values(hidden, 1) == tuple(v for v in hidden if v.event_index == 1)


# --- values hostile to the reports (hostile pass) ----------------------------------------------


def replay_of(agent: str, provider: object = None, **changes: object) -> ReplayResult:
    import value_agents as va

    history = KeyHistory(getattr(va, agent), ra.TOOLS, provider or ra.make_provider())
    event = ask()
    history.send(event)
    opts = options(
        history.export(), history.trace_bytes(), event=event, agent=f"value_agents:{agent}"
    )
    return replay(replace(opts, **changes))


def test_cached_tool_call_arguments_that_are_no_printable_json_are_shown_as_text() -> None:
    """NaN, 1e999, -Infinity or 400 levels in a cached response's tool-call arguments (the
    snapshot's bytes) ended --json with 'internal error: ValueError: Out of range float'."""
    import value_agents as va

    result = replay_of("ASKS", va.non_json_provider())

    assert result.verdict is Verdict.REPRODUCED, result.reason
    [calls] = [v for v in result.values if v.path == "response.tool_calls"]
    assert [c["arguments"] for c in calls.value] == list(va.NON_JSON_ARGUMENTS)
    document = json.loads(render_json(result))
    assert document["verdict"] == "reproduced"
    [shown] = [v for v in document["values"] if v["path"] == "response.tool_calls"]
    assert shown["value"] == [c for c in calls.value]


def test_a_non_finite_request_parameter_is_shown_as_text() -> None:
    result = replay_of("NAN_TEMPERATURE")

    assert result.verdict is Verdict.REPRODUCED, result.reason
    [params] = [v for v in result.values if v.path == "request.params"]
    assert params.value == {"temperature": "nan"}
    assert json.loads(render_json(result))["verdict"] == "reproduced"


def test_an_exceptions_text_is_taken_once_and_every_read_gives_the_same_values() -> None:
    """Values are derived when read: str() of an agent's exception (agent code) ran on every
    read, and one raising the second time ended the report with an internal error."""
    result = replay_of("SHIFTY")

    assert result.verdict is Verdict.REPRODUCED, result.reason
    assert by_path(result, 1)["error.message"].value == "the first str()"
    assert list(result.values) == list(result.values)
    document = json.loads(render_json(result))
    assert [v["value"] for v in document["values"] if v["path"] == "error.message"] == [
        "the first str()"
    ]


def test_an_exceptions_text_is_taken_within_the_time_limit() -> None:
    """str() of an agent's exception that never returns hung replay past --time-limit."""
    import value_agents as va

    va.RELEASE.clear()
    try:
        result = replay_of("STALLS", time_limit=0.3)
    finally:
        va.RELEASE.set()

    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert (
        "time limit of 0.3 s and was not judged: it had ended at event 1 (ACTIVATION_FAILED "
        "'value_agents.StallingError') of the 2 traced, but the text of an exception it raised (its __str__, agent code) did not "
        "come back" in result.reason
    ), result.reason
