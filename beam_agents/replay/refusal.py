"""Why a replay stopped before it could judge the activation: bad input, or an irreproducible one.

The engine raises these internally and turns each into a ``ReplayResult``;
they never reach a caller of ``beam_agents.replay.engine.replay``. The split is
the seed's: "it could not be judged because the inputs are wrong" (exit 2) is
never the same thing as "it cannot be reproduced from these inputs" (exit 3).
"""

from __future__ import annotations

import traceback

from beam_agents._version import __version__
from beam_agents.errors import ReplayError
from beam_agents.replay.result import StopCause, TargetFacts, Verdict

FILE = "FILE"
"""How a refusal's ``cause`` names the file it is about (``--snapshot FILE is a directory``)."""


class ReplayRefused(ReplayError):
    """Replay stopped before a verdict from the comparison."""

    verdict: Verdict = Verdict.USAGE_ERROR
    stop: StopCause = StopCause.REFUSED

    def __init__(self, reason: str, detail: str = "", *, cause: str | None = None) -> None:
        self.reason = reason
        """One line: what is wrong."""
        self.detail = detail
        """More sentences: what to do about it (may be empty)."""
        self.cause = reason if cause is None else cause
        """The reason without the name of the file it is about (``the bundle is not an
        incident bundle``): what ``check`` groups by, the files listed under it. Said where the refusal is made, so
        that nothing takes a name back out of the reason."""
        self.target = TargetFacts()
        """What was already known about the target activation when replay stopped."""
        self.redacted: tuple[str, str] | None = None
        """``(reason, detail)`` with the plaintext they quote (agent code's values: a command
        line, a path, an exception's text) as digests, for ``--redact``; None: none."""
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The one-paragraph message: the reason, then the detail."""
        return _paragraph(self.reason, self.detail)

    @property
    def redacted_message(self) -> str | None:
        """``message`` with the plaintext it quotes as digests (None: it quotes none)."""
        return None if self.redacted is None else _paragraph(*self.redacted)


def _paragraph(reason: str, detail: str) -> str:
    if not detail:
        return reason
    if "=" in detail.split(" ", 1)[0]:  # a Python parameter (``snapshot=``) as it is
        return f"{reason}. {detail}"
    return f"{reason}. {detail[:1].upper()}{detail[1:]}"


class InputError(ReplayRefused):
    """The inputs are unreadable, wrong, or do not belong together (exit 2)."""

    verdict = Verdict.USAGE_ERROR


class CannotReproduce(ReplayRefused):
    """The inputs are right but cannot reproduce the activation (exit 3)."""

    verdict = Verdict.IRREPRODUCIBLE


class InternalError(ReplayRefused):
    """A bug of ours: named, located, exit 2 (never 0), never a traceback.

    The one wording of it, for the engine's result, ``check``'s row and the command line.
    """

    verdict = Verdict.USAGE_ERROR
    stop = StopCause.INTERNAL_ERROR

    def __init__(self, exc: BaseException) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        self.where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        super().__init__(
            f"internal error: {type(exc).__name__}: {exc}",
            cause=f"internal error: {type(exc).__name__}",
        )

    @property
    def message(self) -> str:
        return (
            f"{self.reason}{getattr(self, 'where', '')}. This is a bug in beam-agents "
            f"{__version__}, not a verdict on the activation; please report it with the "
            "command line and the input files"
        )
