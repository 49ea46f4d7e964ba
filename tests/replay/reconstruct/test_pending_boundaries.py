"""The boundary of rebuilding an older activation's pending intents (issue #17), without Beam.

``KeyHistory`` runs the key's activations exactly as the DoFn does (see
``replay_harness``); ``test_pending_reconstruction`` does the main scenario
through a real pipeline. Here: how far back ``snapshot.resumed_from`` reaches
(8 resumes), what the traces must then show, HITL timeouts that lapse an earlier
intent, a failed resume, and copies that disagree with the traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pending_agents as pa
import pytest
from replay_harness import T0, KeyHistory, options

from beam_agents._protos import AgentEnvelope, StateSnapshot, ToolResult
from beam_agents.activation import ActivationResult
from beam_agents.agent import Timeout
from beam_agents.context import derive_intent_id
from beam_agents.replay.engine import replay
from beam_agents.replay.result import ReplayResult, Verdict
from beam_agents.testing import approval_envelope, event_envelope, tool_result_envelope

KEY = b"customer-boundary"
REFUND = derive_intent_id(KEY, 1, 0)
NOTE = derive_intent_id(KEY, 2, 0)
AGENT = "pending_agents:AGENT"
TOOLS = "pending_agents:TOOLS"


WAIT = event_envelope(KEY, "wait", REFUND.encode(), time_ms=T0 + 1000)


@dataclass
class Keys(KeyHistory):
    """A ``KeyHistory`` that keeps every envelope it ran, by envelope id."""

    sent: dict[str, AgentEnvelope] = field(default_factory=dict)

    def send(self, trigger: AgentEnvelope | Timeout) -> ActivationResult:
        if isinstance(trigger, AgentEnvelope):
            self.sent[trigger.envelope_id] = trigger
        return super().send(trigger)


def history() -> Keys:
    """seq 1 stages the refund; seq 2 starts and suspends awaiting it and a note."""
    keys = Keys(pa.AGENT, pa.TOOLS, pa.make_provider(), key=KEY)
    keys.send(event_envelope(KEY, "stage", b"refund", time_ms=T0))
    keys.send(WAIT)
    return keys


def approve(keys: Keys, intent_id: str, at: int) -> None:
    keys.send(approval_envelope(KEY, intent_id, approved=True, time_ms=at))


def settle(keys: Keys) -> None:
    """seq 3 approves the refund (the key stays suspended), seq 4 ends it with the note's result."""
    approve(keys, REFUND, T0 + 2000)
    keys.send(tool_result_envelope(KEY, NOTE, time_ms=T0 + 3000, payload=b"{}"))


def more_resumes(keys: Keys, pairs: int) -> None:
    """``pairs`` times: a start staging a refund, then its approval (a resume)."""
    for n in range(pairs):
        at = T0 + 10_000 + 2000 * n
        keys.send(event_envelope(KEY, "stage", f"more {n}".encode(), time_ms=at))
        approve(keys, derive_intent_id(KEY, keys.seq, 0), at + 1000)


def replay_seq(
    keys: Keys,
    seq: int,
    *,
    snapshot: bytes | None = None,
    seqs: set[int] | None = None,
) -> ReplayResult:
    trace = [e for e in keys.trace if seqs is None or e.seq in seqs]
    event = None
    start = next(e for e in keys.trace if e.seq == seq and e.index == 0)
    if start.attributes["beam_agents.trigger"].string_value != "timeout":
        event = keys.sent[start.attributes["beam_agents.envelope_id"].string_value]
    return replay(
        options(
            snapshot or keys.export(),
            keys.trace_bytes(trace),
            event=event,
            agent=AGENT,
            registry=TOOLS,
            seq=seq,
        )
    )


def every_seq_reproduces(keys: Keys) -> None:
    for seq in range(1, keys.seq + 1):
        result = replay_seq(keys, seq)
        assert result.verdict is Verdict.REPRODUCED, (seq, result.reason, result.error)


def test_the_earlier_intent_comes_from_the_record_of_the_resume_that_approved_it() -> None:
    keys = history()
    settle(keys)
    every_seq_reproduces(keys)


@pytest.mark.parametrize(
    ("pairs", "expected"), [(6, Verdict.REPRODUCED), (7, Verdict.IRREPRODUCIBLE)]
)
def test_it_holds_while_the_approving_resume_is_among_the_8_records_kept(
    pairs: int, expected: Verdict
) -> None:
    # Resumes at seqs 3, 4 and one per pair: with 6 pairs, seq 3's record is the oldest
    # kept; with 7 it has rolled off, and the refund's bytes are in no input.
    keys = history()
    settle(keys)
    more_resumes(keys, pairs)
    result = replay_seq(keys, 2)
    assert result.verdict is expected, (result.reason, result.error)
    if expected is Verdict.IRREPRODUCIBLE:
        assert REFUND in result.error and "resolved at seq 3" in result.error
        assert "rolled out of snapshot.resumed_from" in result.error
        assert "export the key sooner" in result.error
        assert result.header.seq == 2 and result.header.kind == "start"
        assert result.exit_code == 3


