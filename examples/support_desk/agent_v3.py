"""The support-desk agent, v3: two innocent-looking changes that make it irreproducible.

Each is the kind of change a review lets through, and each breaks a replay-safe
rule of docs/agent-api.md ("Determinism rules"):

1. **Today's date in the reply prompt**, so the model can say "today", read from the
   wall clock (``date.today()``) instead of the activation clock (``ctx.now_ms``): a
   replay on another day sends another prompt, misses the cache, and is
   irreproducible (exit 3).
2. **A module-level cache of looked-up orders**, to save a tool call when a customer
   asks about the same order twice: the pipeline's worker process keeps it from one
   activation to the next (and from one customer to another), while a replay runs one
   activation in a fresh process, calls ``lookup_order`` where the pipeline did not,
   and diverges (exit 1).

``make demo`` runs the determinism doctor on it over the demo's topic dump (step 5):
it names both lines, with the evidence, the verdict an operator would get, and the
remedy, and it finds nothing in v1:

    beam-agents-replay doctor --agent examples.support_desk.agent_v3:AGENT \\
        --registry examples.support_desk.tools:TOOLS \\
        --provider examples.support_desk.model:make_provider --events demo-out/topic-dump.pb

The lines the doctor must name carry a ``# doctor: CAUSE`` marker (tests/test_demo.py
reads them).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from beam_agents.context import AgentContext
from examples.support_desk.agent import SupportAgent
from examples.support_desk.tools import TOOLS

__all__ = ["AGENT", "TOOLS", "SupportAgentV3"]

_LOOKED_UP: dict[str, dict[str, Any]] = {}
"""Orders already looked up, by id: kept by the worker process across activations."""


class SupportAgentV3(SupportAgent):
    """v1 with today's date in its replies and a process-wide cache of order lookups."""

    def lookup(self, ctx: AgentContext, order_id: str) -> dict[str, Any]:
        """The order, looked up once per process (v1 looked it up in every activation)."""
        if order_id not in _LOOKED_UP:
            _LOOKED_UP[order_id] = super().lookup(ctx, order_id)  # doctor: module-state
        return _LOOKED_UP[order_id]

    def reply_facts(self, ctx: AgentContext, facts: dict[str, str]) -> dict[str, str]:
        """v1's facts, and today's date (so the reply can say "today")."""
        return {**facts, "today": date.today().isoformat()}  # doctor: wall-clock


AGENT = SupportAgentV3()
"""``--agent examples.support_desk.agent_v3:AGENT``."""
