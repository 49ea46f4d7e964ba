"""Model providers: the protocol the pipeline's model client implements, and replay's.

The pipeline builds its provider once per worker with ``AgentConfig.provider_factory``.
Replay injects ``UnservableProvider``: it holds no transport and its ``complete``
raises unconditionally, so reaching it is, by construction, a cache miss.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from beam_agents._protos import LlmRequest, LlmResponse
from beam_agents.errors import CacheMissError


@runtime_checkable
class Provider(Protocol):
    """A model client. ``name`` is part of every cache key, so keep it stable across deploys."""

    name: str

    def complete(self, request: LlmRequest) -> LlmResponse:
        """Answer one request."""
        ...


class UnservableProvider:
    """The provider replay runs with: it can serve nothing.

    It carries the original provider's *name* (cache keys include it, so replay
    must compute the same keys), and nothing else.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        from beam_agents.cache_key import compute_cache_key

        raise CacheMissError(compute_cache_key(request, provider=self.name), request.model)
