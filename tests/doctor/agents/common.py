"""What the corpus agents share: the model they run on, and a request builder."""

from __future__ import annotations

from beam_agents import LlmRequest
from beam_agents.testing import ScriptedProvider, chat_request


def make_provider() -> ScriptedProvider:
    """The corpus's model: answers every request with the same line."""
    return ScriptedProvider(lambda request: "noted.", name="corpus-model")


def ask(text: str) -> LlmRequest:
    return chat_request("corpus-llm", ("system", "You are terse."), ("user", text))
