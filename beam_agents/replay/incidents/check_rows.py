"""``check``'s rows: one per activation (or per file that is no bundle), each with its cause.

A row's *cause* is what ``check`` groups rows by, with their verdict, built from
typed facts only (``CheckCause`` says which kind): never read back out of a
reason's words.

- reproduced, what-if: the verdict;
- diverged: the first diverging event's kind, name and differing fields
  (``INTENT_STAGED 'issue_refund': attributes['beam_agents.args_sha256']``), or
  ``the re-run has KIND here`` where it has another kind of event;
- a cache miss: its status and the request components the nearest cached entry
  differs in (``cache miss (absent): messages[1]``);
- a memory read the snapshot could not serve as the original saw it: why
  (``memory read not judged (rewritten)``);
- past the time limit: the limit (``the re-run ran past the time limit of 60 s``),
  not the event the re-run had reached;
- a refusal: its ``cause``, the reason without the name of the file it is about
  (``the bundle is not an incident bundle``; the files are listed under it), said where the refusal is made;
- otherwise the reason.

The worst verdict decides the exit code, worst first: error (2), diverged (1),
irreproducible (3), reproduced/what-if (0). A broken input outranks a divergence
(the check itself could not do its job), and a divergence — a definite behaviour
change — outranks "could not be judged".
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from beam_agents.replay.incidents.bundle import RecordedCodeNotImported
from beam_agents.replay.isolation.time_limit import RAN_PAST
from beam_agents.replay.refusal import CannotReproduce, InputError, ReplayRefused
from beam_agents.replay.result import ReplayResult, StopCause, Verdict

__all__ = [
    "BUNDLE_SUFFIX",
    "SEVERITY",
    "CheckCause",
    "CheckGroup",
    "CheckReport",
    "CheckRow",
    "NoBundles",
    "WorkerGarbled",
    "WorkerLost",
    "WorkerStuck",
    "bundle_paths",
    "empty_directory_rows",
    "refused_row",
    "result_row",
    "worst_of",
]

BUNDLE_SUFFIX = ".bundle"
"""A directory given to ``check`` stands for the files directly inside it with this suffix."""

SEVERITY = {
    Verdict.USAGE_ERROR: 0,
    Verdict.DIVERGED: 1,
    Verdict.IRREPRODUCIBLE: 2,
    Verdict.WHAT_IF: 3,
    Verdict.FORK: 3,  # check runs no fork; a counterfactual ranks as a what-if would
    Verdict.REPRODUCED: 4,
}
"""Each verdict's rank in ``check``'s order, worst first."""


def worst_of(verdicts: Sequence[Verdict]) -> Verdict:
    """The worst of ``verdicts`` by ``check``'s order (``reproduced`` for none)."""
    return min(verdicts, key=SEVERITY.__getitem__) if verdicts else Verdict.REPRODUCED


class CheckCause(enum.StrEnum):
    """The kind of a row's cause: the verdict's, a replay's ``StopCause``, or check's own."""

    REPRODUCED = "reproduced"
    WHAT_IF = "what-if"
    DIVERGED = "diverged"
    CACHE_MISS = StopCause.CACHE_MISS.value
    TOOL_MISS = StopCause.TOOL_MISS.value
    MEMORY_UNSEEN = StopCause.MEMORY_UNSEEN.value
    """A memory read the snapshot could not serve as the original saw it."""
    BLOCKED = StopCause.BLOCKED.value
    PROVIDER_REACHED = StopCause.PROVIDER_REACHED.value
    TIME_LIMIT = StopCause.TIME_LIMIT.value
    """The re-run ran past the time limit (or its worker stopped answering past twice it)."""
    IMPORT_TIME_LIMIT = StopCause.IMPORT_TIME_LIMIT.value
    AGENT_EXITED = StopCause.AGENT_EXITED.value
    REFUSED = StopCause.REFUSED.value
    """A refused input: the bundle file, or what the replay of one of its activations read."""
    INTERNAL_ERROR = StopCause.INTERNAL_ERROR.value
    WORKER_LOST = "worker-lost"
    """The worker process ended (agent code crashed or ended it)."""
    WORKER_GARBLED = "worker-garbled"
    """The worker process sent something that is no check message (agent code wrote it)."""
    NO_BUNDLES = "no-bundles"
    """A directory given holds no bundle file."""
    NOT_IMPORTED = "not-imported"
    """The bundle names code to import, and the operator did not consent to import it."""


