"""Peak RSS and time of replays of huge or hostile inputs, as ratios to the input size.

    .venv/bin/python bench/hostile.py [--events 100000]

Four cases from the hostile-input review (issue 14), each replayed by the
``beam-agents-replay`` console script in its own process (``--json``), its peak
RSS read from ``getrusage(RUSAGE_CHILDREN)`` of a one-child wrapper:

  (a) an activation of 100,000 events (99,998 read-only tool calls), with --json;
  (b) a trace whose target ACTIVATION_START carries 500,000 attributes;
  (c) a snapshot whose replay cache holds 64 entries of ~1 MiB responses;
  (d) (c) through the Python API: ``Replayer.replay`` given the snapshot as ``bytes``
      the caller read and keeps (its result written as ``--json`` writes it), in a
      ``python -c`` process.

From issue 23 (memory bounded by the input's size, not its element count):

  (e) a trace holding, beside the replayed activation, 999,000 one-event activations of
      the key (13 MB): replayed with --seq;
  (f) a snapshot of 2,000,000 empty pending intents (4 MB): refused before it is parsed;
  (g) --events holding 80,000 different copies of one envelope id (the traced one last):
      refused past the cap on copies per id, in time linear in the dump;
  (h) (c) as an incident bundle (about 64 MB), replayed from the bundle.

Targets (issue 14): (a) <= 200 MB, (b) <= 150 MB, (c) and (d) <= 3x the snapshot's size;
(issue 23): (e) to (h) within a few times the input's size.
The baseline is an interpreter that imports the replay CLI and exits (printed
too), so the ratios can be read against what Python itself costs. Not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import io  # noqa: E402

from beam_agents import Agent, AgentConfig, Done, ToolRegistry, tool  # noqa: E402
from beam_agents._protos import AgentEnvelope, Event, TraceEvent  # noqa: E402
from beam_agents._wire import frame, write_frames  # noqa: E402
from beam_agents.activation import ActivationCommit  # noqa: E402
from beam_agents.agent import Inbound, Outcome  # noqa: E402
from beam_agents.context import AgentContext  # noqa: E402
from beam_agents.replay.incidents.bundle import make_bundle  # noqa: E402
from beam_agents.testing import (  # noqa: E402
    PipelineKey,
    ScriptedProvider,
    chat_request,
    event_envelope,
    export_request_envelope,
)
from beam_agents.trace_events import serialize_trace_event  # noqa: E402
from beam_agents.trace_stream import write_trace_stream  # noqa: E402

KEY = b"bench-hostile"
T0 = 1_734_000_000_000
MB = 1024 * 1024
CALLS_ENV = "BENCH_HOSTILE_CALLS"
RESPONSE_CHARS = 1_000_000


@tool
def lookup(i: int) -> int:
    """Read-only and cheap: the activation's size is its events."""
    return i


TOOLS = ToolRegistry([lookup])


class ManyCalls(Agent):
    """(a): one tool call per event, as many as $BENCH_HOSTILE_CALLS."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        for i in range(int(os.environ.get(CALLS_ENV, "100000")) - 2):
            ctx.call("lookup", i=i)
        return Done(output=b"done")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError


class BigAnswers(Agent):
    """(c): 64 model calls whose responses (~1 MiB each) fill the replay cache."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        for i in range(64):
            ctx.complete(chat_request("bench-model", ("user", f"question {i}")))
        return Done(output=b"done")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        raise NotImplementedError


MANY_CALLS = ManyCalls()
BIG_ANSWERS = BigAnswers()


def _big_answer(request: Any) -> str:
    text = request.messages[-1].content
    return (text + " ") * (RESPONSE_CHARS // (len(text) + 1))


def _record(agent: Agent, provider: ScriptedProvider) -> tuple[
    bytes, list[TraceEvent], bytes, bytes
]:
    """Run the activation twice (the second is replayed: its cache holds the first's answers)."""
    key = PipelineKey(agent, TOOLS, AgentConfig(provider_factory=lambda: provider), entity_key=KEY)
    trace: list[TraceEvent] = []
    event = event_envelope(KEY, "go", b"go", time_ms=T0)
    for seq in (1, 2):
        event = event_envelope(KEY, "go", b"go", time_ms=T0 + seq)
        [result] = key.send(event).activations
        assert isinstance(result, ActivationCommit), result
        trace.extend(result.trace)
    [snapshot] = key.send(export_request_envelope(KEY, "bench", time_ms=T0 + 10)).snapshots
    return snapshot, trace, event.SerializeToString(), b""


def _write(directory: Path, snapshot: bytes, trace: list[TraceEvent], event: bytes) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "snapshot.pb").write_bytes(snapshot)
    write_trace_stream(directory / "traces.pb", trace)
    (directory / "event.pb").write_bytes(event)
    return [
        "--snapshot", str(directory / "snapshot.pb"), "--traces", str(directory / "traces.pb"),
        "--event", str(directory / "event.pb"), "--seq", "2",
    ]  # fmt: skip


