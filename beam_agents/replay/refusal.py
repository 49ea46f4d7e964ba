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
from beam_agents.replay.result import TargetFacts, Verdict


class ReplayRefused(ReplayError):
    """Replay stopped before a verdict from the comparison."""

    verdict: Verdict = Verdict.USAGE_ERROR

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        """One line: what is wrong."""
        self.detail = detail
        """More sentences: what to do about it (may be empty)."""
        self.target = TargetFacts()
        """What was already known about the target activation when replay stopped."""
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """The one-paragraph message: the reason, then the detail."""
        if not self.detail:
            return self.reason
        if "=" in self.detail.split(" ", 1)[0]:  # a Python parameter (``snapshot=``) as it is
            return f"{self.reason}. {self.detail}"
        return f"{self.reason}. {self.detail[:1].upper()}{self.detail[1:]}"


class InputError(ReplayRefused):
    """The inputs are unreadable, wrong, or do not belong together (exit 2)."""

    verdict = Verdict.USAGE_ERROR


class CannotReproduce(ReplayRefused):
    """The inputs are right but cannot reproduce the activation (exit 3)."""

    verdict = Verdict.IRREPRODUCIBLE


def internal_error(exc: BaseException) -> tuple[str, str]:
    """``(reason, message)`` for a bug of ours: named, located, exit 2, never a traceback.

    The one wording of it, for the engine's result and for the command line alike.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    reason = f"internal error: {type(exc).__name__}: {exc}"
    message = (
        f"{reason}{where}. This is a bug in beam-agents {__version__}, not a verdict on the "
        "activation; please report it with the command line and the input files"
    )
    return reason, message
