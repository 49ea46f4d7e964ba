"""Agents that attack the doctor itself rather than break a replay-safe rule by accident:
each ends, forks, stalls or writes terminal escapes, in the pipeline's run or only in a
replay (``DOCTOR_HOSTILE_PIPELINE`` is set in the pipeline's environment and not in the
``env`` condition's). tests/doctor/test_hostile.py says what the doctor must do with each.
"""

from __future__ import annotations

import os
import time

from beam_agents import Agent, Done, ToolRegistry
from tests.doctor.agents.common import ask

IN_PIPELINE = "DOCTOR_HOSTILE_PIPELINE"
FORKED_PIDS = "DOCTOR_HOSTILE_PIDS"
"""A file the forking agent appends its children's pids to (for the test to look for)."""


def _answer(ctx, event, extra: str = "") -> Done:
    return Done(output=ctx.complete(ask(event.payload.decode() + extra)).text.encode())


class EndsThePipelineWorker(Agent):
    def start(self, ctx, event):
        os._exit(0)


class Forks(Agent):
    def start(self, ctx, event):
        child = os.fork()
        if child == 0:  # left running for an hour, unless the doctor ends it
            time.sleep(3600)
            os._exit(0)
        with open(os.environ[FORKED_PIDS], "a") as pids:
            pids.write(f"{child}\n")
        return _answer(ctx, event)


class EndsItsReplays(Agent):
    def start(self, ctx, event):
        if not os.environ.get(IN_PIPELINE):
            os._exit(3)
        return _answer(ctx, event)


class StallsItsReplays(Agent):
    def start(self, ctx, event):
        if not os.environ.get(IN_PIPELINE):
            time.sleep(3600)
        return _answer(ctx, event)


class WritesEscapes(Agent):
    def start(self, ctx, event):
        print("\x1b[2J\x1b]0;owned\x07")
        name = os.environ.get("\x1b[2J\x1b[31mEVIL\x1b]0;t\x07", "")  # noqa: SIM112
        return _answer(ctx, event, name)


ENDS_PIPELINE = EndsThePipelineWorker()
FORKS = Forks()
ENDS_REPLAYS = EndsItsReplays()
STALLS_REPLAYS = StallsItsReplays()
ESCAPES = WritesEscapes()
TOOLS = ToolRegistry([])