REPLAYER_WITH_BYTES = """\
import sys
from pathlib import Path

import hostile
from beam_agents.replay import Replayer
from beam_agents.replay.reporting.json_doc import write_json

snapshot = Path(sys.argv[1]).read_bytes()  # the caller's bytes, held for the whole replay
result = Replayer(agent=hostile.BIG_ANSWERS, registry=hostile.TOOLS).replay(
    snapshot, sys.argv[2], sys.argv[3], seq=2
)
write_json(result, sys.stdout)
sys.exit(result.exit_code)
"""
"""(d): what a caller of the Python API does with a snapshot it has as bytes."""


def _measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, int]:
    """(peak RSS in MB, seconds, exit code, stdout bytes) of one child process."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(rss, dt, p.returncode, len(p.stdout))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, *argv], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return int(out[0]) / 1024, float(out[1]), int(out[2]), int(out[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--attributes", type=int, default=500_000)
    parser.add_argument("--activations", type=int, default=999_000)
    parser.add_argument("--pending", type=int, default=2_000_000)
    parser.add_argument("--copies", type=int, default=80_000)
    parser.add_argument(
        "--cases", default="abcdefgh", help="which cases to run, e.g. 'ac' (default: abcdefgh)"
    )
    parser.add_argument("--keep", metavar="DIR", help="write the inputs under DIR and keep them")
    parser.add_argument(
        "--compare",
        metavar="SCRIPT",
        help="another checkout's beam-agents-replay (e.g. main's): each case is run with it "
        "too, right after this one's, and both are printed (--import-recorded dropped where "
        "it has no such flag)",
    )
    parser.add_argument("--compare-timeout", type=float, default=300.0)
    args = parser.parse_args()
    script = str(Path(sys.executable).parent / "beam-agents-replay")
    # No empty entry: it would put the working directory (maybe this checkout) on the path
    # of the --compare checkout's script.
    paths = [str(HERE), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    env[CALLS_ENV] = str(args.events)
    cases: list[tuple[str, list[str], int, str]] = []
    """(name, command: the console script's arguments, or a whole command line for (d), input
    size, target)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        os.environ[CALLS_ENV] = str(args.events)
        snap, trace, event, _ = _record(MANY_CALLS, ScriptedProvider(lambda r: "x"))
        flags = _write(root / "a", snap, trace, event)
        size_a = sum(os.path.getsize(f) for f in (root / "a").iterdir())
        cases.append((f"(a) {args.events:,}-event activation, --json",
                      [*flags, "--agent", "hostile:MANY_CALLS", "--registry", "hostile:TOOLS", "--json"],
                      size_a, "<= 200 MB and <= 10 s"))
        os.environ[CALLS_ENV] = "2"
        snap_b, trace_b, event_b, _ = _record(MANY_CALLS, ScriptedProvider(lambda r: "x"))
        start = next(e for e in trace_b if e.seq == 2 and e.index == 0)
        for i in range(args.attributes):
            start.attributes[f"bench.attr.{i}"].int_value = i
        flags_b = _write(root / "b", snap_b, trace_b, event_b)
        size_b = sum(os.path.getsize(f) for f in (root / "b").iterdir())
        cases.append((f"(b) {args.attributes:,}-attribute event",
                      [*flags_b, "--agent", "hostile:MANY_CALLS", "--registry", "hostile:TOOLS", "--json"],
                      size_b, "<= 150 MB"))
        snap_c, trace_c, event_c, _ = _record(BIG_ANSWERS, ScriptedProvider(_big_answer))
        flags_c = _write(root / "c", snap_c, trace_c, event_c)
        size_c = len(snap_c)
        cases.append(("(c) 64-entry cache of ~1 MiB responses",
                      [*flags_c, "--agent", "hostile:BIG_ANSWERS", "--registry", "hostile:TOOLS", "--json"],
                      size_c, f"<= 3x snapshot = {3 * size_c / MB:.0f} MB"))  # fmt: skip
        cases.append(("(d) (c) as bytes given to Replayer.replay",
                      [sys.executable, "-c", REPLAYER_WITH_BYTES, *flags_c[1:6:2]],
                      size_c, f"<= 3x snapshot = {3 * size_c / MB:.0f} MB"))  # fmt: skip
        os.environ[CALLS_ENV] = "2"
        snap_b, trace_b, event_b, _ = _record(MANY_CALLS, ScriptedProvider(lambda r: "x"))
        # (e) a million one-event activations of the key beside the replayed one.
        tiny = b"".join(
            frame(serialize_trace_event(TraceEvent(entity_key=KEY, seq=s, index=0,
                  kind=TraceEvent.ACTIVATION_START, name="start")))
            for s in range(3, args.activations + 3)
        ) if "e" in args.cases else b""  # fmt: skip
        flags_e = _write(root / "e", snap_b, trace_b, event_b)
        with open(root / "e" / "traces.pb", "ab") as f:
            f.write(tiny)
        size_e = sum(os.path.getsize(f) for f in (root / "e").iterdir())
        cases.append((f"(e) {args.activations:,} one-event activations",
                      [*flags_e, "--agent", "hostile:MANY_CALLS", "--registry", "hostile:TOOLS", "--json"],
                      size_e, "a few x input"))
        # (f) 2M empty pending intents: two bytes each on the wire.
        flags_f = _write(root / "f", snap_b + b"\x42\x00" * args.pending, trace_b, event_b)
        size_f = os.path.getsize(root / "f" / "snapshot.pb")
        cases.append((f"(f) {args.pending:,} empty pending intents",
                      [*flags_f, "--agent", "hostile:MANY_CALLS", "--registry", "hostile:TOOLS", "--json"],
                      size_f, "refused (2), a few x input"))
        # (g) many different copies of one envelope id, the traced one last.
        (root / "g").mkdir()
        dump = io.BytesIO()
        envelope = AgentEnvelope.FromString(event_b)
        copies = []
        for i in range(args.copies):
            fake = AgentEnvelope()
            fake.CopyFrom(envelope)
            fake.event.payload = b"copy %d" % i
            copies.append(fake.SerializeToString())
        write_frames(dump, [*copies, event_b])
        (root / "g" / "dump.pb").write_bytes(dump.getvalue())
        flags_g = [*_write(root / "g", snap_b, trace_b, event_b)]
        at = flags_g.index("--event")
        flags_g[at : at + 2] = ["--events", str(root / "g" / "dump.pb")]
        size_g = os.path.getsize(root / "g" / "dump.pb")
        cases.append((f"(g) {args.copies:,} copies of one envelope id",
                      [*flags_g, "--agent", "hostile:MANY_CALLS", "--registry", "hostile:TOOLS", "--json"],
                      size_g, "refused (2), linear"))
        # (h) (c) as a bundle.
        (root / "h").mkdir()
        bundle_bytes = make_bundle(
            snapshot=snap_c, traces=[root / "c" / "traces.pb"], event=event_c,
            agent="hostile:BIG_ANSWERS", registry="hostile:TOOLS", seq=2,
        ) if "h" in args.cases else b""  # fmt: skip
        (root / "h" / "c.bundle").write_bytes(bundle_bytes)
        cases.append(("(h) (c) as an incident bundle",
                      [str(root / "h" / "c.bundle"), "--import-recorded", "--json"],
                      len(bundle_bytes), "a few x input"))
        env_b = {**env, CALLS_ENV: "2"}
        base_rss, base_s, _, _ = _measure([sys.executable, "-c", "import beam_agents.cli"], env)
        print(f"baseline: python importing the replay CLI: {base_rss:.0f} MB peak RSS, {base_s:.2f} s")
        print(f"{'case':45} {'input MB':>9} {'peak MB':>8} {'x input':>8} {'s':>6} {'exit':>4} {'stdout MB':>9}  target")
        consent = args.compare is not None and "--import-recorded" in subprocess.run(
            [args.compare, "--help"], capture_output=True, text=True, env=env
        ).stdout
        for name, argv, size, target in cases:
            if name[1] not in args.cases:
                continue
            run_env = env_b if name.startswith(("(b)", "(e)", "(f)", "(g)")) else env
            command = argv if name.startswith("(d)") else [script, *argv]
            rss, seconds, code, out = _measure(command, run_env)
            print(
                f"{name:45} {size / MB:9.1f} {rss:8.0f} {rss * MB / max(size, 1):8.2f} "
                f"{seconds:6.1f} {code:4d} {out / MB:9.1f}  {target}"
            )
            if args.compare and not name.startswith("(d)"):
                other = [args.compare, *(a for a in argv if a != "--import-recorded" or consent)]
                try:
                    rss_o, seconds_o, code_o, out_o = _measure(
                        ["timeout", str(args.compare_timeout), *other], run_env
                    )
                except subprocess.CalledProcessError:
                    print(f"{'  the other checkout':45} failed")
                    continue
                ended = " (killed at the timeout)" if code_o == 124 else ""
                print(
                    f"{'  the other checkout':45} {size / MB:9.1f} {rss_o:8.0f} "
                    f"{rss_o * MB / max(size, 1):8.2f} {seconds_o:6.1f} {code_o:4d} "
                    f"{out_o / MB:9.1f}  this one: {rss_o / rss:.1f}x less memory, "
                    f"{seconds_o / max(seconds, 1e-9):.1f}x less time{ended}"
                )


if __name__ == "__main__":
    main()
