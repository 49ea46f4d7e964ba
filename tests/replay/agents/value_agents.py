"""Agents whose values are hostile to replay's reports, importable as ``value_agents:ATTR``.

``ASKS`` makes one model call; with ``non_json_provider`` its answer carries tool calls
whose arguments are not printable JSON (``NaN``, ``1e999``, 400 levels deep).
``NAN_TEMPERATURE`` asks with a temperature of NaN. ``SHIFTY`` raises an exception whose
``__str__`` works once and raises after; ``STALLS`` one whose ``__str__`` waits for
``RELEASE`` (agent code running after the activation ended).
"""

from __future__ import annotations

import threading
from typing import Any

from replay_agents import MODEL, PROVIDER_NAME, NotesAgent

from beam_agents import Done
from beam_agents._protos import Event, LlmResponse, ToolCall
from beam_agents.agent import Outcome
from beam_agents.context import AgentContext
from beam_agents.testing import ScriptedProvider, chat_request

NON_JSON_ARGUMENTS = ("NaN", "[1e999]", "[" * 400 + "]" * 400, "-Infinity")


def non_json_provider() -> ScriptedProvider:
    calls = [
        ToolCall(id=f"c{i}", name="x", arguments_json=a) for i, a in enumerate(NON_JSON_ARGUMENTS)
    ]
    return ScriptedProvider(
        lambda request: LlmResponse(text="t", model=request.model, tool_calls=calls),
        name=PROVIDER_NAME,
    )


class AsksOnce(NotesAgent):
    temperature: float | None = None

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        params: dict[str, Any] = (
            {} if self.temperature is None else {"temperature": self.temperature}
        )
        ctx.complete(chat_request(MODEL, ("user", "hi"), **params))
        return Done(output=b"ok")


class NanTemperature(AsksOnce):
    temperature = float("nan")


STR_CALLS = {"n": 0}
RELEASE = threading.Event()


class ShiftyError(Exception):
    def __str__(self) -> str:
        STR_CALLS["n"] += 1
        if STR_CALLS["n"] > 1:
            raise RuntimeError("str() called again")
        return "the first str()"


class StallingError(Exception):
    def __str__(self) -> str:
        RELEASE.wait(60)
        return "released"


class RaisesShifty(NotesAgent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        STR_CALLS["n"] = 0
        raise ShiftyError()


class RaisesStalling(NotesAgent):
    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        raise StallingError()


ASKS = AsksOnce()
NAN_TEMPERATURE = NanTemperature()
SHIFTY = RaisesShifty()
STALLS = RaisesStalling()
