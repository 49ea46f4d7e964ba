"""``bisect``: the first revision of the agent's repository whose verdicts differ from the good one's.

    beam-agents-replay bisect BUNDLE|DIR... --repo DIR --good REV --bad REV
        (--import-recorded | --agent module:ATTR --registry module:ATTR) [--jobs N]

Every probe is exact and free (a verdict, not a judge): the bundles are replayed with
``check --json`` in a fresh process whose current directory is a temporary checkout
of one revision (``git archive``: the repository itself, its work tree, index and
worktree list, are never touched), so the agent code (``--agent``/``--registry``, or with
``--import-recorded`` each bundle's recorded ``module:ATTR``) is imported from that
revision; without ``--import-recorded`` a bundle's recorded code is never imported (a
data file does not choose code to run): bisect refuses before any probe, naming it. The probes run this package's replay engine; only the
agent code changes. Binary search, as ``git bisect``, over the revisions on the
ancestry path from ``--good`` to ``--bad``, for the first whose verdicts (per bundle
and seq) differ from ``--good``'s. A revision whose probe gives a usage error where
``--good``'s did not (its agent cannot be imported there, say) is skipped and named,
like ``git bisect skip``.

Exit codes: 0 found (the commit, its subject, the verdict change per bundle and its
first divergence), 1 no change in the range, 2 usage (a bad repository or revision,
``--good`` no ancestor of ``--bad``, no bundles), or when skipped revisions leave the
first change ambiguous (they are all named).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from beam_agents.cli.parsing import PROG, Parser, UsageError, add_time_limit_flag
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EXIT_DIVERGED, EXIT_OK, EXIT_USAGE

__all__ = ["Probe", "bisect_revisions", "register"]

Verdicts = dict[tuple[str, int | None], tuple[str, str]]
"""``(bundle path, seq) -> (verdict, cause)`` of one probe (``check --json``'s rows)."""


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    parser = commands.add_parser(
        "bisect",
        help="find the first revision of the agent's repository whose verdicts on these "
        "bundles differ from the good revision's",
        description=(
            "Binary search over the revisions from --good to --bad of the repository the "
            "bundles' agent modules come from: each probe replays every bundle against the "
            "agent code at one revision (a temporary checkout, a fresh process); prints the "
            "first revision whose verdicts differ from --good's, with the verdict change per "
            "bundle and its first divergence. Exit 0 found, 1 no change in the range, 2 usage "
            "(or skipped revisions leave it ambiguous)."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("paths", metavar="PATH", nargs="+", help="bundle files or directories")
    parser.add_argument("--repo", metavar="DIR", required=True, help="the agent's git repository")
    parser.add_argument("--good", metavar="REV", required=True, help="a revision that behaves")
    parser.add_argument("--bad", metavar="REV", required=True, help="a revision that does not")
    parser.add_argument(
        "--agent",
        metavar="module:ATTR",
        help="probe this agent (imported from each revision's checkout), not each bundle's own",
    )
    parser.add_argument(
        "--registry",
        metavar="module:ATTR",
        help="probe with these tools (from each revision's checkout), not each bundle's own",
    )
    parser.add_argument(
        "--import-recorded",
        action="store_true",
        help="import (and so run), at each revision, the agent and registry each bundle "
        "records, where --agent/--registry do not replace them; without it bisect refuses "
        "before any probe, naming that code",
    )
    parser.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes of each probe's check (default: the number of CPUs)",
    )
    add_time_limit_flag(parser)
    parser.set_defaults(run=_run_bisect)


def _git(repo: str, *args: str) -> bytes:
    prog = f"{PROG} bisect"
    try:
        done = subprocess.run(["git", "-C", repo, *args], capture_output=True, check=False)
    except OSError as exc:
        raise UsageError(f"git could not be run ({exc}): bisect needs git on PATH", prog) from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        why = said[-1] if said else f"exit {done.returncode}"
        raise UsageError(f"git {' '.join(args[:2])} in --repo {repo} failed: {why}", prog)
    return done.stdout


def _commit(repo: str, rev: str, flag: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except UsageError:
        raise UsageError(
            f"{flag} {rev}: no such commit in --repo {repo}", f"{PROG} bisect"
        ) from None


@dataclass(frozen=True)
class Probe:
    """One revision's verdicts, or why it was skipped."""

    commit: str
    verdicts: Verdicts
    skipped: str = ""


def _bundles(paths: Sequence[str]) -> list[str]:
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found += sorted(
                os.path.join(path, name) for name in os.listdir(path) if name.endswith(".bundle")
            )
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such bundle file or directory", f"{PROG} bisect")
    if not found:
        raise UsageError("no *.bundle file in the paths given", f"{PROG} bisect")
    return [os.path.abspath(p) for p in found]


def _checkout(repo: str, commit: str, into: str) -> None:
    archive = _git(repo, "archive", "--format=tar", commit)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _refuse_unconsented(bundles: list[str], ns: argparse.Namespace) -> None:
    """Refuse, before any probe, to import code the bundles name without the operator's
    consent: a data file does not choose code to run (docs/incidents.md), and bisect would
    import it at every revision."""
    if ns.import_recorded or (ns.agent is not None and ns.registry is not None):
        return
    from beam_agents.replay.incidents.bundle import recorded_code  # protobuf: off the CLI path

    named: dict[str, list[str]] = {}
    for path in bundles:
        recorded = recorded_code(path)
        if recorded is None:  # not a bundle: the probe's check gives it an error row
            continue
        for what, given, code in (("agent", ns.agent, recorded[0]), ("registry", ns.registry,
                                                                        recorded[1])):
            if given is None:
                named.setdefault(f"{what} {code}", []).append(os.path.basename(path))
    if not named:
        return
    code = "; ".join(f"{escape(k)} ({', '.join(escape(b) for b in v)})" for k, v in named.items())
    raise UsageError(
        "bisect would import, at each revision of --repo, the code the bundles name, which "
        f"runs it: {code}; nothing a bundle names is imported without consent. Pass "
        "--import-recorded to import that code, or --agent and --registry to name the code "
        "to probe (each is imported from the revision's checkout)",
        f"{PROG} bisect",
    )


def _probe(
    repo: str, commit: str, bundles: list[str], ns: argparse.Namespace
) -> Probe:
    with tempfile.TemporaryDirectory(prefix="beam-agents-bisect-") as checkout:
        _checkout(repo, commit, checkout)
        # The consent to import what the bundles name is the operator's (--import-recorded,
        # checked before any probe by _refuse_unconsented), passed on to each probe's check.
        argv = [sys.executable, "-P", "-m", "beam_agents.cli", "check", *bundles, "--json"]
        for flag, value in (("--agent", ns.agent), ("--registry", ns.registry)):
            if value is not None:
                argv += [flag, value]
        if ns.import_recorded:
            argv.append("--import-recorded")
        jobs, time_limit = ns.jobs, ns.time_limit
        argv += ["--jobs", str(jobs), "--time-limit", str(time_limit or 0)]
        done = subprocess.run(
            argv, cwd=checkout, stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
    try:
        document = json.loads(done.stdout)
        rows = [row for group in document["groups"] for row in group["rows"]]
        verdicts: Verdicts = {
            (str(row["path"]), row["seq"]): (str(row["verdict"]), str(row["cause"])) for row in rows
        }
    except (ValueError, KeyError, TypeError):
        said = done.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        return Probe(
            commit, {}, f"its check gave no report ({said[-1] if said else done.returncode})"
        )
    return Probe(commit, verdicts)


def _unusable(probe: Probe, good: Probe) -> str:
    """Why ``probe`` cannot be compared with ``good`` (usage errors good did not have)."""
    if probe.skipped:
        return probe.skipped
    for key, (verdict, cause) in sorted(probe.verdicts.items(), key=str):
        if verdict == "error" and good.verdicts.get(key, ("",))[0] != "error":
            return f"{os.path.basename(key[0])} seq {key[1]}: {cause}"
    return ""


@dataclass(frozen=True)
class Found:
    """The outcome of a bisect."""

    first: Probe | None
    """The first revision whose verdicts differ (None: no change, or ambiguous)."""
    candidates: tuple[str, ...]
    """When skipped revisions leave it ambiguous: every commit the first change may be."""
    skipped: dict[str, str]
    """Each skipped commit and why."""
    probes: int


def bisect_revisions(revisions: Sequence[str], good: Probe, probe: Callable[[str], Probe]) -> Found:
    """Binary search ``revisions`` (after good, ascending, the bad one last) for the first
    whose verdicts differ from ``good``'s, skipping revisions that cannot be probed."""
    results: dict[int, Probe] = {}
    skipped: dict[str, str] = {}

    def at(i: int) -> Probe | None:
        if i not in results:
            results[i] = probe(revisions[i])
            why = _unusable(results[i], good)
            if why:
                skipped[revisions[i]] = why
        return None if revisions[i] in skipped else results[i]

    lo, hi = -1, len(revisions) - 1  # lo: same as good; hi: differs (checked first)
    last = at(hi)
    if last is None:
        raise UsageError(
            f"--bad {revisions[hi][:12]} cannot be probed: {skipped[revisions[hi]]}",
            f"{PROG} bisect",
        )
    if last.verdicts == good.verdicts:
        return Found(None, (), skipped, len(results))
    while hi - lo > 1:
        middle = (lo + hi) // 2
        # The untested revisions between lo and hi, nearest the middle first.
        order = sorted(range(lo + 1, hi), key=lambda i: (abs(i - middle), i))
        tried = None
        for i in order:
            if revisions[i] in skipped:
                continue
            tried = i
            got = at(i)
            if got is not None:
                break
            tried = None
        if tried is None:  # everything between is skipped: the first change is ambiguous
            return Found(None, tuple(revisions[lo + 1 : hi + 1]), skipped, len(results))
        if results[tried].verdicts == good.verdicts:
            lo = tried
        else:
            hi = tried
    return Found(results[hi], (), skipped, len(results))


def _subject(repo: str, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit).decode("utf-8", "replace").strip()


def _run_bisect(ns: argparse.Namespace) -> int:
    prog = f"{PROG} bisect"
    if ns.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, got {ns.jobs}", prog)
    repo = os.path.abspath(ns.repo)
    if not os.path.isdir(repo):
        raise UsageError(f"--repo {ns.repo}: not a directory", prog)
    for flag, value in (("--agent", ns.agent), ("--registry", ns.registry)):
        if value is not None and ":" not in value:
            raise UsageError(f"{flag} {value!r} is not of the form module:ATTR", prog)
    bundles = _bundles(ns.paths)
    _refuse_unconsented(bundles, ns)
    inside = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--is-inside-work-tree"], capture_output=True, check=False
    )
    if inside.returncode != 0:
        raise UsageError(f"--repo {ns.repo}: not a git repository", prog)
    good, bad = _commit(repo, ns.good, "--good"), _commit(repo, ns.bad, "--bad")
    ancestor = subprocess.run(
        ["git", "-C", repo, "merge-base", "--is-ancestor", good, bad], check=False
    )
    if ancestor.returncode != 0 or good == bad:
        raise UsageError(
            f"--good {ns.good} is not an ancestor of --bad {ns.bad}: bisect searches the "
            "revisions from the good one to the bad one",
            prog,
        )
    revisions = (
        _git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}").decode().split()
    )

    def probe(commit: str) -> Probe:
        return _probe(repo, commit, bundles, ns)

    base = probe(good)
    why = _unusable(base, Probe(good, {}))
    if why:
        raise UsageError(f"--good {ns.good} cannot be probed: {why}", prog)
    found = bisect_revisions(revisions, base, probe)
    out = sys.stdout
    out.write(
        f"{PROG} bisect: {len(revisions)} revisions after --good {escape(ns.good)}, "
        f"{len(bundles)} bundle(s), {found.probes + 1} probes\n"
    )
    for commit, reason in found.skipped.items():
        out.write(f"  skipped {commit[:12]} {escape(_subject(repo, commit))}: {escape(reason)}\n")
    if found.first is not None:
        first = found.first
        out.write(f"first changed: {first.commit} {escape(_subject(repo, first.commit))}\n")
        for key in sorted(set(base.verdicts) | set(first.verdicts), key=str):
            before = base.verdicts.get(key, ("absent", ""))
            after = first.verdicts.get(key, ("absent", ""))
            if before == after:
                continue
            name = f"{os.path.basename(key[0])} seq {key[1]}"
            out.write(f"  {escape(name)}: {before[0]} -> {after[0]}\n")
            if after[1]:
                out.write(f"    {escape(after[1])}\n")
        return EXIT_OK
    if found.candidates:
        out.write(
            "the first change is one of these (the skipped revisions hide which):\n"
            + "".join(f"  {c} {escape(_subject(repo, c))}\n" for c in found.candidates)
        )
        return EXIT_USAGE
    out.write(
        f"no change: every probed revision up to --bad {escape(ns.bad)} gives --good's verdicts\n"
    )
    return EXIT_DIVERGED
