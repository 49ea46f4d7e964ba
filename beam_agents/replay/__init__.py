"""Replay one past activation offline and judge it: the engine behind ``beam-agents-replay``.

    from beam_agents.replay import Replayer

    result = Replayer(agent=AGENT, registry=TOOLS).replay(snapshot, trace_events, envelope)
    result.verdict, result.exit_code, result.first_divergence

or, as the command line does, from files and ``module:ATTR`` paths:

    from beam_agents.replay import ReplayOptions, replay

    result = replay(ReplayOptions(snapshot="snap.pb", traces=("traces/",), event="event.pb",
                                  agent="myapp.agent:AGENT", registry="myapp.agent:TOOLS"))

The package is laid out by stage, as floors (docs/index.md, "How the code is
laid out"; ``tests/test_layers.py`` keeps it so): imports only go down, and two
folders of one floor never import each other.

    6  incidents/    commands over many activations: listing (ls), bundle, check
                     (check_rows, check_workers, check_render)
    5  replayer      Replayer: the same replay for Python callers, agent and inputs as objects
    4  engine        replay(options) -> ReplayResult: load, plan, re-run isolated, judge,
                     assemble (a few named steps)
    3  judging/      compare, end_check, judge (the only place a verdict is decided),
                     values, state_view
    2  reconstruct/  plan (target, clock, trigger, pre-state), pending (older intents)
       isolation/    guard, time_limit, watchdog
    1  inputs/       sources, snapshot, envelopes, traces (the one trace scanner),
                     agent_code, replay_inputs
       reporting/    escape (the one escaper), labels, text (headless), json_doc (--json),
                     markdown, redact: renderers, deciding nothing
    0  vocabulary    result (ReplayResult and its parts), options (ReplayOptions), naming
                     (how the caller names the inputs), refusal (why a replay stopped)

Each folder's docstring lists what it gives the floors above.

Names are loaded on first access, so ``import beam_agents.replay.result`` (the
TUI's import) does not load the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.replay.engine import replay
    from beam_agents.replay.incidents.bundle import load_bundle, make_bundle
    from beam_agents.replay.incidents.check import check_bundles
    from beam_agents.replay.incidents.check_rows import CheckReport, CheckRow
    from beam_agents.replay.incidents.listing import list_activations
    from beam_agents.replay.options import ReplayOptions
    from beam_agents.replay.replayer import Replayer
    from beam_agents.replay.result import ReplayResult, Verdict

_LAZY = {
    "CheckReport": "beam_agents.replay.incidents.check_rows",
    "CheckRow": "beam_agents.replay.incidents.check_rows",
    "check_bundles": "beam_agents.replay.incidents.check",
    "load_bundle": "beam_agents.replay.incidents.bundle",
    "make_bundle": "beam_agents.replay.incidents.bundle",
    "list_activations": "beam_agents.replay.incidents.listing",
    "replay": "beam_agents.replay.engine",
    "ReplayOptions": "beam_agents.replay.options",
    "Replayer": "beam_agents.replay.replayer",
    "ReplayResult": "beam_agents.replay.result",
    "Verdict": "beam_agents.replay.result",
}

__all__ = [
    "CheckReport",
    "CheckRow",
    "ReplayOptions",
    "ReplayResult",
    "Replayer",
    "Verdict",
    "check_bundles",
    "list_activations",
    "load_bundle",
    "make_bundle",
    "replay",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_agents.replay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
