"""The perturbations that must not matter, each a condition a replay process runs under.

Every replay of a sample activation runs in a process of its own (forked, per
activation, from a worker that has imported the agent and run nothing of it: the
modules as fresh imports leave them), as ``beam-agents-replay`` runs it, with the
network closed (replay's guard). A worker's condition changes, from the pipeline's run:

    process       nothing else: the same PYTHONHASHSEED, clock, directory, environment
    all-N         everything at once: PYTHONHASHSEED=N, the clock, the directory and the
                  environment below (one per hash seed: the screen)
    hash-seed-N   PYTHONHASHSEED=N instead of the pipeline's (0)
    clock         the wall clock shifted (time.time, datetime.now, ... ; not durations)
    cwd           another working directory (an empty temporary one)
    env           another environment: only PATH, HOME (another), TZ (another), LANG and
                  what Python needs; every variable the agent read is gone

``process`` is the control: a difference there is module state, memory an activation
overwrote, a value that differs in every run (the clock, randomness), or the network.
Every activation is replayed under the control and the screens (``Role``); only an
activation a screen changed (and the control did not) is replayed under each single
perturbation, and a difference under one of those only is that perturbation's doing.
A perturbation that matters changes its screen's replay as it changes its own (the
screen holds it and more), so the screen costs one replay per hash seed instead of
one per perturbation, and no cause is found less: tests/doctor/test_corpus.py runs the
corpus through exactly this.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "CLOCK_SHIFT_S",
    "DEFAULT_HASH_SEEDS",
    "PIPELINE_HASH_SEED",
    "Condition",
    "Role",
    "conditions",
    "screened",
    "shift_clock",
    "worker_environment",
]

PIPELINE_HASH_SEED = 0
"""The pipeline run's PYTHONHASHSEED (fixed, so the doctor's own verdict is repeatable)."""
DEFAULT_HASH_SEEDS = (1, 2, 3)
"""The other seeds replays run under. A two-element set of strings keeps its order under
another seed about half the time: three seeds miss it one time in eight."""
CLOCK_SHIFT_S = 90_061.5
"""How far the ``clock`` condition moves the wall clock: a day, an hour, a minute and 1.5 s
later, so that a value read to the day, hour, minute or second changes."""

_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR", "VIRTUAL_ENV")


class Role(enum.StrEnum):
    """How a condition's replays are used."""

    CONTROL = "control"
    """``process``: every activation, nothing perturbed but the process."""
    SCREEN = "screen"
    """``all-N``: every activation, every perturbation at once."""
    SINGLE = "single"
    """One perturbation alone: only the activations a screen changed."""


@dataclass(frozen=True)
class Condition:
    name: str
    """``process``, ``all-1``, ``hash-seed-1``, ``clock``, ``cwd``, ``env``."""
    description: str
    """What it changes, as the report says it."""
    hash_seed: int = PIPELINE_HASH_SEED
    clock_shift_s: float = 0.0
    other_cwd: bool = False
    other_env: bool = False
    role: Role = Role.SINGLE

    @property
    def is_control(self) -> bool:
        return self.role is Role.CONTROL

    def document(self) -> dict[str, Any]:
        return {**asdict(self), "role": self.role.value}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Condition:
        return cls(**{**doc, "role": Role(doc["role"])})


def conditions(
    hash_seeds: tuple[int, ...] = DEFAULT_HASH_SEEDS, clock_shift_s: float = CLOCK_SHIFT_S
) -> list[Condition]:
    """Every condition replays may run under: the control, the screens, the single ones."""
    seeds = [seed for seed in hash_seeds if seed != PIPELINE_HASH_SEED]
    clock = (
        f"the wall clock {_duration(clock_shift_s)} later, " if clock_shift_s else ""
    )
    found = [Condition("process", "in another process (fresh imports)", role=Role.CONTROL)]
    for seed in seeds or [PIPELINE_HASH_SEED]:
        hashed = f"PYTHONHASHSEED={seed}, " if seed != PIPELINE_HASH_SEED else ""
        found.append(
            Condition(
                f"all-{seed}" if seeds else "all",
                f"with {hashed}{clock}another working directory and environment at once",
                hash_seed=seed,
                clock_shift_s=clock_shift_s,
                other_cwd=True,
                other_env=True,
                role=Role.SCREEN,
            )
        )
    found += [
        Condition(f"hash-seed-{seed}", f"with PYTHONHASHSEED={seed}", hash_seed=seed)
        for seed in seeds
    ]
    if clock_shift_s:
        found.append(
            Condition(
                "clock",
                f"with the wall clock {_duration(clock_shift_s)} later",
                clock_shift_s=clock_shift_s,
            )
        )
    found.append(Condition("cwd", "in another working directory", other_cwd=True))
    found.append(Condition("env", "in another environment", other_env=True))
    return found


def screened(screen: Condition, singles: list[Condition]) -> list[Condition]:
    """The single conditions whose perturbation ``screen`` holds (to look closer with)."""
    return [
        single
        for single in singles
        if (single.hash_seed != PIPELINE_HASH_SEED and single.hash_seed == screen.hash_seed)
        or (single.clock_shift_s and single.clock_shift_s == screen.clock_shift_s)
        or (single.other_cwd and screen.other_cwd)
        or (single.other_env and screen.other_env)
    ]


def _duration(seconds: float) -> str:
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, rest = divmod(rest, 60)
    parts = [f"{int(days)} d"] if days else []
    parts += [f"{int(hours)} h"] if hours else []
    parts += [f"{int(minutes)} min"] if minutes else []
    parts += [f"{rest:g} s"] if rest else []
    return " ".join(parts) or "0 s"


def worker_environment(
    condition: Condition | None, base: dict[str, str], home: str
) -> dict[str, str]:
    """The environment of a worker process under ``condition`` (None: the pipeline's run)."""
    seed = PIPELINE_HASH_SEED if condition is None else condition.hash_seed
    if condition is not None and condition.other_env:
        env = {k: base[k] for k in _KEPT_VARIABLES if k in base}
        env["HOME"] = home
        env["TZ"] = "Asia/Kathmandu" if base.get("TZ") != "Asia/Kathmandu" else "America/St_Johns"
    else:
        env = dict(base)
    env["PYTHONHASHSEED"] = str(seed)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return env


def shift_clock(seconds: float) -> Any:
    """Move this process's wall clock ``seconds`` ahead, ticking (time-machine): every later
    ``time.time()``, ``datetime.now()``, ``date.today()``, ``time.localtime()``... is later;
    ``time.monotonic()`` and ``perf_counter()`` are not (durations stay true)."""
    import datetime
    import time

    time_machine = _import_time_machine()

    traveller = time_machine.travel(
        datetime.datetime.fromtimestamp(time.time() + seconds, tz=datetime.UTC),
        tick=True,
    )
    traveller.start()
    return traveller


def _import_time_machine() -> Any:
    """time-machine, without the pytest plugin it loads when pytest is importable: a worker
    runs no tests, and importing pytest cost each clock-shifted worker 0.7 s of CPU.
    ``import pytest`` fails only while time-machine is imported (which it expects of an
    install without pytest); agent code that imports pytest later gets it."""
    import importlib
    import sys

    hidden = "pytest" not in sys.modules
    if hidden:
        sys.modules["pytest"] = None  # type: ignore[assignment]
    try:
        return importlib.import_module("time_machine")
    finally:
        if hidden:
            del sys.modules["pytest"]
