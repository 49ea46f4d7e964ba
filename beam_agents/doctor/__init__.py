"""The determinism doctor: what makes an agent irreproducible, found before an incident.

    from beam_agents.doctor import diagnose

    report = diagnose(agent="myapp.agent:AGENT", registry="myapp.agent:TOOLS",
                      script="samples.json", provider="myapp.model:make_client")
    assert report.clean, report.render()

or ``beam-agents-replay doctor --agent ... --registry ... --script samples.json``.
Sample activations run through the pipeline's own per-key step, watched; each is
then replayed as ``beam-agents-replay`` replays it, under perturbations that must
not matter; every finding names its cause, its file and line, the evidence, the
verdict an operator would get, and the remedy (docs/doctor.md).

The package sits above ``beam_agents.replay`` and ``beam_agents.key_step`` (it drives
both) and below the command line; nothing in ``beam_agents`` but the CLI imports it
(tests/test_layers.py). Its modules, by floor (imports only go down):

    0  findings      Cause, Finding, Evidence, Consequence (the vocabulary), REMEDIES
       refusal       DoctorUsageError, DoctorNaming (CLI, PYTHON)
    1  watch         the watcher: profile hook and the guard's recording mode
       conditions    the perturbations (Condition), shift_clock
       samples       sample inputs as steps (load_samples, parse_script)
       report        DoctorReport: render, document (--json), junit
    2  module_state  what agent modules carry between activations
       linetrace     two runs traced line by line, first_difference
       processes     fresh interpreters for the workers (Worker, Pool)
    3  pipeline_side the samples through PipelineKey, watched
       replay_side   each activation replayed in a forked child, per condition
       attribute     from observations and changes to findings
    4  worker        the workers' entry point (python -m beam_agents.doctor.worker)
       run           diagnose()

Names are loaded on first access: ``import beam_agents.doctor`` imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.doctor.findings import Cause, Consequence, Evidence, Finding
    from beam_agents.doctor.refusal import DoctorUsageError
    from beam_agents.doctor.report import DoctorReport
    from beam_agents.doctor.run import diagnose

_LAZY = {
    "Cause": "beam_agents.doctor.findings",
    "Consequence": "beam_agents.doctor.findings",
    "Evidence": "beam_agents.doctor.findings",
    "Finding": "beam_agents.doctor.findings",
    "DoctorUsageError": "beam_agents.doctor.refusal",
    "DoctorReport": "beam_agents.doctor.report",
    "diagnose": "beam_agents.doctor.run",
}

__all__ = [
    "Cause",
    "Consequence",
    "DoctorReport",
    "DoctorUsageError",
    "Evidence",
    "Finding",
    "diagnose",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_agents.doctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
