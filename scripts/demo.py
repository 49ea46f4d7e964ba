"""``make demo``: run the support desk in a Beam pipeline, then replay its incidents.

Usage (``make demo`` runs the first line from the repository root):

    .venv/bin/python scripts/demo.py [--out DIR]
    DEMO_HEADLESS=1 .venv/bin/python scripts/demo.py     # no TUI at the end (CI)

What it does, in order:

1. Runs ``examples.support_desk`` (agent v1) with ``RunAgent`` on Beam's
   DirectRunner, streaming, over the bundled stream of four customers: Bob's
   refund makes an approval round trip, Carol's mistyped order id makes an
   activation fail, and export requests for Bob and Carol follow. Traces and
   snapshots go to ``file://`` sinks under ``demo-out/``; every envelope of the
   stream is written to ``demo-out/events/<envelope_id>.pb`` (the replay needs
   the triggering envelope, and the demo has it because it produced the stream).
   Status questions read the carriers' tracking service, a real HTTP service the
   demo starts on 127.0.0.1 (a free port) through the recorded tool
   ``track_shipment``; the demo stops it before any replay.
2. Prints the exact ``beam-agents-replay`` command of each incident, runs it
   headless and prints its report: Bob's refund replayed with v1 (reproduced,
   exit 0) and with v2 (diverged, exit 1), Carol's failed activation
   (irreproducible: a cache miss, exit 3), and the resume that confirmed Bob's
   refund (reproduced from the snapshot's ``resumed_from``, exit 0), and Alice's status
   question, whose tracking lookup is served from the snapshot's tool cache with the
   service stopped (reproduced, exit 0).
3. Lists Bob's activations with ``beam-agents-replay ls`` (and which his snapshot
   replays), writes one incident bundle per incident with ``bundle`` (picking the
   envelopes out of ``demo-out/topic-dump.pb``, the stream as a topic dump), and
   replays them all with ``check`` (a table grouped by verdict and cause, JUnit XML
   in ``demo-out/check-junit.xml``; its exit code is the worst verdict's).
4. Runs the determinism doctor (``beam-agents-replay doctor``, docs/doctor.md) over the
   topic dump, as an author would before a deploy, with the tracking service started
   again: on v3 (``examples.support_desk.agent_v3``, two faults) it must name both
   lines marked ``# doctor: CAUSE`` (exit 1), on v1 nothing (exit 0).
5. Unless ``DEMO_HEADLESS=1``, opens the TUI on the diverged incident.

It exits 0 when every incident gave its expected verdict, 1 otherwise.
Re-running starts from a clean ``demo-out/``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `examples` is imported from the repository root, like the replay CLI imports it.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from beam_agents import read_trace_stream  # noqa: E402
from beam_agents._protos import TraceEvent  # noqa: E402
from beam_agents.trace_stream import trace_stream_files  # noqa: E402
from examples.support_desk.stream import BOB, INCIDENTS, REGISTRY, STREAM, Incident  # noqa: E402
from examples.support_desk.tracking import running_tracking_service  # noqa: E402

MARKER = ".beam-agents-demo"
"""A file the demo leaves in its output directory: it only ever deletes a directory holding it."""

VERDICT_WORDS = ("reproduced", "diverged", "irreproducible", "what-if", "error")
TUI_INCIDENT = "refund-v2"
"""The incident the TUI opens on: the one where the changed agent diverges."""


@dataclass(frozen=True)
class Outcome:
    """What one headless replay said."""

    incident: Incident
    exit_code: int
    verdict: str
    report: str

    @property
    def as_expected(self) -> bool:
        return self.exit_code == self.incident.exit_code and self.verdict == self.incident.verdict


def _display(path: Path) -> str:
    """``path`` relative to the current directory when inside it (the commands run from there)."""
    absolute = path if path.is_absolute() else Path.cwd() / path
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def examples_importable_here() -> bool:
    """Whether ``examples.support_desk`` imports from the current directory, as the CLI needs."""
    return (Path.cwd() / "examples" / "support_desk" / "__init__.py").is_file()


def replay_env() -> dict[str, str]:
    """The replays' environment: the repository root made importable when the cwd is not it."""
    env = dict(os.environ)
    if not examples_importable_here():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def printable(argv: list[str]) -> str:
    """The command as a user would type it from the current directory, one flag per line."""
    prefix = "" if examples_importable_here() else f"PYTHONPATH={shlex.quote(str(ROOT))} "
    return prefix + format_command([_display(Path(argv[0])), *argv[1:]])


