"""``Replayer``: replay past activations from Python, with the agent as an object.

Temporal's ``Replayer`` is the model: built once, keyword-only, with the agent
code and its configuration as objects; ``replay`` then takes the recorded inputs
as messages (or bytes, or files) and returns the same frozen ``ReplayResult`` the
command line renders. Messages go straight into the engine's ``ReplayInputs``
(read as they are; the envelope copied, since agent code gets its event), never
serialized to be parsed again. The CLI (``beam-agents-replay``,
``replay(ReplayOptions)``) is the other way in: it reads files and imports
``module:ATTR`` paths, then runs the same engine.

    replayer = Replayer(agent=AGENT, registry=TOOLS)
    result = replayer.replay(snapshot, trace_events, envelope)
    assert result.verdict is Verdict.REPRODUCED, result.reason
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from beam_agents._protos import AgentEnvelope, StateSnapshot, TraceEvent
from beam_agents._version import __version__
from beam_agents.agent import Agent
from beam_agents.errors import ConfigError
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.replay.engine import HeaderSoFar, run
from beam_agents.replay.inputs.envelopes import load_event_message, load_event_source
from beam_agents.replay.inputs.replay_inputs import ReplayInputs
from beam_agents.replay.inputs.snapshot import load_snapshot_message, load_snapshot_source
from beam_agents.replay.inputs.traces import TraceMessages, TraceSource
from beam_agents.replay.naming import REPLAYER
from beam_agents.replay.options import DEFAULT_TIME_LIMIT, Source, checked_time_limit
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import ReplayHeader, ReplayResult
from beam_agents.tools import ToolRegistry

__all__ = ["Replayer"]

TraceInput = Iterable[TraceEvent] | bytes | Source
"""Trace events as messages (any iterable), one trace stream's bytes, or a file/directory."""


def _label(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__} instance"


