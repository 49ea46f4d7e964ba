"""What the doctor reports: causes, findings, their evidence and consequence, as plain data.

The vocabulary of the doctor (floor 0 of ``beam_agents.doctor``): every other module
of the package speaks it, and ``--json`` is these dataclasses as documents
(``document()`` / ``from_document()``), so worker processes and the report share one
shape.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CAUSE_TITLES",
    "REMEDIES",
    "Cause",
    "Consequence",
    "Evidence",
    "EvidenceKind",
    "Finding",
]


class Cause(enum.StrEnum):
    """Why an activation would not replay (docs/agent-api.md, "Determinism rules")."""

    WALL_CLOCK = "wall-clock"
    """Agent code read the wall clock instead of ``ctx.now_ms``."""
    RANDOMNESS = "randomness"
    """Agent code used unseeded randomness instead of ``ctx.random``."""
    UNRECORDED_TOOL = "unrecorded-tool"
    """A read-only tool reads a service (network, a process) but is not ``recorded=True``."""
    HASH_ORDER = "hash-order"
    """A value depends on the iteration order of a set or another hash-seeded order."""
    ENVIRONMENT = "environment"
    """Agent code read environment variables."""
    FILES = "files"
    """Agent code read or wrote files."""
    MODULE_STATE = "module-state"
    """State kept in module globals (or on the agent object) is carried between activations."""
    OWN_MEMORY = "own-memory"
    """The activation reads memory it overwrites itself: replayed from a later snapshot, it
    reads its own write."""
    NETWORK = "network"
    """Agent code reached the network outside any tool."""
    PROCESS = "process"
    """Agent code started a process (or sent a signal, loaded native code) outside any tool."""
    UNEXPLAINED = "unexplained"
    """A perturbation that must not matter changed an event, and no line could be named."""


CAUSE_TITLES: dict[Cause, str] = {
    Cause.WALL_CLOCK: "wall clock",
    Cause.RANDOMNESS: "unseeded randomness",
    Cause.UNRECORDED_TOOL: "read-only tool reads a service, not recorded",
    Cause.HASH_ORDER: "hash-seeded ordering",
    Cause.ENVIRONMENT: "environment variables",
    Cause.FILES: "files",
    Cause.MODULE_STATE: "module state carried between activations",
    Cause.OWN_MEMORY: "reads memory it overwrites",
    Cause.NETWORK: "network outside a tool",
    Cause.PROCESS: "process outside a tool",
    Cause.UNEXPLAINED: "changed under a perturbation, line not found",
}
"""How the report titles each cause."""

REMEDIES: dict[Cause, str] = {
    Cause.WALL_CLOCK: (
        "use ctx.now_ms, the activation clock (the triggering envelope's event time); a tool "
        "that needs the time takes it as an argument"
    ),
    Cause.RANDOMNESS: (
        "use ctx.random, a random.Random seeded from (entity_key, seq); derive ids from "
        "ctx.entity_key and ctx.seq (as intent ids are) instead of uuid4()"
    ),
    Cause.UNRECORDED_TOOL: (
        "declare the tool @tool(recorded=True): the pipeline records each result in the key's "
        "tool cache and replay serves it, never calling the service"
    ),
    Cause.HASH_ORDER: (
        "iterate in a defined order: sorted(...) over a set (or a dict built from one), and "
        "never hash() of a str or bytes, which PYTHONHASHSEED changes in every process"
    ),
    Cause.ENVIRONMENT: (
        "configuration that changes between deploys is code skew: keep it in code, pass it in "
        "the envelope, or read it through a recorded=True tool"
    ),
    Cause.FILES: (
        "read data that changes through a recorded=True tool; data shipped with the code is "
        "read at import, relative to the module's __file__; never write files in an activation"
    ),
    Cause.MODULE_STATE: (
        "keep per-key data in ctx.memory (or Suspend(state=...)), never in module globals or "
        "on the agent object: one process serves many keys, replay runs one activation alone"
    ),
    Cause.OWN_MEMORY: (
        "keep memory as an append-only log whose entries carry ctx.seq, and read only the "
        "entries below ctx.seq (docs/agent-api.md, \"Working memory\")"
    ),
    Cause.NETWORK: (
        "reach the outside world only through tools: a read as a recorded=True tool, a write "
        "as a side_effect=True tool staged with ctx.act"
    ),
    Cause.PROCESS: (
        "run commands only inside a tool: recorded=True if it reads something, "
        "side_effect=True (ctx.act) if it changes something"
    ),
    Cause.UNEXPLAINED: (
        "replay the activation named in the evidence under that perturbation and read its "
        "first diverging event; the doctor could not tie it to a line"
    ),
}
"""What to do about each cause (the report's ``remedy`` line)."""


class EvidenceKind(enum.StrEnum):
    """How the doctor knows."""

    SEEN = "seen"
    """The watcher saw the call while agent code ran (the pipeline's step, or a replay)."""
    CHANGED = "changed"
    """A perturbation that must not matter changed an event of a replay."""
    LOCATED = "located"
    """How the line was found: the first line whose values differ between two runs, the
    statement that writes a module global, the memory read whose value changed."""


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence for a finding."""

    kind: EvidenceKind
    text: str
    """One sentence, e.g. ``seen at seq 1 of customer-a (and in 4 more activations)``."""
    condition: str = ""
    """The perturbation it was seen under (``CHANGED``), e.g. ``hash-seed-1``."""
    entity_key: str = ""
    """The key, hex (empty when not about one activation)."""
    seq: int | None = None
    event_index: int | None = None
    """The first event that changed (``CHANGED``)."""


@dataclass(frozen=True)
class Consequence:
    """The verdict an operator would get replaying such an activation."""

    verdict: str
    """``reproduced``, ``diverged``, ``irreproducible`` or ``error``: what the replays gave."""
    exit_code: int
    text: str
    """E.g. ``replayed in another process: diverged (exit 1) at event 1 LLM_CALL ...``."""
    condition: str = ""
    """The replay it was seen in (empty: none of the replays changed)."""


@dataclass(frozen=True)
class Finding:
    """One source of irreproducibility, at one line of agent code."""

    cause: Cause
    what: str
    """E.g. ``time.time() read at examples/agent.py:41``."""
    file: str
    """The agent file, relative to the working directory when inside it ("" if unknown)."""
    line: int
    """Its line (0 if unknown)."""
    api: str
    """What was called or changed: ``time.time``, ``os.environ['REGION']``, ``set iteration``,
    ``module global _COUNT``, ``memory['last_order']``..."""
    evidence: tuple[Evidence, ...]
    consequence: Consequence
    remedy: str
    tool: str = ""
    """The read-only tool it happened in, if any."""
    activations: int = 0
    """In how many sample activations it was seen or changed something."""
    extra: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The finding as JSON data (``--json``'s ``findings[]``)."""
        doc = asdict(self)
        doc["cause"] = self.cause.value
        doc["evidence"] = [{**asdict(e), "kind": e.kind.value} for e in self.evidence]
        return doc
