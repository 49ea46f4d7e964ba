"""``RunAgent``: the PTransform a pipeline author applies to a PCollection of envelopes.

    outs = envelopes | RunAgent(AGENT, TOOLS, config)   # RunAgentOutputs
    outs.intents, outs.approvals, outs.outputs, outs.traces, outs.snapshots, outs.errors

Steps: route each element to ``(entity_key, envelope bytes)`` (refusals to
``errors``), re-window into the global window if needed, run ``AgentDoFn``
keyed by ``entity_key``, and, when ``traces_to`` / ``snapshots_to`` are set,
write each activation's trace batch / ``snapshots`` to those sinks. See docs/pipeline.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from apache_beam.pvalue import PCollection

from beam_agents.agent import Agent
from beam_agents.config import AgentConfig
from beam_agents.dead_letter import ErrorRecord
from beam_agents.errors import ConfigError
from beam_agents.pipeline._beam import GlobalWindows, beam
from beam_agents.pipeline.agent_dofn import AgentDoFn
from beam_agents.pipeline.envelope_input import TAG_ERRORS, RouteEnvelopes
from beam_agents.pipeline.sink_writers import WriteSnapshots, WriteTraces
from beam_agents.tools import ToolRegistry

_KEYED = "keyed"


_TRACE_EVENTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""``trace_batches`` PCollection -> its per-event ``traces`` PCollection, built on first use."""


def _trace_events(batch: tuple[bytes, tuple[bytes, ...], bytes]) -> Iterator[tuple[bytes, bytes]]:
    key, events = batch[0], batch[1]
    for data in events:
        yield key, data


class RunAgentOutputs(NamedTuple):
    """The outputs of ``RunAgent``. Every element is ``(entity_key, bytes)`` except
    ``trace_batches`` and ``errors``.

    A NamedTuple (not a dataclass) so Beam registers each field as a named output
    of the composite transform. ``traces`` is a property, not a field: the per-event
    PCollection is built from ``trace_batches`` the first time it is read, so a
    pipeline that only writes traces to a sink never pays for one element per event.
    """

    intents: PCollection[tuple[bytes, bytes]]
    """Released ``ToolIntent``s (``SerializeToString(deterministic=True)``): perform them."""
    approvals: PCollection[tuple[bytes, bytes]]
    """Approval-gated ``ToolIntent``s for the approval service; released only when approved."""
    outputs: PCollection[tuple[bytes, bytes]]
    """The bytes of every ``Done(output=..., outputs=...)``, in emission order per activation."""
    trace_batches: PCollection[tuple[bytes, tuple[bytes, ...], bytes]]
    """One element per activation, failed ones too: ``(entity_key, (event bytes, ...),
    telemetry)``, its ``serialize_trace_event`` bytes in order (what the trace sink writes)
    and its real wall times (``beam_agents.telemetry.ActivationTelemetry.decode(telemetry)``;
    never part of the trace)."""
    snapshots: PCollection[tuple[bytes, bytes]]
    """``StateSnapshot`` bytes (deterministic), one per export request."""
    errors: PCollection[ErrorRecord]
    """``beam_agents.pipeline.ErrorRecord``: refused inputs, with a code, a reason, the raw bytes."""

    @property
    def traces(self) -> PCollection[tuple[bytes, bytes]]:
        """``(entity_key, serialize_trace_event bytes)`` of every event of every activation.

        Split from ``trace_batches`` by a ``FlatMap`` applied the first time this is read
        (the same PCollection on every later read); within a key, in activation order.
        """
        batches = self.trace_batches
        events: PCollection[tuple[bytes, bytes]] | None = _TRACE_EVENTS.get(batches)
        if events is None:
            producer = batches.producer
            label = f"TraceEvents({producer.full_label if producer else 'RunAgent'})"
            events = batches | label >> beam.FlatMap(_trace_events).with_output_types(
                tuple[bytes, bytes]
            )
            _TRACE_EVENTS[batches] = events
        return events


# Runners whose Python SDK support has no user state or timers (AgentDoFn needs both:
# one serial history per key, the HITL deadline). Beam's Dask runner dies on them
# with a bare AssertionError; RunAgent refuses it when applied instead.
_RUNNERS_WITHOUT_STATE_AND_TIMERS = {
    "apache_beam.runners.dask": "Beam's Dask runner, which supports neither",
}


