"""Benchmark: opening the TUI and moving through a huge activation (not a test; prints numbers).

For a 50-event and a 100,000-event activation (a reproduced ``ReplayResult`` of
realistic events with values shaped like the engine's, about six per event —
``--no-values`` leaves them out — built beforehand: the engine's time is not the
TUI's), runs the app headless and measures:

  (a) first paint: from entering the app to the first frame written with the
      timeline's rows in it (target <= 0.5 s);
  (b) ``j``: from sending the key to the frame showing the moved cursor, with
      the detail and step panes updated (median of N presses; target <= 50 ms).

Frames are timed where Textual hands them to the driver (``App._display``),
so the numbers include layout, every widget's render and the compositor, not
the Pilot's idle waits. It prints each number and its ratio to the target.

Those results hold tuples of pairs and values. ``--engine`` also measures the
engine's own result of a replayed activation of the largest ``--events`` size
(``bench/hostile.py``'s case (a): tool calls), whose pairs and values are built
when read (docs/replay.md §6), so the detail pane derives each event's values;
and ``/`` on it, side by side: a query found nowhere (every row read) by the scan
that reads every row's values per search (``search_position``, the search before
the index) and by the TUI's ``SearchIndex`` (its first search builds it; then one
more search); and in the app, ``/``, the query typed at 10 keys a second (the index
is built meanwhile), ``enter``: the time from ``enter`` to the status line's answer.

``--cli`` measures instead the console script as an operator runs it, replay included
(``beam-agents-replay tui ...`` in a pseudo-terminal, ``bench/terminal.py``), on
``bench/hostile.py``'s activation of 1,000, 10,000 and 100,000 events (seq 2 of a trace
that holds seq 1 too): from the process's start, when the loading screen is up, when
the first timeline rows reach the terminal (target <= 0.5 s), and the verdict; then,
once the app has settled (no write for 1 s after the verdict), the app left alone for
5 s: the bytes and write bursts per second it sends the terminal (target: none) and the
share of a core it uses. Beside them, in the same run, the floor on this machine now:
a bare ``python -c 'import textual.app'``, and a minimal Textual app's first paint in
the same pseudo-terminal (one Static), so the first rows' ratio to the floor means
something on a loaded machine: first rows and floor are each the median of 3 runs,
alternated so that both see the same load. Our packages are byte-compiled first (``compileall``,
as a wheel install does): without it each run compiles every module of ours again.

    .venv/bin/python bench/tui_open.py [--events 50,100000] [--presses 40] [--size 160x48] [--engine]
    .venv/bin/python bench/tui_open.py --cli [--events 1000,10000,100000] [--size 160x48]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from textual import events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "replay_tui"))

import tui_results

from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp
from replay_tui.widgets.timeline import Timeline

FIRST_PAINT_TARGET_S = 0.5
KEYPRESS_TARGET_S = 0.050
SEARCH_TARGET_S = 0.6


class TimedApp(ReplayApp):
    """ReplayApp that timestamps every frame it writes."""

    def __init__(self, result: ReplayResult) -> None:
        super().__init__(result)
        self.frames: list[float] = []
        self.frame_event = asyncio.Event()

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)
        self.frames.append(time.perf_counter())
        self.frame_event.set()


async def measure(
    result: ReplayResult, presses: int, size: tuple[int, int]
) -> tuple[float, list[float]]:
    app = TimedApp(result)
    started = time.perf_counter()
    async with app.run_test(size=size) as pilot:
        # (a) the first frame after the timeline rendered its rows
        while True:
            timelines = app.screen.query(Timeline)
            if timelines and timelines.first().first_paint_done and app.frames:
                break
            app.frame_event.clear()
            await app.frame_event.wait()
        first_paint = app.frames[-1] - started
        timeline = app.screen.query_one(Timeline)
        timeline.action_first()
        await pilot.pause(0.2)

        # (b) j presses, each timed to the frame that shows it
        times = []
        driver = app._driver
        assert driver is not None
        for _ in range(presses):
            before = timeline.position
            app.frame_event.clear()
            sent = time.perf_counter()
            driver.send_message(events.Key("j", "j"))
            while True:
                await app.frame_event.wait()
                if timeline.position != before:
                    break
                app.frame_event.clear()
            times.append(app.frames[-1] - sent)
            await asyncio.sleep(0.03)  # let the frame settle, as a typing human would
        await pilot.press("q")
    return first_paint, times


def _engine_result(count: int) -> ReplayResult:
    """The engine's result of replaying ``bench/hostile.py``'s activation of ``count`` events."""
    import os
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hostile

    from beam_agents.replay.engine import replay
    from beam_agents.replay.options import ReplayOptions
    from beam_agents.testing import ScriptedProvider

    os.environ[hostile.CALLS_ENV] = str(count)
    snapshot, trace, event, _ = hostile._record(hostile.MANY_CALLS, ScriptedProvider(lambda r: "x"))
    with tempfile.TemporaryDirectory() as tmp:
        hostile._write(Path(tmp), snapshot, trace, event)
        del snapshot, trace
        result = replay(
            ReplayOptions(
                snapshot=f"{tmp}/snapshot.pb",
                traces=(f"{tmp}/traces.pb",),
                event=f"{tmp}/event.pb",
                agent="hostile:MANY_CALLS",
                registry="hostile:TOOLS",
                seq=2,
            )
        )
    assert result.exit_code == 0, result.reason
    return result


def measure_search(result: ReplayResult) -> None:
    """Time ``/`` for a text no row holds: the per-search scan vs the index, same result."""
    from replay_tui.render.detail import values_by_event
    from replay_tui.render.search import SearchIndex, search_position

    query = "no such text anywhere"
    values = values_by_event(result)
    started = time.perf_counter()
    assert search_position(result, values, query, -1) is None
    scan = time.perf_counter() - started
    index = SearchIndex(result, values_by_event(result))
    started = time.perf_counter()
    assert index.find(query, -1) is None
    first = time.perf_counter() - started
    started = time.perf_counter()
    assert index.find(query, 0) is None
    again = time.perf_counter() - started
    print(
        f"{len(result.events):>7} events, / for a text found nowhere: scan of every row's values "
        f"{scan * 1000:7.1f} ms   index: first search (builds it) {first * 1000:7.1f} ms "
        f"(ratio {first / scan:.2f}), next search {again * 1000:6.1f} ms "
        f"(target {SEARCH_TARGET_S * 1000:.0f} ms)"
    )


async def measure_typed_search(result: ReplayResult, size: tuple[int, int]) -> float:
    """Seconds from ``enter`` to the status line answering a search typed after ``/``."""
    from textual.widgets import Static

    query = "no such text anywhere"
    app = TimedApp(result)
    async with app.run_test(size=size) as pilot:
        await pilot.press("slash")
        for key in query:
            await pilot.press("space" if key == " " else key)
            await asyncio.sleep(0.1)
        status = app.screen.query_one("#status", Static)
        driver = app._driver
        assert driver is not None
        sent = time.perf_counter()
        driver.send_message(events.Key("enter", "\r"))
        while "no event's values or name hold it" not in str(status.render()):
            await asyncio.sleep(0.001)
        answered = time.perf_counter() - sent
        await pilot.press("q")
    return answered


IDLE_SECONDS = 5.0
FIRST_ROWS_RUNS = 3
SETTLE_QUIET_S = 1.0

_MINIMAL_APP = """
from textual.app import App
from textual.widgets import Static

