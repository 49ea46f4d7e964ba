"""Benchmark: the replay CLI's start-up, its scan of a big trace stream, and its memory (not a test).

Prints, in one run:

  1. the wall time of a headless replay (the console script, in a subprocess) of a
     50-event activation, against ``python -c "import beam_agents._protos"``
     (target ratio <= 3: nothing heavy on the way to a verdict), and the same with
     ``--time-limit 0`` (no watchdog process: what the limit's last resort costs);
  2. the time to replay one key's activation out of a 1,000,000-event stream (in
     process, and as the console script) against bare frame splitting of that file
     (``iter_frames``);
  3. the peak RSS of that replay in a fresh process (target <= 64 MB).

    .venv/bin/python bench/replay_cli.py [--events N] [--rounds N] [--out DIR]

This file is also the agent module the measured replays import
(``--agent replay_cli:AGENT``): it imports only beam_agents' core at module level.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import Event
from beam_agents._wire import frame
from beam_agents.context import AgentContext
from beam_agents.testing import ScriptedProvider, chat_request

EVENTS_PER_ACTIVATION = 50
CALLS = 24  # 24 tool calls + 24 model calls + start + end = 50 events
RATIO_TARGET = 3.0
RSS_TARGET_MB = 64.0
KEY = b"bench-key-0000000"
T0 = 1_734_000_000_000
HERE = Path(__file__).resolve().parent
SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")


@tool
def lookup(item: int) -> dict[str, Any]:
    """A read-only tool."""
    return {"item": item, "status": "ok"}


TOOLS = ToolRegistry([lookup])


class BenchAgent(Agent):
    """Alternates a tool call and a model call, 24 times each."""

    def start(self, ctx: AgentContext, event: Event) -> Done:
        answers = []
        for i in range(CALLS):
            ctx.call("lookup", item=i)
            answers.append(ctx.complete(chat_request("bench-model", ("user", f"q{i}"))).text)
        ctx.memory["answers"] = len(answers)
        return Done(output="|".join(answers).encode())


AGENT = BenchAgent()


def build_inputs(directory: Path) -> tuple[list[bytes], bytes, bytes]:
    """Run the activation as the DoFn would; its frames, snapshot and event bytes."""
    from beam_agents import AgentConfig
    from beam_agents.activation import ActivationCommit
    from beam_agents.testing import PipelineKey, event_envelope, export_request_envelope
    from beam_agents.trace_events import serialize_trace_event

    provider = ScriptedProvider(lambda r: f"a:{r.messages[-1].content}", name="bench")
    key = PipelineKey(AGENT, TOOLS, AgentConfig(provider_factory=lambda: provider), entity_key=KEY)
    event = event_envelope(KEY, "bench", b"go", time_ms=T0)
    [result] = key.send(event).activations
    assert isinstance(result, ActivationCommit) and len(result.trace) == EVENTS_PER_ACTIVATION
    [snapshot] = key.send(export_request_envelope(KEY, "bench", time_ms=T0 + 1)).snapshots
    frames = [serialize_trace_event(e) for e in result.trace]
    return frames, snapshot, event.SerializeToString()


def write_stream(path: Path, frames: list[bytes], n_events: int) -> None:
    """``n_events`` events: 50-event activations of other keys (the target's frames with the
    key swapped), the target's own activation in the middle."""
    framed = b"".join(frame(f) for f in frames)
    n_keys = max(n_events // EVENTS_PER_ACTIVATION, 1)
    with open(path, "wb") as out:
        for k in range(n_keys):
            if k == n_keys // 2:
                out.write(framed)
            else:
                other = b"bench-key-%07d" % (k + 1)
                out.write(framed.replace(KEY, other))


def replay_argv(snapshot: Path, traces: Path, event: Path) -> list[str]:
    return [
        "--snapshot", str(snapshot), "--traces", str(traces), "--event", str(event),
        "--agent", "replay_cli:AGENT", "--registry", "replay_cli:TOOLS",
    ]  # fmt: skip


def wall(argv: list[str], env: dict[str, str], expect: int = 0) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != expect:
        sys.exit(f"{argv[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return elapsed


# As in bench/trace_scan.py: a launcher interpreter reads RUSAGE_CHILDREN of the measured child.
_LAUNCHER = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], check=True)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def child_peak_rss_mb(code: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, sys.executable, "-c", code],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, help="where to write the inputs (default: temp dir)")
    args = parser.parse_args()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )

    with tempfile.TemporaryDirectory(prefix="replay-cli-") as tmp:
        directory: Path = args.out or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        frames, snapshot, event = build_inputs(directory)
        small, big = directory / "one-activation.pb", directory / "big-stream.pb"
        (directory / "snapshot.pb").write_bytes(snapshot)
        (directory / "event.pb").write_bytes(event)
        write_stream(small, frames, EVENTS_PER_ACTIVATION)
        argv_small = [
            SCRIPT,
            *replay_argv(directory / "snapshot.pb", small, directory / "event.pb"),
        ]
        protos = [sys.executable, "-c", "import beam_agents._protos"]

        # 1. start-up: alternate the two commands, medians.
        wall(argv_small, env)  # warm the page cache
        argv_json = [*argv_small, "--json"]
        argv_unlimited = [*argv_small, "--time-limit", "0"]
        replays, imports, jsons, unlimited = [], [], [], []
        for _ in range(args.rounds):
            replays.append(wall(argv_small, env))
            imports.append(wall(protos, env))
            jsons.append(wall(argv_json, env))
            unlimited.append(wall(argv_unlimited, env))
        r, i, j, u = (statistics.median(x) for x in (replays, imports, jsons, unlimited))
        verdict = "ok" if r / i <= RATIO_TARGET else "MISSED"
        json_verdict = "ok" if j / i <= RATIO_TARGET else "MISSED"
        count = subprocess.run(
            [*argv_json], capture_output=True, text=True, env=env, check=False
        ).stdout.count('"mark": ')
        print(
            f"1. headless replay of a {EVENTS_PER_ACTIVATION}-event activation ({count} values "
            f"verified and marked): {r * 1000:.0f} ms (median of {args.rounds}); "
            f'`python -c "import beam_agents._protos"`: {i * 1000:.0f} ms; ratio {r / i:.2f} '
            f"(target <= {RATIO_TARGET:.0f}: {verdict}); with --json (every value printed): "
            f"{j * 1000:.0f} ms, ratio {j / i:.2f} ({json_verdict})"
        )
        print(
            f"   with --time-limit 0 (no watchdog process, agent code on the main thread): "
            f"{u * 1000:.0f} ms, ratio {u / i:.2f}; the time limit and its watchdog cost "
            f"{(r - u) * 1000:+.0f} ms"
        )

        # 2. one key out of a big stream.
        t0 = time.perf_counter()
        write_stream(big, frames, args.events)
        size = big.stat().st_size
        print(
            f"   wrote {args.events:,} events ({size / 1e6:.0f} MB) in "
            f"{time.perf_counter() - t0:.1f} s: {big}"
        )
        sys.path.insert(0, str(HERE))
        from beam_agents.replay.engine import replay
        from beam_agents.replay.options import ReplayOptions
        from beam_agents.replay.result import Verdict
        from beam_agents.trace_stream import iter_frames

        options = ReplayOptions(
            snapshot=directory / "snapshot.pb", traces=(big,), event=directory / "event.pb",
            agent="replay_cli:AGENT", registry="replay_cli:TOOLS",
        )  # fmt: skip
        sum(1 for _ in iter_frames(big))  # warm the page cache
        splits, scans = [], []
        for _ in range(max(args.rounds // 2, 2)):
            t0 = time.perf_counter()
            n = sum(1 for _ in iter_frames(big))
            splits.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = replay(options)
            scans.append(time.perf_counter() - t0)
            if result.verdict is not Verdict.REPRODUCED:
                sys.exit(f"the big-stream replay did not reproduce: {result.reason} {result.error}")
        s, q = statistics.median(splits), statistics.median(scans)
        argv_big = [SCRIPT, *replay_argv(directory / "snapshot.pb", big, directory / "event.pb")]
        cli_big = statistics.median(wall(argv_big, env) for _ in range(3))
        print(
            f"2. replay of one key out of {n:,} events: {q:.2f} s in process, {cli_big:.2f} s as "
            f"the console script; bare frame splitting (iter_frames): {s:.2f} s; "
            f"ratio {q / s:.2f} (in process) / {cli_big / s:.2f} (console script)"
        )

        # 3. memory of that replay, in a fresh process.
        code = (
            "import sys\nfrom beam_agents.cli import main\n"
            f"sys.exit(main({replay_argv(directory / 'snapshot.pb', big, directory / 'event.pb')!r}))\n"
        )
        peak = child_peak_rss_mb(code, env)
        baseline = child_peak_rss_mb("import beam_agents.cli\n", env)
        verdict = "ok" if peak <= RSS_TARGET_MB else "MISSED"
        print(
            f"3. peak RSS of that replay: {peak:.1f} MB (interpreter + imports alone: "
            f"{baseline:.1f} MB; target <= {RSS_TARGET_MB:.0f} MB: {verdict})"
        )


if __name__ == "__main__":
    main()
