"""Re-sending a dead letter from a real pipeline run: ``ErrorRecord.resend_envelope`` stamps
the re-send's time, so the activation runs now (its HITL deadline, its intents' expiry and
its retries count from the re-send), not on the clock the envelope first had."""

from __future__ import annotations

from pathlib import Path

from agents import make_provider
from pipeline_harness import OTHER, T0, Watermark, run_agent

from beam_agents import AgentConfig, HitlPolicy, RetryPolicy
from beam_agents._protos import AgentEnvelope
from beam_agents.pipeline import ErrorRecord
from beam_agents.testing import event_envelope

DAY_MS = 86_400_000
FLAKY_KEY = b"customer-flaky"
NOW = T0 + 2 * DAY_MS
"""When the operator re-sends: two days after the outage, the provider long healthy."""


def test_a_dead_letter_re_sent_with_a_new_event_time_runs_on_the_re_sends_clock(
    tmp_path: Path,
) -> None:
    hitl = HitlPolicy(intent_ttl_ms=DAY_MS, hitl_timeout_ms=3_600_000)
    config = AgentConfig(
        provider_factory=make_provider,
        retry=RetryPolicy(max_attempts=2, jitter=0),
        inbox_limit=1,
        hitl=hitl,
    )
    # First life: the model is rate limited for a day (both attempts fail), and a refund
    # finds the inbox of its suspended key full.
    first = run_agent(
        "streaming",
        [
            event_envelope(FLAKY_KEY, "flaky", f"until={T0 + DAY_MS}".encode(), time_ms=T0,
                           envelope_id="m-flaky"),
            event_envelope(OTHER, "act", b"A-1", time_ms=T0, envelope_id="m-act"),
            event_envelope(OTHER, "refund", b"A-2", time_ms=T0 + 1, envelope_id="m-queued"),
            event_envelope(OTHER, "refund", b"A-3", time_ms=T0 + 2, envelope_id="m-refund"),
            Watermark(T0 + 60_000),
        ],
        tmp_path / "first",
        config=config,
    )
    topic = [e.to_json_bytes() for e in first.errors if e.code != "rejected_trigger"]
    records = {r.envelope_id: r for r in map(ErrorRecord.from_json_bytes, topic)}
    assert records["m-flaky"].code == "retries_exhausted"
    assert records["m-refund"].code == "inbox_overflow"

    resent = [
        AgentEnvelope.FromString(records[eid].resend_envelope(event_time_ms=NOW))
        for eid in ("m-flaky", "m-refund")
    ]
    assert [e.event_time_ms for e in resent] == [NOW, NOW]
    assert [e.envelope_id for e in resent] == ["m-flaky", "m-refund"]
    again = run_agent("streaming", [Watermark(NOW), *resent], tmp_path / "again", config=config)

    # The flaky call runs at NOW, past the rate limit: it commits (on its old clock it
    # would have failed twice again, its retry due at once).
    assert again.errors == []
    [flaky_output] = again.outputs_of(FLAKY_KEY)
    assert flaky_output.startswith(b"1:flaky:") and f"at={NOW}".encode() in flaky_output
    # The refund's intent expires a day after the re-send, and the HITL timeout resumes
    # the key an hour after it (on its old clock both were long past).
    [approval] = again.approvals_of(OTHER)
    assert approval.expires_at_ms == NOW + DAY_MS
    assert again.outputs_of(OTHER) == [f"2:timeout:{NOW + 3_600_000}".encode()]
