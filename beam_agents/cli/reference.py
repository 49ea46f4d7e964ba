"""The reference run: the build that ran in production, replayed first in a fresh process.

``--reference module:ATTR`` names the production agent; ``--reference-path DIR`` imports
the same ``--agent`` path (or ``--reference``'s) from another checkout, e.g. a worktree
of the production commit; a bundle replayed with an overriding ``--agent`` takes its own
recorded agent as the reference (``--no-reference`` turns that off).

The reference runs before this process isolates itself (an isolated process can start
no other): ``python -P -m beam_agents.cli --json ...`` with the same inputs (paths made
absolute, since it runs in ``DIR`` for ``--reference-path``), isolated for its whole life
as the console script is. Its ``--json`` document is read as data and each value is
proved against this process's own copy of the trace
(``beam_agents.replay.judging.reference``); the verdict and the exit code stay the
candidate's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass

from beam_agents.cli.parsing import UsageError
from beam_agents.replay.options import ReplayOptions, Source
from beam_agents.replay.result import EventPairs, ReferenceRun, ReplayResult

__all__ = [
    "ReferenceDocument",
    "ReferenceSpec",
    "attach_reference",
    "bundle_reference_spec",
    "reference_spec",
    "run_reference",
]

BACKSTOP_SECONDS = 60.0
"""Seconds past twice the time limit after which a reference that has not ended is killed."""


@dataclass(frozen=True)
class ReferenceSpec:
    """What to run as the reference, and the command line that runs it."""

    command: tuple[str, ...]
    cwd: str | None
    agent_path: str
    """``module:ATTR`` (empty for a bundle's recorded agent: its document names it)."""
    source: str
    timeout: float | None


@dataclass(frozen=True)
class ReferenceDocument:
    """What the reference process printed (``document``), or why it printed nothing usable."""

    spec: ReferenceSpec
    document: object | None
    problem: str = ""


def _absolute(source: Source, flag: str) -> str:
    if not isinstance(source, str):
        raise UsageError(f"a reference run reads {flag} from a file path, not bytes")
    if source == "-":
        raise UsageError(
            f"{flag} - (standard input) can be read once, and a reference run reads it too: "
            "save the input to a file"
        )
    return os.path.abspath(source)


def _reference_dir(ns: argparse.Namespace) -> str | None:
    directory: str | None = getattr(ns, "reference_path", None)
    if directory is None:
        return None
    if not os.path.isdir(directory):
        raise UsageError(
            f"--reference-path {directory}: not a directory; give the checkout (e.g. a git "
            "worktree of the production commit) whose modules the reference imports"
        )
    return os.path.abspath(directory)


def _timeout(time_limit: float | None) -> float | None:
    return None if not time_limit else 2 * time_limit + BACKSTOP_SECONDS


def _child(args: list[str]) -> tuple[str, ...]:
    # -P: the checkout's directory is not put first by Python itself; cwd_importable adds
    # it after beam_agents is loaded, so the reference imports its agent modules from DIR
    # and runs this replay engine (the one whose document this process reads).
    return (sys.executable, "-P", "-m", "beam_agents.cli", *args)


def reference_spec(ns: argparse.Namespace, options: ReplayOptions) -> ReferenceSpec | None:
    """The reference for a replay from flags, or None when none was asked for."""
    agent = getattr(ns, "reference", None)
    directory = _reference_dir(ns)
    if agent is None and directory is None:
        return None
    agent = agent or options.agent
    args = ["--json", "--snapshot", _absolute(options.snapshot, "--snapshot")]
    for trace in options.traces:
        args += ["--traces", _absolute(trace, "--traces")]
    if options.event is not None:
        args += ["--event", _absolute(options.event, "--event")]
    for events in options.events:
        args += ["--events", _absolute(events, "--events")]
    args += ["--agent", agent, "--registry", options.registry]
    if options.seq is not None:
        args += ["--seq", str(options.seq)]
    if options.hitl:
        args += ["--hitl", options.hitl]
    if options.what_if:
        args.append("--what-if")
    args += ["--time-limit", str(options.time_limit or 0)]
    source = f"--reference-path {directory}" if directory else "--reference"
    return ReferenceSpec(
        command=_child(args),
        cwd=directory,
        agent_path=agent,
        source=source,
        timeout=_timeout(options.time_limit),
    )


def bundle_reference_spec(ns: argparse.Namespace, options: ReplayOptions) -> ReferenceSpec | None:
    """The reference for a bundle's replay: ``--reference``/``--reference-path`` as for flags,
    else the bundle's own recorded agent when ``--agent`` overrides it."""
    agent = getattr(ns, "reference", None)
    directory = _reference_dir(ns)
    # A fork runs no reference (docs/replay.md, "A fork"): not even the bundle's own agent.
    default = (
        ns.agent is not None
        and not getattr(ns, "no_reference", False)
        and getattr(ns, "fork", None) is None
    )
    if agent is None and directory is None and not default:
        return None
    args = [_absolute(ns.bundle, "BUNDLE"), "--json"]
    if options.seq is not None:
        args += ["--seq", str(options.seq)]
    if agent is not None:
        args += ["--agent", agent]
    elif directory is not None and ns.agent is not None:
        args += ["--agent", ns.agent]  # the same path, from the other checkout
    if ns.registry is not None:
        args += ["--registry", ns.registry]
    if options.what_if:
        args.append("--what-if")
    if getattr(ns, "import_recorded", False):
        # The operator's consent to import the bundle's recorded code holds for the
        # reference too: without it, the recorded agent as the reference is refused there.
        args.append("--import-recorded")
    args += ["--time-limit", str(options.time_limit or 0)]
    if directory:
        source = f"--reference-path {directory}"
    elif agent is not None:
        source = "--reference"
    else:
        source = "the bundle's recorded agent"
    return ReferenceSpec(
        command=_child(args),
        cwd=directory,
        agent_path=agent or "",
        source=source,
        timeout=_timeout(options.time_limit),
    )


def run_reference(spec: ReferenceSpec) -> ReferenceDocument:
    """Run the reference process to its end and read its document (never raises)."""
    try:
        done = subprocess.run(
            spec.command,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=spec.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ReferenceDocument(spec, None, f"it did not end within {spec.timeout:g} s")
    except OSError as exc:
        return ReferenceDocument(spec, None, f"it could not be started: {exc}")
    try:
        return ReferenceDocument(spec, json.loads(done.stdout))
    except (ValueError, RecursionError):
        last = done.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        said = f" (exit {done.returncode}: {last[-1]})" if last else f" (exit {done.returncode})"
        return ReferenceDocument(spec, None, f"its output is not a replay document{said}")


def attach_reference(result: ReplayResult, ran: ReferenceDocument) -> ReplayResult:
    """``result`` with the reference's proved values beside it (``ReplayResult.reference``).

    A reference of another seq (the TUI switched activations) is not attached.
    """
    from beam_agents.replay.judging.reference import ReferenceUnreadable, prove_reference

    spec, header = ran.spec, result.header
    agent_path = spec.agent_path
    document = ran.document
    if isinstance(document, dict) and isinstance(document.get("header"), dict):
        agent_path = agent_path or str(document["header"].get("agent") or "")
        if document["header"].get("seq") not in (None, header.seq) and header.seq is not None:
            return result
    failed = ReferenceRun(agent_path=agent_path, source=spec.source, seq=header.seq)
    if document is None:
        return dataclasses.replace(
            result, reference=dataclasses.replace(failed, reason=ran.problem)
        )
    events = result.events
    traced = (
        events.traced
        if isinstance(events, EventPairs)
        else [p.traced for p in events if p.traced is not None]
    )
    try:
        reference = prove_reference(
            document,
            traced,
            agent_path=agent_path,
            source=spec.source,
            entity_key=header.entity_key,
            seq=header.seq,
        )
    except ReferenceUnreadable as exc:
        reference = dataclasses.replace(
            failed, reason=f"its output is not this activation's replay document: {exc}"
        )
    return dataclasses.replace(result, reference=reference)
