"""``ReplayResult``s from real replays: a key's history run through ``run_activation``
(``KeyHistory``, what the DoFn does per element), exported, and replayed by
``beam_agents.replay.engine.replay`` — the result the TUI gets in an incident.

One scenario per verdict, reusing the replay suite's agents and harness
(``tests/replay``): the same inputs the headless CLI's tests use.

``write_inputs`` also puts a scenario's inputs in files, for driving
``beam-agents-replay tui`` itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPLAY_TESTS = Path(__file__).resolve().parent.parent / "replay"
for _path in (REPLAY_TESTS, REPLAY_TESTS / "agents"):
    if str(_path) not in sys.path:
        # replay_agents must be importable as "replay_agents:AGENT", as the replay suite has it.
        sys.path.insert(0, str(_path))

import replay_agents  # noqa: E402
from replay_harness import T0, KeyHistory  # noqa: E402

from beam_agents import Agent  # noqa: E402
from beam_agents._protos import AgentEnvelope  # noqa: E402
from beam_agents.cli.parsing import CLI_NAMING  # noqa: E402
from beam_agents.replay.engine import replay  # noqa: E402
from beam_agents.replay.options import ReplayOptions  # noqa: E402
from beam_agents.replay.result import ReplayResult  # noqa: E402
from beam_agents.testing import approval_envelope, event_envelope  # noqa: E402


@dataclass(frozen=True)
class Inputs:
    """What an operator collects for one replay (seed §2), in memory."""

    snapshot: bytes
    traces: bytes
    event: bytes | None
    agent: str = "replay_agents:AGENT"
    registry: str = "replay_agents:TOOLS"
    seq: int | None = None
    what_if: bool = False

    def options(self) -> ReplayOptions:
        return ReplayOptions(
            snapshot=self.snapshot,
            traces=(self.traces,),
            event=self.event,
            agent=self.agent,
            registry=self.registry,
            seq=self.seq,
            what_if=self.what_if,
            naming=CLI_NAMING,  # as `tui` replays: refusals name the flags
        )


def _history(agent: Agent = replay_agents.AGENT) -> KeyHistory:
    return KeyHistory(agent, replay_agents.TOOLS, replay_agents.make_provider())


def _ask_inputs(recorded_by: Agent = replay_agents.AGENT, **overrides: str) -> Inputs:
    """A key that asked twice; the second activation (seq 2) is the one replayed."""
    history = _history(recorded_by)
    history.send(event_envelope(history.key, "ask", b"hello", time_ms=T0))
    target = event_envelope(history.key, "refund", b"where is my refund?", time_ms=T0 + 60_000)
    history.send(target)
    return Inputs(
        snapshot=history.export(),
        traces=history.trace_bytes(),
        event=target.SerializeToString(),
        **overrides,
    )


def reproduced_inputs() -> Inputs:
    return _ask_inputs()


def diverged_inputs() -> Inputs:
    """lookup_order returns something else today: diverged at that TOOL_CALL."""
    return _ask_inputs(registry="replay_agents:TOOLS_CHANGED_LOOKUP")


def cache_miss_inputs() -> Inputs:
    """Someone edited the system prompt: a loud miss naming messages[0]."""
    return _ask_inputs(agent="replay_agents:AGENT_NEW_PROMPT")


def reproduced_later_inputs() -> Inputs:
    """Seq 1 from the snapshot after seq 2: its writes judged, its end memory not."""
    history = _history()
    first = event_envelope(history.key, "ask", b"hello", time_ms=T0)
    history.send(first)
    history.send(event_envelope(history.key, "refund", b"where is my refund?", time_ms=T0 + 60_000))
    return Inputs(
        snapshot=history.export(),
        traces=history.trace_bytes(),
        event=first.SerializeToString(),
        seq=1,
    )


def memory_unseen_inputs() -> Inputs:
    """The agent counts its turns (``turns += 1``): the re-run reads its own write from the
    post-image, so that read is not judged (irreproducible, naming ``turns``)."""
    return _ask_inputs(replay_agents.COUNTER, agent="replay_agents:COUNTER")


def what_if_inputs() -> Inputs:
    """The refund's approval has not been processed yet: what would approving it do?"""
    history = _history()
    history.send(event_envelope(history.key, "refund", b"refund please", time_ms=T0))
    cont = history.results[-1]
    intent_id = next(e for e in cont.trace if e.kind == e.INTENT_STAGED).attributes[
        "beam_agents.intent_id"
    ].string_value
    answer = approval_envelope(history.key, intent_id, approved=True, time_ms=T0 + 120_000)
    return Inputs(
        snapshot=history.export(),
        traces=history.trace_bytes(),
        event=answer.SerializeToString(),
        what_if=True,
    )


def usage_error_inputs() -> Inputs:
    """An event for another key: the three inputs do not belong together (exit 2)."""
    inputs = _ask_inputs()
    stranger = AgentEnvelope()
    stranger.ParseFromString(inputs.event or b"")
    stranger.entity_key = b"someone-else"
    return Inputs(
        snapshot=inputs.snapshot,
        traces=inputs.traces,
        event=stranger.SerializeToString(),
    )


SCENARIOS: dict[str, Callable[[], Inputs]] = {
    "reproduced": reproduced_inputs,
    "diverged": diverged_inputs,
    "cache-miss": cache_miss_inputs,
    "what-if": what_if_inputs,
    "memory-unseen": memory_unseen_inputs,
    "reproduced-later": reproduced_later_inputs,
    "usage-error": usage_error_inputs,
}


def real_result(name: str) -> ReplayResult:
    """Replay scenario ``name`` with the engine and return its result."""
    return replay(SCENARIOS[name]().options())


def write_inputs(name: str, directory: Path) -> list[str]:
    """Write scenario ``name``'s inputs into ``directory``; return the CLI flags naming them."""
    inputs = SCENARIOS[name]()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "snapshot.pb").write_bytes(inputs.snapshot)
    (directory / "traces.pb").write_bytes(inputs.traces)
    flags = ["--snapshot", str(directory / "snapshot.pb"), "--traces", str(directory / "traces.pb")]
    if inputs.event is not None:
        (directory / "event.pb").write_bytes(inputs.event)
        flags += ["--event", str(directory / "event.pb")]
    flags += ["--agent", inputs.agent, "--registry", inputs.registry]
    if inputs.seq is not None:
        flags += ["--seq", str(inputs.seq)]
    return flags


if __name__ == "__main__":
    # python tests/replay_tui/real_results.py diverged /tmp/incident  -> prints the tui command line
    import shlex

    scenario, out = sys.argv[1], Path(sys.argv[2])
    print(" ".join(shlex.quote(f) for f in ["beam-agents-replay", "tui", *write_inputs(scenario, out)]))
