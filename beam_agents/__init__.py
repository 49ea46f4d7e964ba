"""beam-agents: LLM agents inside Apache Beam pipelines, with exact offline replay."""

from beam_agents._version import __version__

__all__ = ["__version__"]