@dataclass(frozen=True, kw_only=True)
class CheckRow:
    """The verdict on one activation of one bundle (or on a file that is not a bundle)."""

    path: str
    """The bundle file, as given (or found in a given directory)."""
    seq: int | None
    """The activation; None when the file could not be read as a bundle."""
    entity_key: bytes
    """The bundle's key (empty when unread)."""
    verdict: Verdict
    kind: CheckCause
    """What kind of cause ``cause`` is (typed: nothing reads it back out of the text)."""
    cause: str
    """What rows are grouped by, with their verdict (see the module docstring)."""
    detail: str
    """The replay's one-line reason, or the refusal's full message."""
    seconds: float
    """Wall time of this replay (reported, never judged)."""

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def label(self) -> str:
        """``path seq N`` (or the path alone)."""
        return self.path if self.seq is None else f"{self.path} seq {self.seq}"

    def document(self) -> dict[str, object]:
        """The row as JSON data: a row of ``check --json``, and what a worker sends its parent.

        The one encoding of a row (``from_document`` is its decoder): ``seconds`` is
        rounded to the microsecond, and ``exit_code`` is the verdict's.
        """
        return {
            "path": self.path,
            "seq": self.seq,
            "entity_key": self.entity_key.hex(),
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "cause_kind": self.kind.value,
            "cause": self.cause,
            "detail": self.detail,
            "seconds": round(self.seconds, 6),
        }

    @classmethod
    def from_document(cls, data: object) -> CheckRow | None:
        """The row ``document`` encoded, or None for anything else.

        The data is untrusted (a worker runs agent code, which can write to its pipe):
        exactly ``document``'s fields, each of its type, the key as lowercase hex, an
        ``exit_code`` that is the verdict's, and finite non-negative ``seconds``.
        Nothing else is accepted, and nothing in it is run or converted beyond that.
        """
        if not isinstance(data, dict) or data.keys() != _ROW_KEYS:
            return None
        path, seq, key, verdict = data["path"], data["seq"], data["entity_key"], data["verdict"]
        kind, cause, detail, seconds = (
            data["cause_kind"],
            data["cause"],
            data["detail"],
            data["seconds"],
        )
        if not (
            all(isinstance(text, str) for text in (path, key, verdict, kind, cause, detail))
            and (seq is None or _is_int(seq))
            and verdict in _VERDICTS
            and kind in _KINDS
            and _is_int(data["exit_code"])
            and isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and _HEX.fullmatch(key) is not None
        ):
            return None
        if data["exit_code"] != _VERDICTS[verdict].exit_code:
            return None
        try:
            seconds = float(seconds)  # an integer of 400 digits: OverflowError
        except OverflowError:
            return None
        if not (0 <= seconds < float("inf")):  # NaN, infinities and negatives
            return None
        return cls(
            path=path,
            seq=seq,
            entity_key=bytes.fromhex(key),
            verdict=_VERDICTS[verdict],
            kind=_KINDS[kind],
            cause=cause,
            detail=detail,
            seconds=seconds,
        )


_ROW_KEYS = frozenset(
    (
        "path",
        "seq",
        "entity_key",
        "verdict",
        "exit_code",
        "cause_kind",
        "cause",
        "detail",
        "seconds",
    )
)
"""The fields of ``CheckRow.document``."""

_VERDICTS = {v.value: v for v in Verdict}
_KINDS = {k.value: k for k in CheckCause}

