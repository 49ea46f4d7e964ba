"""Real wall times of an activation, measured beside its trace and never inside it.

A trace event holds only what a re-run reproduces (DESIGN §4): its times are the
activation clock, so every span built from the trace alone would have zero length and
sit at the event's time. What a tracing UI needs as well — when each step really ran,
for how long, which agent and provider, the provider's response id and the request's
sampling parameters — is measured here, on a side channel: the DoFn opens a
``measure_activation`` around each activation, the context notes each event as it
records it, and the DoFn emits the resulting ``ActivationTelemetry`` next to the
activation's trace bytes (``RunAgentOutputs.trace_batches``). The trace bytes do not
change (tests/test_core_golden.py), and replay, which opens no measurement, records
nothing: each hook is one ``ContextVar.get`` when no measurement is open.

The encoding (``encode``/``decode``) is JSON, versioned by ``TELEMETRY_VERSION``; it is
not a replay input and nothing compares it.
"""

from __future__ import annotations

import contextvars
import json
import time
from dataclasses import dataclass, field

from beam_agents._protos import LlmRequest, LlmResponse

__all__ = [
    "TELEMETRY_VERSION",
    "ActivationTelemetry",
    "LlmCallDetails",
    "event_recorded",
    "llm_call_details",
    "measure_activation",
    "span_opens",
]

TELEMETRY_VERSION = 1
"""The version of ``ActivationTelemetry.encode``'s JSON."""


@dataclass(frozen=True)
class LlmCallDetails:
    """What an LLM_CALL's trace event does not hold, from the request and the response."""

    response_id: str = ""
    """The provider's id of the response (``chatcmpl-...``, ``msg_...``); empty if none."""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop_sequences: tuple[str, ...] = ()


