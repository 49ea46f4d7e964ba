"""The support-desk agent, v2: one plausible, innocent-looking change on the non-model path.

v2 normalizes order ids to the warehouse's compact form (``A-1001`` ->
``A1001``) before looking them up. ``lookup_order`` accepts both spellings and
returns the same order, so every reply, every prompt and every refund comes
out the same — yet the agent no longer *does* the same thing: the lookup is
called with different arguments. Replaying a v1 activation with v2 says so:

    beam-agents-replay ... --agent examples.support_desk.agent_v2:AGENT   # exit 1, diverged
    at the TOOL_CALL lookup_order (its beam_agents.args_sha256 differs)

This is the demo's "the code on my laptop is not the code that ran" incident
(seed page §4: skew between the binary that ran and the one imported locally
is a real divergence source).
"""

from __future__ import annotations

from examples.support_desk.agent import SupportAgent
from examples.support_desk.tools import TOOLS

__all__ = ["AGENT", "TOOLS", "SupportAgentV2"]


class SupportAgentV2(SupportAgent):
    """v1 with order ids normalized to the compact warehouse form."""

    def normalize_order_id(self, raw: str) -> str:
        """``"#a-1001 "`` -> ``"A1001"`` (v1 kept the dash)."""
        return super().normalize_order_id(raw).replace("-", "")


AGENT = SupportAgentV2()
"""``--agent examples.support_desk.agent_v2:AGENT``."""
