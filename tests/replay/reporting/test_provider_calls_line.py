"""The header's ``provider calls:`` line on a divergence (issue 27): each call is a miss,
so a diverged re-run that reached the provider also stopped there, and the line says so
(``provider calls: 1`` beside ``diverged`` read as a live model call)."""

from __future__ import annotations

import dataclasses

import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents.replay.engine import replay
from beam_agents.replay.reporting.text import render_report
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope


def test_provider_calls_on_a_divergence_say_the_rerun_also_stopped_at_a_miss() -> None:
    h = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"hi", time_ms=T0)
    h.send(event)
    result = replay(options(h.export(), h.trace_bytes(), event=event))
    diverged = dataclasses.replace(result, verdict=Verdict.DIVERGED, provider_calls=1)
    line = next(
        line for line in render_report(diverged).splitlines() if "provider calls:" in line
    )
    assert line.startswith("  provider calls: 1 (each one a miss")
    assert "also stopped at a model call" in line
    plain = next(line for line in render_report(result).splitlines() if "provider calls:" in line)
    assert plain == "  provider calls: 0"