def test_rolled_off_resumes_that_resolved_nothing_pending_at_the_target_do_not_matter() -> None:
    # Seq 1 staged the refund itself: its approval at seq 3 cannot have been pending before.
    keys = history()
    settle(keys)
    more_resumes(keys, 8)
    assert replay_seq(keys, 1).verdict is Verdict.REPRODUCED


def test_when_the_rolled_off_window_is_not_traced_it_names_the_seqs_to_pass() -> None:
    keys = history()
    settle(keys)
    more_resumes(keys, 8)
    traced = set(range(1, keys.seq + 1)) - {3, 4, 5}
    result = replay_seq(keys, 1, seqs=traced)
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.error
    assert "pass the traces of seqs 3-5" in result.error.lower()


def test_a_hitl_timeout_that_lapsed_the_earlier_intent() -> None:
    keys = history()
    keys.fire_timeout()  # seq 3: lapses the refund (awaited, still awaiting approval)
    every_seq_reproduces(keys)
    more_resumes(keys, 8)
    result = replay_seq(keys, 2)
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert REFUND in result.error and "resolved at seq 3" in result.error


def test_a_failed_resume_sees_the_earlier_intent_too() -> None:
    keys = history()
    failed = keys.send(
        tool_result_envelope(KEY, NOTE, time_ms=T0 + 1500, status=ToolResult.ERROR, error="x")
    )
    assert failed.trace[-1].name == "RuntimeError"  # seq 3 failed: committed nothing
    settle(keys)  # seq 4 approves the refund, seq 5 ends it
    result = replay_seq(keys, 3)
    assert result.verdict is Verdict.REPRODUCED, (result.reason, result.error)
    assert result.header.continuation_source == "snapshot.resumed_from[seq=4]"
    every_seq_reproduces(keys)


def test_a_copy_that_disagrees_with_the_traced_staging_is_another_history() -> None:
    keys = history()
    settle(keys)
    snapshot = StateSnapshot.FromString(keys.export())
    snapshot.resumed_from[0].pending[0].args = b'{"amount_cents":50000,"order_id":"A1"}'
    edited = snapshot.SerializeToString(deterministic=True)
    result = replay_seq(keys, 2, snapshot=edited)
    assert result.verdict is Verdict.USAGE_ERROR and result.exit_code == 2
    assert f"pending intent {REFUND!r} in snapshot.resumed_from[seq=3]" in result.error
    assert "its args_sha256 is" in result.error
    # Without the staging activation's trace nothing contradicts the copy, and the
    # target's own trace does not depend on the intent's arguments.
    result = replay_seq(keys, 2, snapshot=edited, seqs={2, 3, 4})
    assert result.verdict is Verdict.REPRODUCED, result.error


def test_a_failed_resume_after_which_the_history_rolled_over_names_the_lost_intent() -> None:
    # Approvals release intents without ending the suspension: nine of them after a failed
    # resume push the record of the first (which resolved an intent pending at the
    # failure) out of resumed_from, while the continuation itself is still known.
    keys = Keys(pa.AGENT, pa.TOOLS, pa.make_provider(), key=KEY)
    keys.send(event_envelope(KEY, "stage_many", b"9", time_ms=T0))
    first = derive_intent_id(KEY, 1, 0)
    keys.send(event_envelope(KEY, "wait", first.encode(), time_ms=T0 + 1000))
    keys.send(
        tool_result_envelope(KEY, NOTE, time_ms=T0 + 1500, status=ToolResult.ERROR, error="x")
    )
    for n in range(9):
        approve(keys, derive_intent_id(KEY, 1, n), T0 + 2000 + n)  # seqs 4-12
    assert replay_seq(keys, 5).verdict is Verdict.REPRODUCED  # its own record is the oldest kept
    # Seq 4's record has rolled off: it is gone, not a failed resume to rebuild (a later
    # record holds the same continuation, but not the pending list seq 4 saw).
    result = replay_seq(keys, 4)
    assert result.verdict is Verdict.IRREPRODUCIBLE, (result.reason, result.error)
    assert "is no longer in the snapshot" in result.error
    result = replay_seq(keys, 3)
    assert result.verdict is Verdict.IRREPRODUCIBLE, (result.reason, result.error)
    assert f"{first!r} (resolved at seq 4)" in result.error
    assert result.header.kind == "resume" and result.header.seq == 3
