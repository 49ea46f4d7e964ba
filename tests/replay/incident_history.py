"""A key with a start, a suspension, an approval and a result, another key beside it: an incident."""

from __future__ import annotations

import io

import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory

from beam_agents._protos import AgentEnvelope
from beam_agents.activation import ActivationCommit
from beam_agents.replay.incidents import bundle as bd
from beam_agents.replay.inputs.envelopes import write_envelope_stream
from beam_agents.testing import approval_envelope, event_envelope, tool_result_envelope

OTHER = b"customer-other"
AGENT = "replay_agents:AGENT"
TOOLS = "replay_agents:TOOLS"


def ask(text: str, at: int, type: str = "ask", key: bytes = KEY) -> AgentEnvelope:
    return event_envelope(key, type, text.encode(), time_ms=at)


def dump(envelopes: list[AgentEnvelope]) -> bytes:
    out = io.BytesIO()
    write_envelope_stream(out, [e.SerializeToString() for e in envelopes])
    return out.getvalue()


class Incident:
    """A key with a start, a suspension, an approval and a result; another key beside it."""

    def __init__(self) -> None:
        self.h = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
        self.sent: list[AgentEnvelope] = [ask("where is A1?", T0)]
        self.h.send(self.sent[0])
        refund = ask("refund please", T0 + 1000, "refund")
        first = self.h.send(refund)
        assert isinstance(first, ActivationCommit)
        intent = first.approval_requests[0].intent_id
        self.sent += [
            refund,
            approval_envelope(KEY, intent, approved=True, time_ms=T0 + 2000),
            tool_result_envelope(KEY, intent, time_ms=T0 + 3000, payload=b"{}"),
        ]
        for envelope in self.sent[2:]:
            self.h.send(envelope)
        self.other = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), key=OTHER)
        self.other_sent = [ask("hello", T0, key=OTHER)]
        self.other.send(self.other_sent[0])
        self.snapshot = self.h.export()
        self.traces = self.other.trace_bytes() + self.h.trace_bytes()
        self.events = dump([*self.other_sent, *reversed(self.sent)])

    def make(self, **kw: object) -> bytes:
        args: dict[str, object] = dict(
            snapshot=self.snapshot,
            traces=[self.traces],
            events=[self.events],
            agent=AGENT,
            registry=TOOLS,
        )
        args.update(kw)
        return bd.make_bundle(**args)  # type: ignore[arg-type]