_HEX = re.compile("(?:[0-9a-f]{2})*")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class CheckGroup:
    """Rows with one verdict and one cause."""

    verdict: Verdict
    cause: str
    rows: tuple[CheckRow, ...]


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """Everything ``check`` found: one row per activation, in path then seq order."""

    rows: tuple[CheckRow, ...]
    bundles: int
    """Files checked."""
    jobs: int
    seconds: float

    @property
    def worst(self) -> Verdict:
        """The worst verdict of all rows (``reproduced`` when there are none)."""
        return worst_of([row.verdict for row in self.rows])

    @property
    def exit_code(self) -> int:
        """The worst verdict's exit code: what ``check`` exits with."""
        return self.worst.exit_code

    @property
    def groups(self) -> tuple[CheckGroup, ...]:
        """Rows grouped by (verdict, cause): worst verdict first, then the biggest group."""
        grouped: dict[tuple[Verdict, str], list[CheckRow]] = {}
        for row in self.rows:
            grouped.setdefault((row.verdict, row.cause), []).append(row)
        order = sorted(grouped, key=lambda vc: (SEVERITY[vc[0]], -len(grouped[vc]), vc[1]))
        return tuple(CheckGroup(verdict=v, cause=c, rows=tuple(grouped[(v, c)])) for v, c in order)

    def counts(self) -> dict[str, int]:
        """Rows per verdict word."""
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.verdict.value] = out.get(row.verdict.value, 0) + 1
        return out

    def render(self) -> str:
        """The table ``check`` prints (``check_render.render_check``)."""
        from beam_agents.replay.incidents.check_render import render_check

        return render_check(self)


# --------------------------------------------------------------------------- making rows


def result_row(
    path: str,
    seq: int,
    entity_key: bytes,
    result: ReplayResult,
    seconds: float,
    *,
    time_limit: float | None,
) -> CheckRow:
    """The row of one replayed activation (``time_limit``: what it ran with)."""
    kind, cause = _result_cause(result, time_limit)
    return CheckRow(
        path=path,
        seq=seq,
        entity_key=entity_key,
        verdict=result.verdict,
        kind=kind,
        cause=cause,
        detail=result.error or result.reason,
        seconds=seconds,
    )


def _result_cause(result: ReplayResult, time_limit: float | None) -> tuple[CheckCause, str]:
    verdict = result.verdict
    if verdict is Verdict.REPRODUCED:
        return CheckCause.REPRODUCED, "reproduced"
    if verdict is Verdict.WHAT_IF:
        return CheckCause.WHAT_IF, "what-if"
    divergence = result.first_divergence
    if verdict is Verdict.DIVERGED and divergence is not None:
        where = f"{divergence.kind} {divergence.name!r}"
        if divergence.missing:
            return CheckCause.DIVERGED, f"{where}: missing from the re-run"
        if divergence.extra:
            return CheckCause.DIVERGED, f"{where}: extra in the re-run"
        kind = next((f for f in divergence.fields if f.path == "kind"), None)
        if kind is not None:  # another event altogether: every attribute differs, none is the cause
            return CheckCause.DIVERGED, f"{where}: the re-run has {kind.replayed} here"
        fields = ", ".join(f.path for f in divergence.fields) or "differs"
        return CheckCause.DIVERGED, f"{where}: {fields}"
    stop = result.stop
    if stop is StopCause.TIME_LIMIT and time_limit:
        return CheckCause.TIME_LIMIT, f"{RAN_PAST} {time_limit:g} s"
    miss = result.cache_miss
    if stop is StopCause.CACHE_MISS and miss is not None:
        if miss.nearest is not None and miss.nearest.differences:
            differs = ", ".join(miss.nearest.differences)
            return CheckCause.CACHE_MISS, f"cache miss ({miss.status}): {differs}"
        return CheckCause.CACHE_MISS, f"cache miss ({miss.status})"
    if stop is StopCause.MEMORY_UNSEEN and result.unseen_reads:
        # Grouped by why, not by key or seq: one row per cause an operator acts on.
        whys = sorted({read.why.value for read in result.unseen_reads})
        return CheckCause.MEMORY_UNSEEN, f"memory read not judged ({', '.join(whys)})"
    if stop is None:  # a verdict from the events with no divergence to name
        return CheckCause.DIVERGED, result.reason
    return CheckCause(stop.value), result.reason