def refuse_runner_without_state_and_timers(runner: Any) -> None:
    """Refuse, at construction, a runner that cannot run a stateful DoFn with timers.

    Raises:
        ConfigError: One paragraph naming the runner and the runners to use instead.
    """
    if runner is None:
        return
    for cls in type(runner).__mro__:
        for module, why in _RUNNERS_WITHOUT_STATE_AND_TIMERS.items():
            if cls.__module__ == module or cls.__module__.startswith(module + "."):
                raise ConfigError(
                    f"RunAgent cannot run on {type(runner).__name__}: it keeps each entity "
                    f"key's state (SEQ, memory, caches, continuation, inbox) in Beam's user "
                    f"state and sets an event-time timer for each HITL deadline, and this "
                    f"runner is {why}. Run it on a runner with state and timers: the "
                    f"DirectRunner or FnApiRunner locally, the PortableRunner (Flink, Spark "
                    f"through a job server) or Dataflow at scale (docs/pipeline.md, "
                    f"*Runners*)."
                )


class RunAgent(beam.PTransform):  # type: ignore[misc]
    """Run ``agent`` with ``registry`` over a PCollection of serialized ``AgentEnvelope``s.

    Input elements are ``bytes`` (a Pub/Sub read) or ``(key, bytes)`` (a Kafka read),
    told apart per element. Per key, in arrival order: events start activations,
    tool results and approvals resume them, export requests emit a snapshot.
    """

    def __init__(
        self, agent: Agent, registry: ToolRegistry, config: AgentConfig, label: str | None = None
    ) -> None:
        """Check the arguments now, naming the culprit (not at the first element).

        Raises:
            ConfigError: ``agent`` is not an ``Agent``, ``registry`` not a ``ToolRegistry``,
                or ``config`` not an ``AgentConfig``.
        """
        super().__init__(label)
        if not isinstance(agent, Agent):
            raise ConfigError(f"RunAgent: agent must be an Agent instance, got {agent!r}")
        if not isinstance(registry, ToolRegistry):
            raise ConfigError(f"RunAgent: registry must be a ToolRegistry, got {registry!r}")
        if not isinstance(config, AgentConfig):
            raise ConfigError(f"RunAgent: config must be an AgentConfig, got {config!r}")
        self._agent = agent
        self._registry = registry
        self._config = config

    def expand(self, pcoll: PCollection[Any]) -> RunAgentOutputs:
        refuse_runner_without_state_and_timers(getattr(pcoll.pipeline, "runner", None))
        routed = pcoll | "RouteEnvelopes" >> beam.ParDo(RouteEnvelopes()).with_output_types(
            tuple[bytes, bytes]
        ).with_outputs(TAG_ERRORS, main=_KEYED)
        keyed: Any = routed[_KEYED]
        if not isinstance(keyed.windowing.windowfn, GlobalWindows):
            # One serial history per key: state must not be split by window.
            keyed = keyed | "GlobalWindow" >> beam.WindowInto(GlobalWindows())
        results = keyed | "AgentDoFn" >> beam.ParDo(
            AgentDoFn(self._agent, self._registry, self._config)
        ).with_output_types(tuple[bytes, bytes]).with_outputs(
            AgentDoFn.TAG_INTENTS,
            AgentDoFn.TAG_APPROVALS,
            AgentDoFn.TAG_TRACE_BATCHES,
            AgentDoFn.TAG_SNAPSHOTS,
            AgentDoFn.TAG_ERRORS,
            main=AgentDoFn.TAG_OUTPUTS,
        )
        errors = (routed[TAG_ERRORS], results[AgentDoFn.TAG_ERRORS]) | "Errors" >> beam.Flatten()
        outs = RunAgentOutputs(
            intents=results[AgentDoFn.TAG_INTENTS],
            approvals=results[AgentDoFn.TAG_APPROVALS],
            outputs=results[AgentDoFn.TAG_OUTPUTS],
            trace_batches=results[AgentDoFn.TAG_TRACE_BATCHES],
            snapshots=results[AgentDoFn.TAG_SNAPSHOTS],
            errors=errors,
        )
        options = self._config.sink_options
        if self._config.traces_to is not None:
            _ = outs.trace_batches | "WriteTraces" >> beam.ParDo(
                WriteTraces(self._config.traces_to, options)
            )
        if self._config.snapshots_to is not None:
            _ = outs.snapshots | "WriteSnapshots" >> beam.ParDo(
                WriteSnapshots(self._config.snapshots_to, options)
            )
        return outs