class Replayer:
    """Replays activations of one agent, offline, against their traces.

    Every ``replay`` blocks the network while agent code runs, serves model calls
    and recorded tools only from the snapshot's caches, and never raises for bad
    input: the result's verdict (and ``exit_code``) says reproduced (0), diverged
    (1), bad input (2) or irreproducible (3), with one paragraph in ``error``,
    which names the inputs by these parameters (``snapshot=<7 bytes>``, ``seq=5``,
    ``Replayer(time_limit=SECONDS)``), never by the command line's flags.
    """

    def __init__(
        self,
        *,
        agent: Agent,
        registry: ToolRegistry,
        hitl: HitlPolicy = DEFAULT_HITL_POLICY,
        agent_label: str | None = None,
        registry_label: str | None = None,
        hitl_label: str | None = None,
        time_limit: float | None = DEFAULT_TIME_LIMIT,
    ) -> None:
        """Build a replayer (validated here, not at the first replay).

        Args:
            agent: The ``Agent`` the pipeline ran.
            registry: Its ``ToolRegistry``.
            hitl: The pipeline's ``HitlPolicy`` (``AgentConfig.hitl``).
            agent_label: How the report's header names the agent (``module:ATTR``);
                defaults to the agent's class.
            registry_label: The same for the registry.
            hitl_label: The same for the HITL policy (``default`` when not given).
            time_limit: Seconds of wall time each re-run may take (None or 0: no limit).
                Past it the result is irreproducible (exit 3) naming the last event
                the re-run reached. Python cannot stop a thread: the re-run runs in a
                daemon thread of its own, which is abandoned, not stopped, and keeps
                the replay guard in force in this process (no network, processes,
                native code or side effects) until it ends, if ever. Run replays of
                code that may hang in a process you can end (``check`` does).
        """
        try:
            time_limit = checked_time_limit(time_limit)
        except ValueError as exc:
            raise ConfigError(f"Replayer time_limit= {exc}") from None
        for name, value, expected in (
            ("agent", agent, Agent),
            ("registry", registry, ToolRegistry),
            ("hitl", hitl, HitlPolicy),
        ):
            if not isinstance(value, expected):
                raise ConfigError(
                    f"Replayer {name}= must be an instance of {expected.__name__}, got "
                    f"{type(value).__name__}: {value!r:.80}"
                )
        self.agent = agent
        self.registry = registry
        self.hitl = hitl
        self.time_limit = time_limit or None
        self._agent_label = agent_label or _label(agent)
        self._registry_label = registry_label or _label(registry)
        given = hitl is not DEFAULT_HITL_POLICY
        self._hitl_label = hitl_label or ("given" if given else "default")

    def replay(
        self,
        snapshot: StateSnapshot | bytes | Source,
        traces: TraceInput,
        event: AgentEnvelope | bytes | Source | None = None,
        *,
        seq: int | None = None,
        what_if: bool = False,
    ) -> ReplayResult:
        """Reconstruct, re-run and judge one activation of this replayer's agent.

        Args:
            snapshot: The key's ``StateSnapshot`` (a message, its bytes, or a file).
            traces: The key's trace events (messages in any order, stream bytes, or a
                file/directory); other keys' events are ignored.
            event: The ``AgentEnvelope`` that triggered the activation (a message,
                its bytes, or a file); None for a HITL timeout.
            seq: Replay this traced activation instead of the key's highest traced one.
            what_if: Allow replaying a pending resume that was never traced.

        Returns:
            The result (never raises for bad input; see the class docstring).
        """
        header = HeaderSoFar(
            ReplayHeader(
                version=__version__,
                agent_path=self._agent_label,
                registry_path=self._registry_label,
                hitl_source=self._hitl_label,
            )
        )

        def load() -> ReplayInputs:
            for name, value, message, allowed in (
                ("snapshot", snapshot, StateSnapshot, "a StateSnapshot, its bytes, or a file path"),
                (
                    "event",
                    event,
                    AgentEnvelope,
                    "an AgentEnvelope, its bytes, a file path, or None",
                ),
            ):
                if not (
                    isinstance(value, message | bytes | str)
                    or hasattr(value, "__fspath__")
                    or (value is None and name == "event")
                ):
                    raise InputError(
                        f"Replayer.replay {name}= must be {allowed}, got "
                        f"{type(value).__name__}: {value!r:.80}"
                    )
            if not isinstance(what_if, bool):  # "no" was true: a what-if allowed
                raise InputError(
                    f"Replayer.replay what_if= must be True or False, got "
                    f"{type(what_if).__name__}: {what_if!r:.80}"
                )
            if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
                # '1' would be looked up as a seq, found nowhere, and refused as
                # "no activation at seq 1 (traced seqs: 1-3)"
                raise InputError(
                    "Replayer.replay seq= must be an int or None (the key's highest traced "
                    f"activation), got {type(seq).__name__}: {seq!r:.80}"
                )
            loaded, state, blob_versions = (
                load_snapshot_message(snapshot, REPLAYER)
                if isinstance(snapshot, StateSnapshot)
                else load_snapshot_source(snapshot, REPLAYER)
            )
            header.note_snapshot(loaded, state)
            envelope: AgentEnvelope | None = None
            if isinstance(event, AgentEnvelope):
                envelope = load_event_message(event, REPLAYER)
            elif event is not None:
                envelope = load_event_source(event, REPLAYER)
            return ReplayInputs(
                snapshot=loaded,
                state=state,
                blob_versions=blob_versions,
                event=envelope,
                events=(),
                traces=_trace_sources(traces),
                agent=self.agent,
                registry=self.registry,
                hitl=self.hitl,
                seq=seq,
                what_if=what_if,
                time_limit=self.time_limit,
                naming=REPLAYER,
            )

        return run(header, load)


_TRACES_ALLOWED = (
    "TraceEvents, a trace stream's bytes, a file or directory path, or a list of paths"
)


def _is_source(value: object) -> bool:
    return isinstance(value, bytes | str) or hasattr(value, "__fspath__")


def _trace_sources(traces: TraceInput) -> tuple[TraceSource, ...]:
    """``traces=`` as the engine's sources: one, several paths (as ``--traces`` repeated), or
    the given events as they are. Anything else is refused naming it (an int, None or a list
    of paths was an internal error: "'int' object is not iterable")."""
    if _is_source(traces):
        return (traces,)  # type: ignore[return-value]
    try:
        items: Iterator[object] = iter(traces)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(
            f"Replayer.replay traces= must be {_TRACES_ALLOWED}, got "
            f"{type(traces).__name__}: {traces!r:.80}"
        ) from None
    first = next(items, None)
    if first is not None and _is_source(first):
        paths: list[Source] = []
        for item in (first, *items):
            if not _is_source(item):
                raise InputError(
                    f"Replayer.replay traces= is a list of paths holding a "
                    f"{type(item).__name__}: {item!r:.80}; pass paths (or stream bytes) only"
                )
            paths.append(item)  # type: ignore[arg-type]
        return tuple(paths)

    given = () if first is None else (_event(first), *(_event(item) for item in items))
    return (TraceMessages(given),)


def _event(item: object) -> TraceEvent:
    if not isinstance(item, TraceEvent):
        raise InputError(
            f"Replayer.replay traces= holds a {type(item).__name__}: {item!r:.80}; pass "
            f"{_TRACES_ALLOWED}"
        )
    return item
