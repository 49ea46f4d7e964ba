"""Working memory of the support agent: a log of turns, one memory key per turn (``turn.<seq>``).

Why a key per turn, and not one list (or "last order" / "turn count" fields) that
each activation rewrites: replay judges memory per top-level key. It replays an
activation from a *later* snapshot's memory, and the memory blob records which
seq last wrote each key (docs/replay.md §4). A key no activation from the
replayed one on has rewritten holds exactly what that activation read; a key it
or a later one rewrote does not, and a replay that read one can only say so
(irreproducible), never "reproduced". So each activation reads the turns of the
activations before it, key by key, and writes only its own. Derived facts (the
customer's tier, the order being discussed) are computed from that log, never
stored separately.

Old turns are deleted, but only ``MAX_TURNS`` activations after the last one
that reads them: an activation replays exactly from any snapshot taken up to
``MAX_TURNS`` activations after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from beam_agents.context import AgentContext

MAX_TURNS = 20
"""How many earlier activations' turns an activation reads."""

Turn = dict[str, Any]


def turn_key(seq: int) -> str:
    """The memory key of the turn activation ``seq`` recorded."""
    return f"turn.{seq:06d}"


def turns_before(ctx: AgentContext) -> list[Turn]:
    """The turns the key's last ``MAX_TURNS`` activations before this one recorded, oldest first."""
    turns = (ctx.memory.get(turn_key(seq)) for seq in range(max(1, ctx.seq - MAX_TURNS), ctx.seq))
    return [dict(turn) for turn in turns if turn is not None]


def record_turn(ctx: AgentContext, **fields: Any) -> None:
    """Record this activation's turn (stamped with ``ctx.seq`` and ``ctx.now_ms``), and forget
    the one no activation reads any more, ``MAX_TURNS`` activations late."""
    ctx.memory[turn_key(ctx.seq)] = {"seq": ctx.seq, "at_ms": ctx.now_ms, **fields}
    if ctx.seq > 2 * MAX_TURNS:
        ctx.memory.pop(turn_key(ctx.seq - 2 * MAX_TURNS), None)


def last_value(history: Sequence[Turn], field: str) -> Any:
    """The most recent non-empty value of ``field`` in ``history`` (None if none has it)."""
    for turn in reversed(history):
        if turn.get(field):
            return turn[field]
    return None
