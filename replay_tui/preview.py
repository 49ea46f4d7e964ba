"""The first rows of the traced activation, read before the replay starts.

``engine.replay`` reports the traced events once it has planned the activation, which
means after it has read every trace stream whole: seconds for a 100,000-event
activation. The operator's first screen should not wait for that. When the command line
names the activation (``--seq``), this reads the snapshot's key and the first
``PREVIEW_EVENTS`` events of that activation (the trace's other activations skipped
unparsed: ``traces.first_events``) and the TUI paints them while the replay reads,
re-runs and judges. They are the trace's bytes, unjudged, and shown as such; the
replay's own reading replaces them. Without ``--seq`` the activation is the highest
traced one, known only at the end of the traces: nothing is shown early then.

The snapshot is loaded here once and handed to the replay (``ReplayOptions
.loaded_snapshot``, which the replay only reads), so it is not parsed twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from beam_agents._protos import TraceEvent
from beam_agents.replay.inputs.snapshot import load_snapshot_source
from beam_agents.replay.inputs.traces import first_events
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.refusal import ReplayRefused

PREVIEW_EVENTS = 500
"""How many events are read ahead: more than a tall terminal's page of rows."""


@dataclass(frozen=True)
class FirstRows:
    """The first traced events of activation ``seq`` of ``entity_key``, by index."""

    entity_key: bytes
    seq: int
    events: list[TraceEvent]


def read_first_rows(options: ReplayOptions) -> tuple[FirstRows | None, ReplayOptions]:
    """The preview of ``options``' activation (None: nothing to show early), and the options
    for the replay (with the snapshot loaded, when it was).

    Never raises for bad input: an input the preview cannot read is the replay's to
    refuse, with its own words, a moment later.
    """
    seq = options.seq
    if seq is None or not options.traces:
        return None, options
    try:
        loaded = options.loaded_snapshot
        if loaded is None:
            loaded = load_snapshot_source(options.snapshot, options.naming)
            options = dataclasses.replace(options, loaded_snapshot=loaded)
        key = loaded[0].entity_key
        events = first_events(options.traces, key, seq, PREVIEW_EVENTS, options.naming)
    except ReplayRefused:
        return None, options
    except Exception:  # a preview never stops the replay, which reports what this met
        return None, options
    if not events:
        return None, options
    return FirstRows(key, seq, events), options
