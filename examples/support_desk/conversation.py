"""Working memory of the support agent: an append-only log of turns, each stamped with its seq.

Why a log and not "last order" / "turn count" fields that each activation
overwrites: replay loads the memory a *later* snapshot holds (the post-image),
so an activation that reads a value it also overwrites would read its own
write when replayed, build a different prompt, and miss the cache. Reading
only the turns of earlier activations (``seq < ctx.seq``) gives every
activation the memory it saw when it ran, whichever later snapshot it is
replayed from. Derived facts (the customer's tier, the order being discussed)
are computed from that log, never stored separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from beam_agents.context import AgentContext

MAX_TURNS = 20
"""Turns kept in memory; older ones are dropped."""

Turn = dict[str, Any]


def turns_before(ctx: AgentContext) -> list[Turn]:
    """The turns recorded by this key's earlier activations, oldest first."""
    return [dict(turn) for turn in ctx.memory.get("turns", []) if turn["seq"] < ctx.seq]


def record_turn(ctx: AgentContext, **fields: Any) -> None:
    """Append this activation's turn (stamped with ``ctx.seq`` and ``ctx.now_ms``)."""
    turns = [turn for turn in ctx.memory.get("turns", []) if turn["seq"] != ctx.seq]
    turns.append({"seq": ctx.seq, "at_ms": ctx.now_ms, **fields})
    ctx.memory["turns"] = turns[-MAX_TURNS:]


def last_value(history: Sequence[Turn], field: str) -> Any:
    """The most recent non-empty value of ``field`` in ``history`` (None if none has it)."""
    for turn in reversed(history):
        if turn.get(field):
            return turn[field]
    return None