def refused_row(
    path: str, refused: ReplayRefused, seconds: float, *, seq: int | None = None
) -> CheckRow:
    """The row of a refusal: of a file that is no bundle (``seq`` None), or one of check's
    own about an activation (its worker lost, stuck or garbled)."""
    return CheckRow(
        path=path,
        seq=seq,
        entity_key=b"",
        verdict=refused.verdict,
        kind=_REFUSAL_KINDS.get(type(refused), CheckCause(refused.stop.value)),
        cause=refused.cause,
        detail=refused.message,
        seconds=seconds,
    )


class NoBundles(InputError):
    """A directory given holds no ``*.bundle`` file: zero activations checked is no verdict."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"directory {path} holds no *{BUNDLE_SUFFIX} file, so nothing in it was checked",
            f"pass the folder the bundles are in (check looks at the *{BUNDLE_SUFFIX} files "
            "directly in it, not in subfolders), or the bundle files themselves",
            cause=f"directory holds no *{BUNDLE_SUFFIX} file",
        )


class WorkerLost(InputError):
    """The worker replaying an activation ended (agent code crashed or ended it)."""

    def __init__(self, path: str, seq: int | None, how: str) -> None:
        super().__init__(
            f"the worker process replaying {path}"
            + (f" seq {seq}" if seq is not None else "")
            + f" ended ({how}) during the re-run: replay cannot judge an activation whose code "
            "ends (or crashes) the process; the pipeline would have lost its worker there",
            cause=f"the worker process ended during the re-run ({how})",
        )


class WorkerGarbled(InputError):
    """The worker sent its parent something that is no check message, and was ended."""

    def __init__(self, path: str, seq: int | None) -> None:
        super().__init__(
            f"the worker process replaying {path}"
            + (f" seq {seq}" if seq is not None else "")
            + " sent its parent something that is no check message, and was ended: agent code "
            "wrote to the worker's pipe; replay cannot judge an activation whose code does that",
            cause="the worker process sent something that is no check message",
        )


class WorkerStuck(CannotReproduce):
    """The worker neither finished an activation nor reported it ran past the limit."""

    stop = StopCause.TIME_LIMIT

    def __init__(self, limit: float, seconds: float, raise_limit: str) -> None:
        super().__init__(
            f"{RAN_PAST} {limit:g} s and was not judged: the worker replaying it did not "
            f"answer for {seconds:.0f} s and was killed. Agent code held the interpreter past "
            "the limit (native code that does not return, such as a regular expression that "
            "backtracks without end), so the worker could not stop it; if the activation is "
            f"only slow, raise the limit with {raise_limit} (0: no limit)",
            cause=f"{RAN_PAST} {limit:g} s",
        )


_REFUSAL_KINDS: dict[type[ReplayRefused], CheckCause] = {
    NoBundles: CheckCause.NO_BUNDLES,
    RecordedCodeNotImported: CheckCause.NOT_IMPORTED,
    WorkerLost: CheckCause.WORKER_LOST,
    WorkerGarbled: CheckCause.WORKER_GARBLED,
}


def bundle_paths(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The files ``check PATH...`` covers: files as given, directories' ``*.bundle`` entries.

    Every entry of a directory named ``*.bundle`` counts, whatever it is: one that is no
    readable bundle file (a dangling or looping link, a FIFO, a directory, a file it may
    not read) is an ``error`` row, never skipped (a CI job would pass on what it skipped).
    """
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            out.extend(str(f) for f in sorted(p.iterdir()) if f.name.endswith(BUNDLE_SUFFIX))
        else:
            out.append(os.fspath(path))
    return out


def empty_directory_rows(paths: Iterable[str | os.PathLike[str]]) -> list[CheckRow]:
    """An ``error`` row for each directory given that holds no ``*.bundle`` file.

    A CI job pointed at the wrong (or an empty) folder must not pass as "nothing
    failed": zero activations checked is not a verdict.
    """
    return [
        refused_row(os.fspath(path), NoBundles(os.fspath(path)), 0.0)
        for path in paths
        if Path(path).is_dir() and not bundle_paths([path])
    ]
