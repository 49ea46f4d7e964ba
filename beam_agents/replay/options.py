"""``ReplayOptions``: the inputs of one replay, as the CLI (or any caller) gives them."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from beam_agents.errors import ConfigError
from beam_agents.replay.naming import REPLAY_OPTIONS, Naming

if TYPE_CHECKING:
    from beam_agents._protos import StateSnapshot
    from beam_agents.hitl import HitlPolicy
    from beam_agents.key_state import KeyState

Source = str | os.PathLike[str] | bytes
"""A file: its path, ``"-"`` for standard input, or its bytes."""

_S = TypeVar("_S", bound=Source)


def as_sources(value: _S | Iterable[_S]) -> tuple[_S, ...]:
    """A parameter taking several sources, given one (a path or bytes) or a sequence of them.

    One path is one source: ``traces="traces/"`` was iterated character by character (and
    refused as ``no trace stream at t``).
    """
    if isinstance(value, str | bytes | os.PathLike):
        return (value,)
    return tuple(value)

DEFAULT_TIME_LIMIT = 60.0
"""Seconds of wall time agent code may run in one replay (docs/replay.md, "Time limit")."""

MAX_TIME_LIMIT = 86_400.0
"""The largest time limit, a day (0 means no limit). Past some far larger value the timers
a limit arms (the wait, and the console script's last resort at twice the limit) overflow."""


def checked_time_limit(value: object) -> float | None:
    """``value`` as a time limit: seconds, or None for no limit (None or 0).

    Raises:
        ValueError: not a number of seconds from 0 to ``MAX_TIME_LIMIT``; the message
            says what is allowed and what was given.
    """
    if value is None:
        return None
    seconds = (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    )
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_TIME_LIMIT):
        raise ValueError(
            f"must be a number of seconds from 0 to {MAX_TIME_LIMIT:g} (a day; 0: no limit), "
            f"got {value!r}"
        )
    return seconds or None


@dataclass(frozen=True, kw_only=True)
class ForkOptions:
    """A fork (docs/replay.md, "A fork"): the traced call at event ``at`` receives another
    answer; nothing is read until the replay runs."""

    at: int
    """The trace index of the event to answer differently (a model or tool call)."""
    value: bytes | None = None
    """What it receives, as given (UTF-8: a model call's response text, a tool call's JSON)."""
    value_file: Source | None = None
    """Instead of ``value``: a file holding it (``--set @FILE``), read when the replay runs."""
    provider: str | None = None
    """``module:ATTR`` of a provider (or a factory of one) that answers the continuation's
    model calls the snapshot's cache cannot serve; None: such a call ends the fork."""

    def __post_init__(self) -> None:
        if not isinstance(self.at, int) or isinstance(self.at, bool) or self.at < 0:
            raise ConfigError(f"ForkOptions at= must be an event index (0 or more), got {self.at!r:.80}")
        if (self.value is None) == (self.value_file is None):
            raise ConfigError("ForkOptions takes one of value= and value_file=")


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """Everything ``beam_agents.replay.engine.replay`` needs; nothing is read until it runs."""

    snapshot: Source
    """One serialized ``StateSnapshot`` (the snapshot sink's message value)."""
    traces: tuple[Source, ...]
    """Trace-stream files or directories of ``*.pb`` files (or stream bytes), read in order."""
    agent: str
    """``module:ATTR`` of the ``Agent`` instance the pipeline ran."""
    registry: str
    """``module:ATTR`` of its ``ToolRegistry``."""
    event: Source | None = None
    """The serialized ``AgentEnvelope`` that triggered the activation; None for a HITL timeout."""
    events: tuple[Source, ...] = ()
    """``--events``: envelope streams or directories to pick the triggering envelope from, by
    the traced envelope id and sha256 (instead of ``event``)."""
    seq: int | None = None
    """Replay this traced activation instead of the key's highest traced one."""
    hitl: str | None = None
    """``module:ATTR`` of the pipeline's ``HitlPolicy``; None for the default policy."""
    hitl_policy: HitlPolicy | None = None
    """The pipeline's ``HitlPolicy`` itself (a bundle records it); wins over ``hitl``."""
    hitl_label: str = ""
    """Where ``hitl_policy`` came from, for the report's header (e.g. ``bundle (default)``)."""
    what_if: bool = False
    """Allow a what-if: replaying a pending resume, which was never traced (``--what-if``)."""
    time_limit: float | None = DEFAULT_TIME_LIMIT
    """Seconds of wall time the agent code may take: importing it, then the re-run (each
    limited on its own). Past it the replay is irreproducible (exit 3). None or 0: no limit
    (``--time-limit``)."""
    loaded_snapshot: tuple[StateSnapshot, KeyState, dict[str, int]] | None = field(
        default=None, repr=False, compare=False
    )
    """``snapshot`` already loaded (``inputs.load_snapshot_source``'s result: a bundle's,
    checked by ``load_bundle``), so it is not parsed again. The replay only reads it."""
    code_search: tuple[str, ...] = ()
    """Folders to import ``agent`` and ``registry`` from when their top-level package is not on
    the import path (a bundle's folder and those above it: ``incidents.bundle``)."""
    process_ends: bool = False
    """This process ends after the replay (the console script, a ``check`` worker): what agent
    code would run at interpreter exit (``atexit`` hooks, finalizers) runs before the
    judgement, under the guard, and counts like the re-run (``isolation.process_exit``)."""
    fork: ForkOptions | None = None
    """Fork the activation instead of reproducing it (``--fork N --set VALUE``): a
    counterfactual, whose verdict is ``fork``, never ``reproduced``."""
    divergence_detail: bool = True
    """Render the first divergence's detail with DeepDiff (``Divergence.detail``). False: the
    differing fields as plain rows, and DeepDiff is not imported (``check``, whose rows never
    show the detail: importing and running DeepDiff was about a fifth of a worker's cost)."""
    naming: Naming = field(default=REPLAY_OPTIONS, repr=False)
    """How refusals name these inputs: by these fields unless the caller says otherwise (the
    command line passes its flags, ``beam_agents.cli.parsing.CLI_NAMING``)."""

    def __post_init__(self) -> None:
        try:
            checked_time_limit(self.time_limit)
        except ValueError as exc:
            raise ConfigError(f"ReplayOptions time_limit= {exc}") from None
        # One path is one source (a str was read as a sequence of one-letter paths).
        object.__setattr__(self, "traces", as_sources(self.traces))
        object.__setattr__(self, "events", as_sources(self.events))
        if self.seq is not None and (not isinstance(self.seq, int) or isinstance(self.seq, bool)):
            raise ConfigError(
                "ReplayOptions seq= must be an int or None (the key's highest traced "
                f"activation), got {type(self.seq).__name__}: {self.seq!r:.80}"
            )