@dataclass
class ActivationTelemetry:
    """One activation's wall times and details, by trace event index."""

    started_unix_ns: int
    """Wall clock (``time.time_ns``) when the activation started."""
    agent_name: str = ""
    """The agent's name (its ``name`` attribute, else its class name)."""
    provider_name: str = ""
    """The provider's ``name`` (the ``gen_ai.provider.name`` of the agent span)."""
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Per trace event, in index order: (start, end) in ns after ``started_unix_ns``."""
    llm_calls: dict[int, LlmCallDetails] = field(default_factory=dict)
    """Per LLM_CALL event index: its details."""
    finished_ns: int = 0
    """ns after ``started_unix_ns`` when the activation returned (0 while it runs)."""

    def span_unix_ns(self, index: int) -> tuple[int, int] | None:
        """(start, end) wall times of event ``index`` in ns since the epoch, or None.

        Event 0 (``ACTIVATION_START``) is the activation's root span: it lasts from the
        start to the end of the whole activation.
        """
        if not 0 <= index < len(self.spans):
            return None
        base = self.started_unix_ns
        if index == 0:
            end = max(self.finished_ns, self.spans[-1][1])
            return base, base + end
        start, end = self.spans[index]
        return base + start, base + end

    def encode(self) -> bytes:
        """Compact JSON (a list, not an object: this runs once per activation); ``decode``
        reads it back."""
        calls = [
            [
                index,
                d.response_id,
                d.temperature,
                d.top_p,
                d.max_tokens,
                d.seed,
                list(d.stop_sequences),
            ]
            for index, d in self.llm_calls.items()
        ]
        flat = [value for span in self.spans for value in span]
        return _ENCODER.encode(
            [
                TELEMETRY_VERSION,
                self.started_unix_ns,
                self.agent_name,
                self.provider_name,
                flat,
                self.finished_ns,
                calls,
            ]
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ActivationTelemetry | None:
        """The telemetry ``encode`` wrote; None for empty or unreadable bytes (no times)."""
        if not data:
            return None
        try:
            raw = json.loads(data)
            if not isinstance(raw, list) or len(raw) != 7 or raw[0] != TELEMETRY_VERSION:
                return None
            _, started, agent, provider, flat, finished, calls = raw
            spans = [int(v) for v in flat]
            details = {
                int(index): LlmCallDetails(
                    response_id=str(response_id),
                    temperature=temperature,
                    top_p=top_p,
                    max_tokens=max_tokens,
                    seed=seed,
                    stop_sequences=tuple(stop),
                )
                for index, response_id, temperature, top_p, max_tokens, seed, stop in calls
            }
            return cls(
                started_unix_ns=int(started),
                agent_name=str(agent),
                provider_name=str(provider),
                spans=list(zip(spans[::2], spans[1::2], strict=True)),
                llm_calls=details,
                finished_ns=int(finished),
            )
        except (ValueError, TypeError):
            return None


_ENCODER = json.JSONEncoder(separators=(",", ":"))


class _Measurement:
    """The raw marks of one open measurement (``perf_counter_ns``), turned into spans at exit.

    The hooks only append a clock reading: they run for every trace event.
    """

    __slots__ = ("ends", "opens", "origin", "telemetry")

    def __init__(self, telemetry: ActivationTelemetry) -> None:
        self.telemetry = telemetry
        self.origin = time.perf_counter_ns()
        self.ends: list[int] = []
        """When each event was recorded, by index."""
        self.opens: dict[int, int] = {}
        """When the operation of event ``i`` began, for the events that have one."""

    def finish(self) -> None:
        origin, opens = self.origin, self.opens
        spans = self.telemetry.spans
        for index, end in enumerate(self.ends):
            spans.append((opens.get(index, end) - origin, end - origin))
        self.telemetry.finished_ns = time.perf_counter_ns() - origin


_OPEN: contextvars.ContextVar[_Measurement | None] = contextvars.ContextVar(
    "beam_agents_telemetry", default=None
)


class measure_activation:
    """Measure the activation run inside the ``with`` block (on this thread).

    ``with measure_activation(agent_name=..., provider_name=...) as telemetry:``; the
    telemetry is complete when the block ends. A class, not a generator: it runs once
    per activation, and contextlib's machinery cost more than the measuring.
    """

    __slots__ = ("_measurement", "_token")

    def __init__(self, *, agent_name: str, provider_name: str) -> None:
        telemetry = ActivationTelemetry(
            started_unix_ns=time.time_ns(), agent_name=agent_name, provider_name=provider_name
        )
        self._measurement = _Measurement(telemetry)
        self._token: contextvars.Token[_Measurement | None] | None = None

    def __enter__(self) -> ActivationTelemetry:
        self._token = _OPEN.set(self._measurement)
        return self._measurement.telemetry

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _OPEN.reset(self._token)
            self._token = None
        self._measurement.finish()


def span_opens() -> None:
    """An operation whose event is recorded when it ends starts now (a model or tool call)."""
    measurement = _OPEN.get()
    if measurement is not None:
        measurement.opens[len(measurement.ends)] = time.perf_counter_ns()


def event_recorded(index: int) -> None:
    """Trace event ``index`` was just recorded: its span ends now (and began at its open).

    ``index`` is the context's next event in ``run_activation``; any other call (a
    context recording outside an activation's order) is not timed.
    """
    measurement = _OPEN.get()
    if measurement is not None and index == len(measurement.ends):
        measurement.ends.append(time.perf_counter_ns())


def llm_call_details(index: int, request: LlmRequest, response: LlmResponse | None) -> None:
    """The details of LLM_CALL event ``index`` (a measured activation only)."""
    measurement = _OPEN.get()
    if measurement is None:
        return
    response_id = response.id if response is not None else ""
    if not request.HasField("params"):  # most requests: no sampling parameters
        measurement.telemetry.llm_calls[index] = LlmCallDetails(response_id=response_id)
        return
    params = request.params
    measurement.telemetry.llm_calls[index] = LlmCallDetails(
        response_id=response_id,
        temperature=params.temperature if params.HasField("temperature") else None,
        top_p=params.top_p if params.HasField("top_p") else None,
        max_tokens=params.max_tokens if params.HasField("max_tokens") else None,
        seed=params.seed if params.HasField("seed") else None,
        stop_sequences=tuple(params.stop),
    )