def replay_program() -> Path:
    """The ``beam-agents-replay`` script installed next to this interpreter."""
    return Path(sys.executable).parent / "beam-agents-replay"


def prepare_out(out: Path) -> None:
    """Empty ``out`` (creating it); refuse a non-empty directory the demo did not create."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists()):
            raise SystemExit(
                f"demo: {out} exists and was not made by the demo; "
                "remove it or pass --out with another directory"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("made by scripts/demo.py; deleted and rebuilt on every run\n")


def write_events(out: Path) -> Path:
    """Write every envelope of the stream to ``events/<envelope_id>.pb``; returns the directory."""
    events = out / "events"
    events.mkdir()
    for envelope in STREAM:
        (events / f"{envelope.envelope_id}.pb").write_bytes(envelope.SerializeToString())
    return events


def write_topic_dump(out: Path) -> Path:
    """Write the whole stream as one envelope stream: what a consumer dump of the topic becomes."""
    from beam_agents.replay.inputs.envelopes import write_envelope_stream

    dump = out / "topic-dump.pb"
    with open(dump, "wb") as f:
        write_envelope_stream(f, [envelope.SerializeToString() for envelope in STREAM])
    return dump


def bundle_args(incident: Incident, out: Path) -> list[str]:
    """The ``bundle`` command of one incident (without the program name)."""
    return [
        "bundle",
        "-o",
        _display(out / "bundles" / f"{incident.name}.bundle"),
        "--snapshot",
        _display(find_snapshot(out / "snapshots", incident)),
        "--traces",
        _display(out / "traces"),
        "--events",
        _display(out / "topic-dump.pb"),
        "--agent",
        incident.agent,
        "--registry",
        REGISTRY,
        "--seq",
        str(incident.seq),
    ]


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``beam-agents-replay ARGS`` from the current directory, as printed."""
    return subprocess.run(
        [str(replay_program()), *args],
        env=replay_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def expected_check_code(incidents: tuple[Incident, ...]) -> int:
    """The exit code ``check`` must give over the incidents' bundles: the worst verdict's."""
    from beam_agents.replay.incidents.check_rows import worst_of
    from beam_agents.replay.result import Verdict

    return worst_of([Verdict(incident.verdict) for incident in incidents]).exit_code


def run_bundles(out: Path) -> bool:
    """Step 4: list Bob's activations, bundle each incident, check the bundles; True if as expected."""
    ok = True
    bob = next(i for i in INCIDENTS if i.entity_key == BOB)
    ls_args = [
        "ls",
        "--traces",
        _display(out / "traces"),
        "--snapshot",
        _display(find_snapshot(out / "snapshots", bob)),
    ]
    print(f"  $ {printable([str(replay_program()), *ls_args])}")
    done = run_cli(ls_args)
    for line in (done.stdout + done.stderr).rstrip("\n").splitlines():
        print(f"    | {line}")
    ok &= done.returncode == 0
    (out / "bundles").mkdir()
    print()
    for incident in INCIDENTS:
        args = bundle_args(incident, out)
        done = run_cli(args)
        status = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        print(f"  $ {printable([str(replay_program()), *args])}")
        print(f"    | {done.stderr.strip()}   {status}")
        ok &= done.returncode == 0
    # The bundles name the demo's own agents: importing them is consented to (--import-recorded).
    check_args = ["check", _display(out / "bundles"), "--import-recorded", "--jobs", "2",
                  "--junit", _display(out / "check-junit.xml")]  # fmt: skip
    print(f"\n  $ {printable([str(replay_program()), *check_args])}")
    done = run_cli(check_args)
    for line in (done.stdout + done.stderr).rstrip("\n").splitlines():
        print(f"    | {line}")
    expected = expected_check_code(INCIDENTS)
    mark = "ok" if done.returncode == expected else f"UNEXPECTED: wanted exit {expected}"
    print(f"    exit code {done.returncode} (the worst verdict's)   {mark}")
    return ok and done.returncode == expected


DOCTOR_AGENTS = (("examples.support_desk.agent_v3", 1), ("examples.support_desk.agent", 0))
"""The agents step 5 runs the doctor on, and the exit code each must give."""


def doctor_marks(module: str) -> list[str]:
    """``file:line`` of each line of ``module`` marked ``# doctor: CAUSE``: what it must name."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    return [
        f"{path.relative_to(ROOT).as_posix()}:{number}"
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"#\s*doctor:\s*[a-z]", text)  # a marker, not the docstring's CAUSE
    ]


def run_doctor(out: Path) -> bool:
    """Step 5: the doctor on v3 (its two faults named at their lines) and v1 (clean)."""
    ok = True
    with running_tracking_service():  # the tools read it as they did in the pipeline
        for module, expected in DOCTOR_AGENTS:
            args = ["doctor", "--agent", f"{module}:AGENT", "--registry", REGISTRY,
                    "--provider", "examples.support_desk.model:make_provider",
                    "--events", _display(out / "topic-dump.pb"), "--jobs", "2"]  # fmt: skip
            print(f"\n  $ {printable([str(replay_program()), *args])}")
            done = run_cli(args)
            for line in (done.stdout + done.stderr).rstrip("\n").splitlines():
                print(f"    | {line}")
            marks = doctor_marks(module)
            missed = [m for m in marks if f" at {m}" not in done.stdout]
            named = len(re.findall(r"^  \d+\. ", done.stdout, flags=re.MULTILINE))
            good = done.returncode == expected and not missed and named == len(marks)
            mark = "ok" if good else (
                f"UNEXPECTED: wanted exit {expected} and {len(marks)} finding(s) at "
                f"{', '.join(marks) or 'no line'}"
            )  # fmt: skip
            print(f"    exit code {done.returncode}   {mark}")
            ok &= good
    return ok


def find_snapshot(snapshots: Path, incident: Incident) -> Path:
    """The snapshot file the incident's export request produced (``{key hex}-{seq}-{id}.pb``)."""
    pattern = f"{incident.entity_key.hex()}-*-{incident.snapshot_request_id}.pb"
    found = sorted(snapshots.glob(pattern))
    if len(found) != 1:
        raise SystemExit(
            f"demo: expected one snapshot {pattern} in {snapshots}, found {len(found)}"
        )
    return found[0]


def replay_args(incident: Incident, out: Path) -> list[str]:
    """The replay flags of one incident (without the program name)."""
    snapshot = find_snapshot(out / "snapshots", incident)
    return [
        "--snapshot",
        _display(snapshot),
        "--traces",
        _display(out / "traces"),
        "--event",
        _display(out / "events" / f"{incident.event.envelope_id}.pb"),
        "--agent",
        incident.agent,
        "--registry",
        REGISTRY,
        "--seq",
        str(incident.seq),
    ]


def format_command(argv: list[str]) -> str:
    """A copy-pasteable command, one flag per line."""
    program, *rest = argv
    lines = [shlex.quote(program)]
    while rest and not rest[0].startswith("--"):  # a subcommand stays on the first line
        lines[0] += " " + shlex.quote(rest.pop(0))
    i = 0
    while i < len(rest):
        if rest[i].startswith("--") and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            lines.append(f"{rest[i]} {shlex.quote(rest[i + 1])}")
            i += 2
        else:
            lines.append(shlex.quote(rest[i]))
            i += 1
    return " \\\n      ".join(lines)


def parse_verdict(report: str) -> str:
    """The verdict word of a headless report (the first line that starts with one)."""
    for line in report.splitlines():
        word = line.strip().split(":", 1)[0].split(" ", 1)[0].lower()
        if word in VERDICT_WORDS and not line.startswith(" "):
            return word
    return "?"


def run_replay(incident: Incident, out: Path) -> Outcome:
    """Run one incident's replay headless, exactly as printed (from the current directory)."""
    argv = [str(replay_program()), *replay_args(incident, out)]
    done = subprocess.run(
        argv, env=replay_env(), capture_output=True, text=True, check=False, timeout=120
    )
    report = done.stdout + (done.stderr if done.stderr.strip() else "")
    return Outcome(incident, done.returncode, parse_verdict(done.stdout), report)


def summarize_traces(traces: Path) -> Counter[str]:
    """Activations by outcome, counted from the traces the pipeline wrote."""
    counts: Counter[str] = Counter()
    for path in trace_stream_files(traces):
        for event in read_trace_stream(path):
            if event.kind == TraceEvent.ACTIVATION_START:
                counts["activations"] += 1
            elif event.kind == TraceEvent.ACTIVATION_FAILED:
                counts["failed"] += 1
            elif event.kind == TraceEvent.LLM_CALL:
                counts["model calls"] += 1
    return counts


def _shorten(text: str, width: int = 96) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run_pipeline(out: Path) -> float:
    """Run the pipeline into ``out`` and print what the support desk did; returns its seconds."""
    # Beam logs import-time warnings about cloud clients the demo does not use.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    from examples.support_desk.pipeline import run_pipeline as run

    result = run(STREAM, out)
    seconds = time.monotonic() - started
    counts = summarize_traces(result.traces_dir)
    records = result.records
    keys = sorted({env.entity_key.decode() for env in STREAM})
    print(
        f"  {len(STREAM)} envelopes for {len(keys)} customers -> {counts['activations']} "
        f"activations ({counts['failed']} failed), {counts['model calls']} model calls, "
        f"in {seconds:.1f} s"
    )
    print(
        f"  replies sent: {len(records['outputs'])}   intents released: "
        f"{len(records['intents'])}   approval requests: {len(records['approvals'])}   "
        f"errors: {len(records['errors'])}"
    )
    for record in sorted(records["outputs"], key=lambda r: r["entity_key"]):
        print(f"    -> {record['entity_key']}: {_shorten(record['payload']['text'])}")
    for record in records["approvals"]:
        args = record["args"]
        print(
            f"    approval asked: {record['tool']} {args.get('order_id')} "
            f"{args.get('amount_cents')} cents ({record['intent_id']})"
        )
    for record in records["errors"]:
        print(f"    error: {record['code']}: {record['reason']}")
    snapshots = sorted(p.name for p in result.snapshots_dir.glob("*.pb"))
    files = len(trace_stream_files(result.traces_dir))
    print(f"  traces:    {_display(result.traces_dir)}/ ({files} files)")
    print(f"  snapshots: {_display(result.snapshots_dir)}/ {', '.join(snapshots)}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("demo-out"),
        help="output directory (default: demo-out/ in the current directory)",
    )
    args = parser.parse_args(argv)
    headless = os.environ.get("DEMO_HEADLESS", "") not in ("", "0")
    out: Path = args.out.resolve()
    started = time.monotonic()

    print("beam-agents demo: a support desk on Apache Beam, and its incidents replayed\n")
    print("1. The pipeline (RunAgent on the DirectRunner, streaming, file:// sinks)")
    prepare_out(out)
    with running_tracking_service() as tracking:
        print(
            f"  tracking service: {tracking.url} (a real HTTP service; the agent reads it "
            "through track_shipment, a recorded=True tool)"
        )
        run_pipeline(out)
    print(
        f"  tracking service: answered {tracking.requests} request(s), now stopped: "
        "the replays below cannot reach it"
    )
    events = write_events(out)
    dump = write_topic_dump(out)
    print(f"  events:    {_display(events)}/ ({len(STREAM)} envelopes, by envelope id)")
    print(f"             {_display(dump)} (the same, as one dump of the topic)\n")

    print("2. The incidents, replayed headless")
    outcomes: list[Outcome] = []
    for number, incident in enumerate(INCIDENTS, start=1):
        print(f"\n  [{number}] {incident.title}")
        print(f"  $ {printable([str(replay_program()), *replay_args(incident, out)])}")
        outcome = run_replay(incident, out)
        outcomes.append(outcome)
        for line in outcome.report.rstrip("\n").splitlines():
            print(f"    | {line}")
        print(f"    exit code {outcome.exit_code}")

    print("\n3. Verdicts")
    for outcome in outcomes:
        mark = (
            "ok"
            if outcome.as_expected
            else (
                f"UNEXPECTED: wanted {outcome.incident.verdict} (exit {outcome.incident.exit_code})"
            )
        )
        print(
            f"  {outcome.incident.name:<13} {outcome.verdict:<15} exit {outcome.exit_code}   {mark}"
        )
    all_expected = all(outcome.as_expected for outcome in outcomes)

    print("\n4. From the topic dump to verdicts: ls, one bundle per incident, check")
    all_expected &= run_bundles(out)

    print("\n5. Before the next deploy: the determinism doctor on v3 (two faults) and v1")
    all_expected &= run_doctor(out)
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s")

    tui = next(o for o in outcomes if o.incident.name == TUI_INCIDENT)
    tui_argv = [str(replay_program()), "tui", *replay_args(tui.incident, out)]
    print(f"\nOpen the incident view yourself with:\n  $ {printable(tui_argv)}")
    if headless:
        print("(DEMO_HEADLESS is set: not opening the TUI)")
    elif not sys.stdin.isatty() or not sys.stdout.isatty():
        print("(not a terminal: not opening the TUI)")
    else:
        print("Opening it now on the diverged incident; press q to quit, ? for help.")
        sys.stdout.flush()
        code = subprocess.run(tui_argv, env=replay_env(), check=False).returncode
        if code == tui.exit_code:
            print(f"the TUI exited with code {code}, as the headless replay did")
        else:
            print(f"UNEXPECTED: the TUI exited with code {code}, headless with {tui.exit_code}")
            all_expected = False
    return 0 if all_expected else 1


if __name__ == "__main__":
    sys.exit(main())
