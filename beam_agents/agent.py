"""The agent API a pipeline author implements: ``Agent``, and what its methods return.

``start`` runs for an ``event``; ``resume`` runs when a suspended key gets what it
awaited (a ``ToolResult``), a human's ``Approval`` rejecting an awaited intent,
or a ``Timeout`` when the HITL deadline passes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from beam_agents._protos import Approval, Event, ToolResult
from beam_agents.errors import AgentCodeError

if TYPE_CHECKING:
    from beam_agents.context import AgentContext


@dataclass(frozen=True)
class Done:
    """The activation finished; its outputs go to ``.outputs``."""

    output: bytes | None = None
    """One output, the common case (``Done(output=b"...")``)."""
    outputs: Sequence[bytes] = ()
    """Further outputs, emitted after ``output`` in order."""

    def all_outputs(self) -> tuple[bytes, ...]:
        """Every output in emission order."""
        head = () if self.output is None else (self.output,)
        return head + tuple(self.outputs)


@dataclass(frozen=True)
class Suspend:
    """The activation ends suspended, awaiting the results of some intents."""

    state: Any = None
    """The agent's own state (JSON), handed back to ``resume``; stored as the adapter snapshot."""
    awaiting: Sequence[str] = ()
    """Intent ids (from ``ctx.act``) whose result or rejection resumes the key."""


@dataclass(frozen=True)
class Timeout:
    """Inbound for ``resume`` when the HITL deadline passed before any awaited answer."""

    deadline_ms: int
    awaiting_intent_ids: tuple[str, ...] = field(default_factory=tuple)


Inbound = ToolResult | Approval | Timeout
Outcome = Done | Suspend


class Agent:
    """Base class of an agent. Subclass it and implement ``start`` (and ``resume`` if it suspends).

    Agent code must take time from ``ctx.now_ms`` and randomness from ``ctx.random``:
    anything else makes its activations irreproducible, and replay says so.
    """

    build_version: str = ""
    """The author's own version of this agent's code (``"1.4.2"``, a commit): snapshots record
    it with the class and a digest of its module's source, so replay names build skew."""

    def start(self, ctx: AgentContext, event: Event) -> Outcome:
        """Handle an event; return ``Done`` or ``Suspend``."""
        raise AgentCodeError(f"{type(self).__name__} does not implement start(ctx, event)")

    def resume(self, ctx: AgentContext, state: Any, step_index: int, inbound: Inbound) -> Outcome:
        """Continue after a suspension; ``step_index`` counts resumes of this suspension from 1."""
        raise AgentCodeError(
            f"{type(self).__name__} returned Suspend but does not implement "
            "resume(ctx, state, step_index, inbound)"
        )
