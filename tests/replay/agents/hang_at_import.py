"""A module whose import never ends (until ``isolation_agents.RELEASE`` is set)."""

import isolation_agents as ia
import replay_agents as ra

ia.RELEASE.wait()

AGENT = ra.AGENT