class Minimal(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        yield Static("MINIMAL-READY")

Minimal().run()
"""


def _floor(size: tuple[int, int], runs: int = 3) -> tuple[float, float | None]:
    """Seconds, now (the median of ``runs``): a bare ``import textual.app``; a minimal
    app's first paint in the same pseudo-terminal."""
    import subprocess

    from terminal import Terminal

    bare: list[float] = []
    painted: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import textual.app"], check=True)
        bare.append(time.perf_counter() - started)
        term = Terminal.start([sys.executable, "-c", _MINIMAL_APP], size=size)
        at = term.wait_for(b"MINIMAL-READY", 60)
        term.stop()
        if at is not None:
            painted.append(at)
    return statistics.median(bare), statistics.median(painted) if painted else None


def _settle(term: Any, quiet: float, longest: float) -> float:
    """Read until ``quiet`` seconds pass with no write (at most ``longest``); seconds read."""
    started = time.perf_counter()
    while time.perf_counter() - started < longest:
        count = len(term.chunks)
        term.read(quiet)
        if len(term.chunks) == count:
            break
    return time.perf_counter() - started


def _compile_ours() -> None:
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("beam_agents", "replay_tui", "bench"):
        compileall.compile_dir(str(root / package), quiet=1)


def measure_cli(counts: list[int], size: tuple[int, int]) -> None:
    """The console script in a pty on hostile.py's activations (see the module docstring)."""
    import os
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hostile
    from terminal import Terminal

    from beam_agents.testing import ScriptedProvider

    script = str(Path(sys.executable).parent / "beam-agents-replay")
    _compile_ours()
    print(f"load average now: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            os.environ[hostile.CALLS_ENV] = str(count)
            snapshot, trace, event, _ = hostile._record(
                hostile.MANY_CALLS, ScriptedProvider(lambda r: "x")
            )
            flags = hostile._write(Path(tmp) / str(count), snapshot, trace, event)
            del snapshot, trace
            env = {
                **os.environ,
                "PYTHONPATH": str(Path(__file__).resolve().parent),
                hostile.CALLS_ENV: str(count),
            }
            argv = [script, "tui", *flags, "--agent", "hostile:MANY_CALLS", "--registry",
                    "hostile:TOOLS"]  # fmt: skip
            # First rows, alternating with the floor's runs so both see the same load: the
            # median of FIRST_ROWS_RUNS (the others quit at the first rows), then the run
            # kept to the verdict and the idle window.
            bare, minimal = _floor(size, runs=1)
            samples: list[float] = []
            floors: list[tuple[float, float | None]] = [(bare, minimal)]
            for _ in range(FIRST_ROWS_RUNS - 1):
                early = Terminal.start(argv, size=size, env=env)
                at = early.wait_for(b"START", 300)
                early.stop()
                if at is not None:
                    samples.append(at)
                floors.append(_floor(size, runs=1))
            term = Terminal.start(argv, size=size, env=env)
            rows = term.wait_for(b"START", 300)
            if rows is not None:
                samples.append(rows)
            rows = statistics.median(samples) if samples else None
            # Not waited for: when the first rows are read by the first frame, it never shows.
            loading = term.wait_for(b"Replaying the activation", 0)
            verdict = term.wait_for(b"REPRODUCED", 300)
            settled = _settle(term, SETTLE_QUIET_S, 20.0)  # the last layout and notices
            per_s, bursts, cpu = term.idle(IDLE_SECONDS)
            code = term.stop()
            floors.append(_floor(size, runs=1))
            bare = statistics.median(f[0] for f in floors)
            painted = [f[1] for f in floors if f[1] is not None]
            minimal = statistics.median(painted) if painted else None

            def ms(value: float | None) -> str:
                return "  never" if value is None else f"{value * 1000:7.0f}"

            print(
                f"{count:>7} events, as the CLI runs it: loading screen "
                + (
                    "not shown (the rows came first), "
                    if loading is None
                    else f"{ms(loading)} ms, "
                )
                + f"first rows (median of {FIRST_ROWS_RUNS}) {ms(rows)} ms (target {FIRST_PAINT_TARGET_S * 1000:.0f} ms"
                + (f", ratio {rows / FIRST_PAINT_TARGET_S:.2f}" if rows else "")
                + f"), verdict {ms(verdict)} ms;  idle (settled {settled:.1f} s after the "
                f"verdict): {per_s:6.0f} B/s, {bursts:4.1f} writes/s (target 0), "
                f"{cpu * 100:4.1f}% of a core;  exit {code}"
            )
            over = (
                f", first rows over it {ms(rows - minimal)} ms "
                f"(ratio to the target {(rows - minimal) / FIRST_PAINT_TARGET_S:.2f})"
                if rows is not None and minimal is not None
                else ""
            )
            print(
                f"{'':>7}  floor now (medians): python -c 'import textual.app' {ms(bare)} ms, a minimal "
                f"Textual app's first paint {ms(minimal)} ms; first rows / minimal app "
                + (f"{rows / minimal:.2f}" if rows and minimal else "n/a")
                + over
                + f";  load {os.getloadavg()[0]:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", action="store_true", help="the console script in a pty")
    parser.add_argument("--events", default="50,100000")
    parser.add_argument("--presses", type=int, default=40)
    parser.add_argument("--size", default="160x48")
    parser.add_argument(
        "--no-values", action="store_true", help="results without values (the engine's values off)"
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="also measure the engine's result of a replayed activation of the largest size",
    )
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    if args.cli:
        events = "1000,10000,100000" if args.events == "50,100000" else args.events
        measure_cli([int(c) for c in events.split(",")], (width, height))
        return
    counts = [int(c) for c in args.events.split(",")]
    runs: list[tuple[str, int, Any]] = [("", count, None) for count in counts]
    if args.engine:
        runs.append(("engine's ", max(counts), _engine_result))
    for label, count, build in runs:
        built = time.perf_counter()
        if build is None:
            result = tui_results.large_result(count, values=not args.no_values)
        else:
            result = build(count)
        build_s = time.perf_counter() - built
        first_paint, times = asyncio.run(measure(result, args.presses, (width, height)))
        median = statistics.median(times)
        print(
            f"{count:>7} events, {len(result.values):>7} {label}values "
            f"(result built in {build_s:.2f} s, not counted): "
            f"first paint {first_paint * 1000:7.1f} ms (target {FIRST_PAINT_TARGET_S * 1000:.0f} ms, "
            f"ratio {first_paint / FIRST_PAINT_TARGET_S:.2f})   "
            f"j median {median * 1000:5.1f} ms  p90 {sorted(times)[int(len(times) * 0.9)] * 1000:5.1f} ms "
            f"(target {KEYPRESS_TARGET_S * 1000:.0f} ms, ratio {median / KEYPRESS_TARGET_S:.2f})"
        )
        if build is not None:
            measure_search(result)
            typed = asyncio.run(measure_typed_search(result, (width, height)))
            print(
                f"{len(result.events):>7} events, in the app: / then the query typed at 10 keys/s "
                f"then enter: answered {typed * 1000:.1f} ms after enter "
                f"(target {SEARCH_TARGET_S * 1000:.0f} ms)"
            )


if __name__ == "__main__":
    main()
