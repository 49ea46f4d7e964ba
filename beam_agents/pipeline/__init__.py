"""The Beam side of beam-agents: ``RunAgent`` and its outputs (the only Beam-importing package).

``RunAgent(agent, registry, config)`` runs an agent over a PCollection of
serialized ``AgentEnvelope``s; see docs/pipeline.md for the wiring, the element
types of ``RunAgentOutputs`` and the ``ErrorRecord`` of ``.errors``.
``ReplayBundles`` replays incident bundles at scale (docs/incidents.md).
"""

from beam_agents._extras import import_extra
from beam_agents.pipeline._quiet_import import quiet_beam_import

with quiet_beam_import():
    # First, so its import-time warnings are the quiet ones; without Beam, an ImportError
    # naming the [pipeline] extra (the operator's install has no Beam).
    import_extra(
        "apache_beam", extra="pipeline", what="beam_agents.pipeline", package="apache-beam"
    )

from beam_agents.dead_letter import ERROR_CODES, ErrorCode, ErrorRecord
from beam_agents.pipeline.replay_bundles import (
    ReadBundleFiles,
    ReplayBundles,
    ReplayBundlesOutputs,
)
from beam_agents.pipeline.transform import RunAgent, RunAgentOutputs

__all__ = [
    "ERROR_CODES",
    "ErrorCode",
    "ErrorRecord",
    "ReadBundleFiles",
    "ReplayBundles",
    "ReplayBundlesOutputs",
    "RunAgent",
    "RunAgentOutputs",
]
