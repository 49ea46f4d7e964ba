"""The Beam side of beam-agents: ``RunAgent`` and its outputs (the only Beam-importing package).

``RunAgent(agent, registry, config)`` runs an agent over a PCollection of
serialized ``AgentEnvelope``s; see docs/pipeline.md for the wiring, the element
types of ``RunAgentOutputs`` and the ``ErrorRecord`` of ``.errors``.
``ReplayBundles`` replays incident bundles at scale (docs/incidents.md).
"""

from typing import TYPE_CHECKING, Any

from beam_agents._extras import import_extra
from beam_agents.pipeline._quiet_import import quiet_beam_import

with quiet_beam_import():
    # First, so its import-time warnings are the quiet ones; without Beam, an ImportError
    # naming the [pipeline] extra (the operator's install has no Beam).
    import_extra(
        "apache_beam", extra="pipeline", what="beam_agents.pipeline", package="apache-beam"
    )

if TYPE_CHECKING:
    from beam_agents.dead_letter import ERROR_CODES, ErrorCode, ErrorRecord
    from beam_agents.pipeline.replay_bundles import (
        ReadBundleFiles,
        ReplayBundles,
        ReplayBundlesOutputs,
    )
    from beam_agents.pipeline.transform import RunAgent, RunAgentOutputs

# Each name is imported from its module when first asked for: a process that needs only
# ReplayBundles (a runner's worker unpickling its DoFns, issue 29) then never imports
# RunAgent's modules (the DoFn, the sinks), nor the reverse.
_LAZY = {
    "ERROR_CODES": "beam_agents.dead_letter",
    "ErrorCode": "beam_agents.dead_letter",
    "ErrorRecord": "beam_agents.dead_letter",
    "ReadBundleFiles": "beam_agents.pipeline.replay_bundles",
    "ReplayBundles": "beam_agents.pipeline.replay_bundles",
    "ReplayBundlesOutputs": "beam_agents.pipeline.replay_bundles",
    "RunAgent": "beam_agents.pipeline.transform",
    "RunAgentOutputs": "beam_agents.pipeline.transform",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_agents.pipeline' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
