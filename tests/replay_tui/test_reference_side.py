"""Production's values (a reference run's, proved) beside the re-run's: every renderer shows
them, escaped, and ``--redact`` turns them into digests. Results made by hand: the engine's
own, on the demo's incident, are in tests/test_demo.py."""

from __future__ import annotations

from dataclasses import replace

import tui_results

from beam_agents.replay.reporting.json_doc import result_to_dict
from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.reporting.redact import redact
from beam_agents.replay.reporting.text import render_report
from beam_agents.replay.result import Mark, ReferenceRun, ReplayResult, Value
from replay_tui.render.detail import detail_lines


def value(index: int, path: str, text: str, mark: Mark) -> Value:
    return Value(event_index=index, path=path, value=text, text=text, mark=mark, digest="d" * 64)


def with_reference(
    result: ReplayResult, *theirs: Value, mine: tuple[Value, ...] = ()
) -> ReplayResult:
    reference = ReferenceRun(
        agent_path="prod.agent:AGENT",
        source="--reference",
        seq=1,
        verdict="reproduced",
        reason="all events match",
        values={(v.event_index, v.path): v for v in theirs},
    )
    return replace(result, values=mine, reference=reference)


def diverged() -> ReplayResult:
    return with_reference(
        tui_results.diverged_result(),
        value(2, "result", "order A1 shipped", Mark.VERIFIED),
        value(2, "error.type", "\x1b[2Jhostile", Mark.VERIFIED),
        mine=(value(2, "result", "order A1 delayed", Mark.DIFFERS),),
    )


def test_the_report_shows_both_sides_at_the_first_divergence_escaped() -> None:
    report = render_report(diverged())
    assert "      result: traced order A1 shipped ✓ | replayed order A1 delayed ≠\n" in report
    # Production had a value where the re-run has none: shown, escaped, never raw.
    assert "      error.type: traced \\x1b[2Jhostile ✓ | replayed (none)\n" in report
    assert "\x1b" not in report
    assert "  reference: prod.agent:AGENT (--reference): reproduced; 2 of its values" in report


def test_redact_shows_the_references_values_as_digests_only() -> None:
    redacted = redact(diverged())
    report = render_report(redacted)
    assert "shipped" not in report and "hostile" not in report
    assert f"traced sha256:{'d' * 64} ✓" in report
    document = result_to_dict(redacted)
    assert all(v["value"] is None for v in document["reference"]["values"])


def test_the_json_document_carries_the_reference_and_its_values() -> None:
    document = result_to_dict(diverged())
    reference = document["reference"]
    assert reference["verdict"] == "reproduced" and reference["agent"] == "prod.agent:AGENT"
    assert {(v["event_index"], v["path"]) for v in reference["values"]} == {
        (2, "result"),
        (2, "error.type"),
    }


def test_the_markdown_report_has_a_traced_replayed_table_at_the_divergence() -> None:
    markdown = report_markdown(diverged())
    assert "| `result` | `order A1 shipped` ✓ | `order A1 delayed` ≠ |" in markdown
    assert "\x1b" not in markdown


def test_the_detail_pane_shows_productions_value_beside_the_replayed_one() -> None:
    result = diverged()
    text = "\n".join(line.plain for line in detail_lines(result, result.events[2], 140))
    assert "≠ differs      result order A1 delayed   traced order A1 shipped ✓" in text
    assert "✓ traced       error.type \\x1b[2Jhostile   replayed (none)" in text
    assert "\x1b" not in text


def test_a_cache_miss_shows_productions_request_component_under_the_replayed_one() -> None:
    miss = tui_results.cache_miss_result()
    result = with_reference(
        miss,
        value(1, "request.messages[1]", "hello", Mark.VERIFIED),
        mine=(value(1, "request.messages[1]", "hello again", Mark.DIFFERS),),
    )
    report = render_report(result)
    assert "    ≠ request.messages[1]: hello again\n        traced: hello ✓\n" in report
