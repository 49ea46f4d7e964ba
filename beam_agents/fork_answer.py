"""``ForkAnswer``: replay's fork, the one call of a re-run that receives another answer.

Replay's ``--fork N --set VALUE`` (docs/replay.md, "A fork") re-runs an activation
whose call recorded at trace index N is answered with VALUE instead of what the
snapshot's caches (or the tool itself) would give: a model call gets a response
whose text is VALUE, a tool call (recorded or plain) gets VALUE as its result and
its function is not run. Every other call is served as in any replay. The pipeline
never builds one (``ReplayHooks.fork`` is None there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beam_agents._protos import LlmRequest, LlmResponse

__all__ = ["ForkAnswer"]


@dataclass(frozen=True, kw_only=True)
class ForkAnswer:
    """The answer the call at trace index ``index`` receives (``model`` says which kind)."""

    index: int
    """The trace index of the call's event (``LLM_CALL`` or ``TOOL_CALL``)."""
    model: bool
    """True: a model call, answered with ``text``; False: a tool call, with ``result``."""
    text: str = ""
    """A model call's response text."""
    result: Any = None
    """A tool call's result: a JSON value (the caller parsed it)."""

    def answers_model_call(self, index: int) -> bool:
        return self.model and index == self.index

    def answers_tool_call(self, index: int) -> bool:
        return not self.model and index == self.index

    def response(self, request: LlmRequest) -> LlmResponse:
        """The response the forked model call receives: ``text``, under the request's model,
        ending its turn; no usage (nothing was billed) and no tool calls."""
        return LlmResponse(text=self.text, model=request.model, stop_reason="end_turn")
