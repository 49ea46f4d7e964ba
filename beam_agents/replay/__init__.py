"""Replay one past activation offline and judge it: the engine behind ``beam-agents-replay``.

    from beam_agents.replay import Replayer

    result = Replayer(agent=AGENT, registry=TOOLS).replay(snapshot, trace_events, envelope)
    result.verdict, result.exit_code, result.first_divergence

or, as the command line does, from files and ``module:ATTR`` paths:

    from beam_agents.replay import ReplayOptions, replay

    result = replay(ReplayOptions(snapshot="snap.pb", traces=("traces/",), event="event.pb",
                                  agent="myapp.agent:AGENT", registry="myapp.agent:TOOLS"))

Modules, in the order a replay uses them:

    options       ReplayOptions: the inputs, as the CLI gives them
    naming        how the caller names the inputs in refusals (parameters; the CLI: flags)
    inputs        reading files; the snapshot (migrated in memory), the event, agent imports
    traced        the key's traced activations, filtered out of the trace streams
    reconstruct   target, clock, trigger and pre-state; do the inputs belong together?
    network_guard the audit hook that blocks the network during the re-run
    engine        replay(options) -> ReplayResult: the one function every renderer calls
    replayer      Replayer: the same replay for Python callers, agent and inputs as objects
    compare       the closed normalization and the event-by-event comparison
    judge         the verdict from the comparison, the cache misses and network attempts
    views         the reported-not-judged parts: state, intents ledger, digests
    result        ReplayResult and its parts (frozen data; the TUI renders it)
    report        the headless report;  json_report: --json
    events_lookup --events: the triggering envelope picked out of topic dumps
    listing       ls: a key's traced activations, and which a snapshot replays
    bundle        incident bundles: make, load (every part checked), replay options
    bulk          check: many bundles replayed in worker processes, grouped by cause
    cli           the command line (beam-agents-replay)

Names are loaded on first access, so ``import beam_agents.replay.result`` (the
TUI's import) does not load the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.replay.engine import replay
    from beam_agents.replay.incidents.bundle import load_bundle, make_bundle
    from beam_agents.replay.incidents.check import CheckReport, CheckRow, check_bundles
    from beam_agents.replay.incidents.listing import list_activations
    from beam_agents.replay.options import ReplayOptions
    from beam_agents.replay.replayer import Replayer
    from beam_agents.replay.result import ReplayResult, Verdict

_LAZY = {
    "CheckReport": "beam_agents.replay.incidents.check",
    "CheckRow": "beam_agents.replay.incidents.check",
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
