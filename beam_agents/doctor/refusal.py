"""Why the doctor refuses to run (exit 2), and how its caller names its inputs.

A refusal is one paragraph naming what is wrong and what to do, never a
traceback. The words for the inputs come from the caller (``DoctorNaming``): the
command line's flags (``--script FILE``) or ``diagnose``'s parameters
(``script=``), as replay's ``Naming`` does for replay.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CLI",
    "PYTHON",
    "DoctorInput",
    "DoctorNaming",
    "DoctorUsageError",
    "naming_of",
    "replay_naming",
]


class DoctorInput(enum.StrEnum):
    AGENT = "agent"
    REGISTRY = "registry"
    PROVIDER = "provider"
    HITL = "hitl"
    EVENTS = "events"
    BUNDLE = "bundles"
    SCRIPT = "script"
    ENVELOPES = "envelopes"
    JOBS = "jobs"
    TIME_LIMIT = "time_limit"
    HASH_SEEDS = "hash_seeds"


@dataclass(frozen=True)
class DoctorNaming:
    names: Mapping[DoctorInput, str]
    joiner: str

    def name(self, what: DoctorInput) -> str:
        return self.names[what]

    def given(self, what: DoctorInput, shown: object) -> str:
        return f"{self.names[what]}{self.joiner}{shown}"


CLI = DoctorNaming(
    names={
        DoctorInput.AGENT: "--agent",
        DoctorInput.REGISTRY: "--registry",
        DoctorInput.PROVIDER: "--provider",
        DoctorInput.HITL: "--hitl",
        DoctorInput.EVENTS: "--events",
        DoctorInput.BUNDLE: "--bundle",
        DoctorInput.SCRIPT: "--script",
        DoctorInput.ENVELOPES: "envelopes",
        DoctorInput.JOBS: "--jobs",
        DoctorInput.TIME_LIMIT: "--time-limit",
        DoctorInput.HASH_SEEDS: "--hash-seeds",
    },
    joiner=" ",
)
"""The command line's words (``beam-agents-replay doctor``)."""

PYTHON = DoctorNaming(names={what: f"{what.value}=" for what in DoctorInput}, joiner="")
"""``diagnose``'s words: its parameters."""


class DoctorUsageError(Exception):
    """The doctor cannot run on these inputs (exit 2): ``message`` is one paragraph."""

    exit_code = 2

    def __init__(self, reason: str, advice: str = "") -> None:
        self.reason = reason
        self.advice = advice
        self.message = f"{reason}. {advice[:1].upper()}{advice[1:]}" if advice else reason
        super().__init__(self.message)


def replay_naming(naming: DoctorNaming):  # type: ignore[no-untyped-def]
    """Replay's ``Naming`` for the loaders the doctor reuses (imports, ``--events``), in the
    doctor caller's words."""
    from dataclasses import replace

    from beam_agents.replay.naming import Input, python_naming

    base = python_naming("diagnose")
    words = {
        Input.AGENT: naming.name(DoctorInput.AGENT),
        Input.REGISTRY: naming.name(DoctorInput.REGISTRY),
        Input.HITL: naming.name(DoctorInput.HITL),
        Input.EVENTS: naming.name(DoctorInput.EVENTS),
        Input.TIME_LIMIT: naming.name(DoctorInput.TIME_LIMIT),
    }
    return replace(
        base,
        names={**base.names, **words},
        joiner=naming.joiner,
        import_advice=(
            "run the doctor where that module is importable (the current directory is on the "
            "import path; set PYTHONPATH for others)"
        ),
    )


def naming_of(plan: dict[str, object]) -> DoctorNaming:
    """The naming a worker's plan names (``"cli"`` or ``"python"``)."""
    return CLI if plan.get("naming") == "cli" else PYTHON
