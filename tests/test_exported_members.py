"""The public surface of beam_agents changes only on purpose (DESIGN §9)."""

from __future__ import annotations

import subprocess
import sys

import beam_agents

DESIGN_SECTION_9 = [
    "Agent",
    "AgentConfig",
    "BeamAgentsError",
    "Done",
    "HitlPolicy",
    "RunAgent",
    "RunAgentOutputs",
    "Suspend",
    "ToolRegistry",
    "compute_cache_key",
    "read_trace_stream",
    "serialize_trace_event",
    "tool",
    "write_trace_stream",
]


def test_all_is_exactly_the_designs_list() -> None:
    assert sorted(beam_agents.__all__) == sorted(DESIGN_SECTION_9)


def test_every_exported_name_resolves() -> None:
    for name in beam_agents.__all__:
        assert getattr(beam_agents, name) is not None, name


def test_exception_tree_has_one_root() -> None:
    from beam_agents import errors

    classes = [
        obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, Exception)
    ]
    assert all(issubclass(cls, beam_agents.BeamAgentsError) for cls in classes)


def test_importing_the_package_does_not_import_beam() -> None:
    """RunAgent is loaded lazily so `import beam_agents` (and replay) stay Beam-free."""
    code = "import sys, beam_agents; print('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
