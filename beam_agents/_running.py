"""What is running right now: the activation's context and the tool ``ctx.call`` is in.

Two ``ContextVar``s, set by ``run_activation`` and ``AgentContext.call``, read by
the replay guard (which tool opened a socket or wrote a file) and by
``side_effect=True`` tools (which refuse to run inside an activation). A
``ContextVar`` follows the code that set it, across ``await`` and into
``contextvars.copy_context().run``, and is never confused by a local variable
that happens to be called ``tool``. A thread started by agent code starts with
an empty context: there, replay's process-wide guards still apply.

No imports from the rest of the package: everything may import this module.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

__all__ = [
    "ACTIVATION",
    "AGENT_IMPORT",
    "TOOL",
    "allow_side_effects",
    "refuse_side_effects",
    "side_effects_refused",
]

ACTIVATION: ContextVar[Any | None] = ContextVar("beam_agents_activation", default=None)
"""The ``AgentContext`` of the activation running in this context, or None."""

TOOL: ContextVar[str | None] = ContextVar("beam_agents_tool", default=None)
"""The name of the tool ``ctx.call`` is running in this context, or None."""

AGENT_IMPORT: ContextVar[bool] = ContextVar("beam_agents_agent_import", default=False)
"""True while replay imports a module of agent code in this context (its body runs)."""

_lock = threading.Lock()
_refusals = 0
_forever = False


def refuse_side_effects(*, forever: bool = False) -> None:
    """Refuse every ``side_effect=True`` tool in this process, in every thread.

    Replay calls it for its re-run (and, as a CLI, for the life of the process);
    each call without ``forever`` is undone by one ``allow_side_effects()``.
    """
    global _refusals, _forever
    with _lock:
        if forever:
            _forever = True
        else:
            _refusals += 1


def allow_side_effects() -> None:
    """Undo one ``refuse_side_effects()`` (never a ``forever`` one)."""
    global _refusals
    with _lock:
        _refusals = max(0, _refusals - 1)


def side_effects_refused() -> bool:
    """True inside an activation (this context) or while replay refuses them process-wide."""
    return _forever or _refusals > 0 or ACTIVATION.get() is not None
