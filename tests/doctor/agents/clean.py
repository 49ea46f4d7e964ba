"""A replay-safe agent that brushes past every cause without falling into one.

It times itself (a duration, never traced) and logs (the log stamps its records); its
clock is ctx.now_ms, its randomness ctx.random; it iterates a set sorted; its memory is
a seq-stamped log read below its own seq; the tool that reads the environment and the
clock is recorded; a plain tool computes from its arguments only.
"""

from __future__ import annotations

import logging
import os
import time

from beam_agents import Agent, Done, ToolRegistry, tool
from tests.doctor.agents.common import ask

TOPICS = {"billing", "refund", "shipping", "warranty", "returns"}
log = logging.getLogger(__name__)


@tool(recorded=True)
def desk_status() -> dict:
    """Reads the desk's live state: recorded, so replay serves it."""
    return {"region": os.environ.get("DOCTOR_CORPUS_REGION", "eu"), "at": int(time.time())}


@tool
def word_count(text: str) -> int:
    return len(text.split())


class CleanAgent(Agent):
    def start(self, ctx, event):
        started = time.monotonic()
        text = event.payload.decode()
        # One key per turn, read by name (docs/agent-api.md): replay judges memory per key.
        history = [ctx.memory[f"turn.{s}"] for s in range(1, ctx.seq) if f"turn.{s}" in ctx.memory]
        desk = ctx.call("desk_status")
        words = ctx.call("word_count", text=text)
        pick = ctx.random.choice(sorted(TOPICS))
        prompt = (
            f"at {ctx.now_ms} in {desk['region']}, turn {len(history)}, {words} words, "
            f"topics {', '.join(sorted(TOPICS))}, focus {pick}: {text}"
        )
        answer = ctx.complete(ask(prompt))
        ctx.memory[f"turn.{ctx.seq}"] = {"text": text}
        log.debug("answered in %.3f s", time.monotonic() - started)
        return Done(output=answer.text.encode())


AGENT = CleanAgent()
TOOLS = ToolRegistry([desk_status, word_count])
