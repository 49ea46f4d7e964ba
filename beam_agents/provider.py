"""Model providers: the protocol the pipeline's model client implements, and replay's.

The pipeline builds its provider once per worker with ``AgentConfig.provider_factory``.
Replay injects ``UnservableProvider``: it holds no transport and its ``complete``
raises unconditionally, so reaching it is, by construction, a cache miss.

A provider may also report what its calls did (each HTTP attempt's latency and outcome,
each wait before another attempt) to a ``CallObserver``: it offers
``observe_calls(observer)``, which ``RunAgent``'s DoFn calls in ``setup`` with one that
turns them into Beam metrics. Attempts and waits are wall-clock facts: they go to
metrics, never into a trace (replay never calls a provider).
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


class CallObserver(Protocol):
    """Receives what a provider's calls did (``AgentDoFn`` reports it as Beam metrics)."""

    def attempt(self, provider: str, seconds: float, error: BaseException | None) -> None:
        """One HTTP attempt of provider ``provider`` took ``seconds``; ``error``: it failed so."""
        ...

    def wait(self, provider: str, seconds: float) -> None:
        """Provider ``provider`` waits ``seconds`` before another attempt of the same call."""
        ...


def observe_calls(provider: object, observer: CallObserver) -> bool:
    """Hand ``observer`` to ``provider`` if it reports its calls; True if it does.

    A provider reports them by offering ``observe_calls(observer)`` (both providers of
    ``beam_agents.providers`` do); one that does not is left as it is.
    """
    hook = getattr(provider, "observe_calls", None)
    if not callable(hook):
        return False
    hook(observer)
    return True


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
