"""Replay's per-activation time limit: agent code that never ends is irreproducible (exit 3).

The hanging tools of ``isolation_agents`` end only when ``RELEASE`` is set: each test
sets it when done, and waits for the abandoned thread to end (a thread cannot be stopped).
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import isolation_agents as ia
import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import TraceEvent
from beam_agents.errors import ConfigError
from beam_agents.replay import Replayer
from beam_agents.replay.engine import replay
from beam_agents.replay.incidents.check import check_bundles
from beam_agents.replay.isolation.guard import late_attempts, still_running
from beam_agents.replay.naming import REPLAYER
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.reporting.json_doc import result_to_dict
from beam_agents.replay.reporting.text import render_report
from beam_agents.replay.result import Verdict
from beam_agents.testing import event_envelope


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    ia.RELEASE.clear()
    yield
    ia.RELEASE.set()
    deadline = time.monotonic() + 10
    while still_running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not still_running(), "the abandoned re-run did not end once released"


@pytest.fixture
def recorded() -> tuple[KeyHistory, object]:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    return history, event


def _replay(recorded: tuple[KeyHistory, object], registry: str, limit: float | None):  # type: ignore[no-untyped-def]
    history, event = recorded
    opts = options(
        history.export(),
        history.trace_bytes(),
        event=event,  # type: ignore[arg-type]
        registry=registry if ":" in registry else f"isolation_agents:{registry}",
    )
    from dataclasses import replace

    return replay(replace(opts, time_limit=limit))


@pytest.mark.parametrize("registry", ["TOOLS_LOOP", "TOOLS_SLEEP"])
def test_agent_code_that_never_ends_is_irreproducible_naming_the_limit_and_the_last_event(
    recorded: tuple[KeyHistory, object], registry: str
) -> None:
    started = time.monotonic()
    result = _replay(recorded, registry, 0.3)
    assert time.monotonic() - started < 10
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.exit_code == 3
    # The tool runs after ACTIVATION_START (event 0): the last event the re-run recorded.
    assert result.reason == (
        "the re-run ran past the time limit of 0.3 s and was not judged: it had reached "
        "event 0 (ACTIVATION_START 'start') of the 4 traced"
    ), result.reason
    assert "raise the limit with ReplayOptions(time_limit=SECONDS)" in result.error
    assert result.header.seq == 1  # the header says which activation it was
    # The events the re-run reached are shown, paired with the traced ones; the traced
    # events after them are not "missing" (it never got there), and nothing is judged.
    assert [(p.index, p.traced.kind, p.differs) for p in result.events] == [
        (0, TraceEvent.ACTIVATION_START, False)
    ]
    assert result.events[0].replayed is not None and result.first_divergence is None
    assert result.events_reached_only
    doc = result_to_dict(result)
    assert doc["events_reached_only"] is True and len(doc["events"]) == 1
    assert "  events: the first 1 the re-run reached before the time limit, 0 differ\n" in (
        render_report(result)
    )
    assert still_running()  # abandoned, not stopped: the guard stays in force meanwhile


def test_the_callers_own_code_refused_meanwhile_is_told_why(
    recorded: tuple[KeyHistory, object],
) -> None:
    """check_bundles(isolate=True, import_recorded=True) right after a replay that abandoned its re-run raised
    "process blocked: replay runs agent code isolated" at the caller, which runs no agent
    code: the refusal now says what keeps the guard in force, and until when."""
    import subprocess

    result = _replay(recorded, "TOOLS_SLEEP", 0.3)
    assert result.verdict is Verdict.IRREPRODUCIBLE and still_running()
    with pytest.raises(PermissionError) as caught:
        subprocess.run(["true"], check=False)
    message = str(caught.value)
    assert "a re-run abandoned at its time limit is still running in this process" in message
    assert "until it ends" in message and "(subprocess.Popen)" in message


def test_within_the_limit_the_verdict_is_the_comparisons(
    recorded: tuple[KeyHistory, object],
) -> None:
    assert _replay(recorded, "replay_agents:TOOLS", 30).verdict is Verdict.REPRODUCED
    assert _replay(recorded, "replay_agents:TOOLS", None).verdict is Verdict.REPRODUCED
    assert _replay(recorded, "replay_agents:TOOLS", 0).verdict is Verdict.REPRODUCED  # 0: no limit


def test_the_abandoned_re_run_stays_isolated_after_the_replay_returned(
    recorded: tuple[KeyHistory, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    host, port = server.getsockname()[:2]
    monkeypatch.setenv(ra.NETWORK_TARGET_ENV, f"{host}:{port}")
    monkeypatch.setenv(ia.HANG_SECONDS_ENV, "0.5")
    try:
        result = _replay(recorded, "TOOLS_LOOP_THEN_CONNECT", 0.1)
        assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
        deadline = time.monotonic() + 10  # it connects ~0.4 s after replay() returned
        while not any(f"{host}:{port}" in a.address for a in late_attempts()):
            assert time.monotonic() < deadline, "the abandoned re-run never tried to connect"
            time.sleep(0.02)
        readable, _, _ = select.select([server], [], [], 0.2)
        assert not readable, "the abandoned re-run reached the network"
    finally:
        server.close()


def test_the_replayer_takes_the_limit(recorded: tuple[KeyHistory, object]) -> None:
    history, event = recorded
    replayer = Replayer(agent=ra.AGENT, registry=ia.TOOLS_SLEEP, time_limit=0.2)
    result = replayer.replay(history.export(), history.trace_bytes(), event)  # type: ignore[arg-type]
    assert result.verdict is Verdict.IRREPRODUCIBLE
    assert "ran past the time limit of 0.2 s" in result.reason
    assert Replayer(agent=ra.AGENT, registry=ra.TOOLS, time_limit=0).time_limit is None


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), 1e12, 86_400.5, "5", True])
def test_a_time_limit_out_of_range_is_a_config_error_naming_the_range(bad: object) -> None:
    # A huge limit overflowed the wait's and the last resort's timers: an internal error.
    message = r"time_limit=? must be a number of seconds from 0 to 86400 \(a day; 0: no limit\)"
    with pytest.raises(ConfigError, match=message):
        Replayer(agent=ra.AGENT, registry=ra.TOOLS, time_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        ReplayOptions(snapshot=b"", traces=(), agent="m:A", registry="m:T", time_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        check_bundles([], time_limit=bad, import_recorded=True)  # type: ignore[arg-type]


def test_an_import_that_never_ends_is_irreproducible(recorded: tuple[KeyHistory, object]) -> None:
    history, event = recorded
    from dataclasses import replace

    opts = options(
        history.export(),
        history.trace_bytes(),
        event=event,  # type: ignore[arg-type]
        agent="hang_at_import:AGENT",
    )
    result = replay(replace(opts, time_limit=0.2))
    assert result.verdict is Verdict.IRREPRODUCIBLE, result.reason
    assert result.reason == (
        "importing the agent code (agent=, registry=, hitl=) ran past the time limit of "
        "0.2 s, so nothing was re-run or judged"
    )


def test_agent_code_ending_the_process_inside_the_limit_is_still_refused(
    recorded: tuple[KeyHistory, object],
) -> None:
    result = _replay(recorded, "TOOLS_EXIT", 30)
    assert result.verdict is Verdict.USAGE_ERROR
    assert "os._exit(0)" in result.reason


def test_the_limit_reason_reads_only_the_last_event_the_re_run_recorded() -> None:
    """Hostile pass: the reason parsed every recorded event (list(ctx.events)) to name the
    last one: a re-run looping until the limit records millions, GBs once parsed."""
    from collections.abc import Sequence
    from types import SimpleNamespace

    from beam_agents import trace_events as te
    from beam_agents._protos import TraceEvent
    from beam_agents.replay.isolation.time_limit import RerunRanPast

    last = te.make_event(
        entity_key=KEY, seq=1, index=2_999_999, kind=TraceEvent.TOOL_CALL, name="lookup_order",
        now_ms=T0,
    )  # fmt: skip

    class Recorded(Sequence[TraceEvent]):
        def __len__(self) -> int:
            return 3_000_000

        def __getitem__(self, index: object) -> TraceEvent:
            if index not in (-1, 2_999_999):
                raise AssertionError(f"read event {index!r}")
            return last

        def __iter__(self) -> Any:
            raise AssertionError("read every event")

    refused = RerunRanPast(0.5, SimpleNamespace(events=Recorded()), None, REPLAYER)

    assert "it had reached event 2999999 (TOOL_CALL 'lookup_order')" in refused.message
