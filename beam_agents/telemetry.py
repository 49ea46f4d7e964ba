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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

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
        """Compact JSON; ``decode`` reads it back."""
        calls = {
            str(index): {k: v for k, v in vars(details).items() if v not in (None, "", ())}
            for index, details in self.llm_calls.items()
        }
        return json.dumps(
            {
                "v": TELEMETRY_VERSION,
                "t0": self.started_unix_ns,
                "agent": self.agent_name,
                "provider": self.provider_name,
                "spans": [value for span in self.spans for value in span],
                "end": self.finished_ns,
                "llm": calls,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ActivationTelemetry | None:
        """The telemetry ``encode`` wrote; None for empty or unreadable bytes (no times)."""
        if not data:
            return None
        try:
            raw: dict[str, Any] = json.loads(data)
            if raw.get("v") != TELEMETRY_VERSION:
                return None
            flat = [int(v) for v in raw["spans"]]
            calls = {}
            for index, values in raw.get("llm", {}).items():
                values = dict(values)
                if "stop_sequences" in values:
                    values["stop_sequences"] = tuple(values["stop_sequences"])
                calls[int(index)] = LlmCallDetails(**values)
            return cls(
                started_unix_ns=int(raw["t0"]),
                agent_name=str(raw.get("agent", "")),
                provider_name=str(raw.get("provider", "")),
                spans=list(zip(flat[::2], flat[1::2], strict=True)),
                llm_calls=calls,
                finished_ns=int(raw.get("end", 0)),
            )
        except (ValueError, TypeError, KeyError):
            return None


class _Measurement:
    __slots__ = ("opened", "origin", "telemetry")

    def __init__(self, telemetry: ActivationTelemetry) -> None:
        self.telemetry = telemetry
        self.origin = time.perf_counter_ns()
        self.opened: int | None = None


_OPEN: contextvars.ContextVar[_Measurement | None] = contextvars.ContextVar(
    "beam_agents_telemetry", default=None
)


@contextmanager
def measure_activation(*, agent_name: str, provider_name: str) -> Iterator[ActivationTelemetry]:
    """Measure the activation run inside the block (on this thread); yields its telemetry.

    The telemetry is complete when the block ends.
    """
    telemetry = ActivationTelemetry(
        started_unix_ns=time.time_ns(), agent_name=agent_name, provider_name=provider_name
    )
    measurement = _Measurement(telemetry)
    token = _OPEN.set(measurement)
    try:
        yield telemetry
    finally:
        _OPEN.reset(token)
        telemetry.finished_ns = time.perf_counter_ns() - measurement.origin


def span_opens() -> None:
    """An operation whose event is recorded when it ends starts now (a model or tool call)."""
    measurement = _OPEN.get()
    if measurement is not None:
        measurement.opened = time.perf_counter_ns() - measurement.origin


def event_recorded(index: int) -> None:
    """Trace event ``index`` was just recorded: its span ends now (and began at the open)."""
    measurement = _OPEN.get()
    if measurement is None:
        return
    now = time.perf_counter_ns() - measurement.origin
    spans = measurement.telemetry.spans
    if index != len(spans):  # not the context's next event (never in run_activation)
        return
    start = measurement.opened if measurement.opened is not None else now
    measurement.opened = None
    spans.append((start, now))


def llm_call_details(index: int, request: LlmRequest, response: LlmResponse | None) -> None:
    """The details of LLM_CALL event ``index`` (a measured activation only)."""
    measurement = _OPEN.get()
    if measurement is None:
        return
    params = request.params
    measurement.telemetry.llm_calls[index] = LlmCallDetails(
        response_id=response.id if response is not None else "",
        temperature=params.temperature if params.HasField("temperature") else None,
        top_p=params.top_p if params.HasField("top_p") else None,
        max_tokens=params.max_tokens if params.HasField("max_tokens") else None,
        seed=params.seed if params.HasField("seed") else None,
        stop_sequences=tuple(params.stop),
    )
