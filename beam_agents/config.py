"""``AgentConfig``: how ``RunAgent`` runs an agent — its model client, sinks, HITL and cache policy.

Beam-free on purpose: ``beam_agents.AgentConfig`` is loaded lazily from here and
replay may read a pipeline's configuration without importing Apache Beam.

Every value is checked when the config is built (like Beam's
``validate_stateful_dofn``), not at the first write: a bad sink URI fails the
pipeline author's ``AgentConfig(...)`` line, naming the URI and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from beam_agents.errors import ConfigError
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.llm_cache import DEFAULT_CACHE_POLICY, CachePolicy
from beam_agents.provider import Provider
from beam_agents.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from beam_agents.sinks.uri import (
    Role,
    SinkUri,
    check_sink_options,
    is_secret_option,
    parse_sink_uri,
    redact_options,
    redact_uri,
)
from beam_agents.tool_cache import DEFAULT_TOOL_CACHE_POLICY, ToolCachePolicy

DEFAULT_INBOX_LIMIT = 100
MAX_IN_FLIGHT_LIMIT = 4096


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """The configuration of one ``RunAgent``.

    Example (docs/replay.md §1)::

        config = AgentConfig(
            provider_factory=make_client,
            traces_to="kafka://broker:9092/traces",
            snapshots_to="kafka://broker:9092/snapshots",  # or pubsub://
        )
    """

    provider_factory: Callable[[], Provider]
    """Builds the model client; called once per DoFn instance (in ``setup``), never pickled."""
    traces_to: str | None = None
    """Where trace events go (``kafka://``, ``pubsub://``, ``bigquery://``, ``otlp://``,
    ``file://``); None: ``.traces`` is exposed and unconsumed."""
    snapshots_to: str | None = None
    """Where state snapshots go (``kafka://``, ``pubsub://``, ``file://``). No default:
    it is the egress of the state-disclosure primitive (docs/replay.md §1)."""
    hitl: HitlPolicy = DEFAULT_HITL_POLICY
    """Intent TTL, HITL timeout, approval channel and approval-gated tools."""
    cache: CachePolicy = DEFAULT_CACHE_POLICY
    """Replay-cache policy: payload retention, payload size limit, capacity, TTL."""
    tool_cache: ToolCachePolicy = DEFAULT_TOOL_CACHE_POLICY
    """Tool-cache policy for ``@tool(recorded=True)`` results: retention, result size limit,
    capacity in entries and bytes, TTL."""
    sink_options: Mapping[str, str] = field(default_factory=dict)
    """Options passed to every sink this config opens (e.g. producer settings)."""
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    """What a key does with a trigger whose activation failed: a transient provider
    failure is tried again later on the key (its later envelopes wait behind it), anything
    else and the last attempt go to ``.errors`` (docs/pipeline.md, *When an activation
    fails*)."""
    inbox_limit: int = DEFAULT_INBOX_LIMIT
    """Envelopes a key may hold waiting (behind its suspension or a pending retry); more go
    to ``.errors``."""
    max_in_flight: int = 1
    """Activations of *different* keys a worker process has in flight at once (threads of
    one pool per RunAgent). 1: one after another, as they arrive, each within its bundle.
    More: an activation does not hold its bundle; while it waits on its model, other keys'
    run, and a later bundle commits it; per key still one at a time, in order
    (docs/pipeline.md, *Concurrent activations*). The provider is then called from several
    threads."""

    def __repr__(self) -> str:
        # Every field as the dataclass would show it, except what may hold a secret: sink
        # URIs without user information or secret query values, and sink_options with the
        # values of secret-looking keys (sasl.password, ssl.key.pem, ...) as ***.
        shown = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "sink_options":
                text = repr(redact_options(value))
            elif item.name in ("traces_to", "snapshots_to") and isinstance(value, str):
                text = repr(redact_uri(value))
            else:
                text = repr(value)
            shown.append(f"{item.name}={text}")
        return f"AgentConfig({', '.join(shown)})"

    def __post_init__(self) -> None:
        if not callable(self.provider_factory):
            raise ConfigError(
                f"AgentConfig.provider_factory must be a callable returning a provider, "
                f"got {self.provider_factory!r}"
            )
        if not isinstance(self.hitl, HitlPolicy):
            raise ConfigError(f"AgentConfig.hitl must be a HitlPolicy, got {self.hitl!r}")
        if not isinstance(self.cache, CachePolicy):
            raise ConfigError(f"AgentConfig.cache must be a CachePolicy, got {self.cache!r}")
        if not isinstance(self.tool_cache, ToolCachePolicy):
            raise ConfigError(
                f"AgentConfig.tool_cache must be a ToolCachePolicy, got {self.tool_cache!r}"
            )
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"AgentConfig.retry must be a RetryPolicy, got {self.retry!r}")
        if (
            isinstance(self.inbox_limit, bool)
            or not isinstance(self.inbox_limit, int)
            or self.inbox_limit < 1
        ):
            raise ConfigError(
                f"AgentConfig.inbox_limit must be a positive int, got {self.inbox_limit!r}"
            )
        if (
            isinstance(self.max_in_flight, bool)
            or not isinstance(self.max_in_flight, int)
            or not 1 <= self.max_in_flight <= MAX_IN_FLIGHT_LIMIT
        ):
            raise ConfigError(
                f"AgentConfig.max_in_flight must be an int from 1 (activations one after "
                f"another) to {MAX_IN_FLIGHT_LIMIT}, got {self.max_in_flight!r}"
            )
        options = dict(self.sink_options)
        for name, value in options.items():
            if not isinstance(name, str) or not isinstance(value, str):
                shown = "***" if is_secret_option(str(name)) else repr(value)
                raise ConfigError(
                    f"AgentConfig.sink_options maps str to str; got {name!r}: {shown}"
                )
        # A plain dict copy: the caller's mapping cannot change under a running pipeline,
        # and the config stays picklable (a MappingProxyType is not).
        object.__setattr__(self, "sink_options", options)
        roles: tuple[tuple[Role, str | None], ...] = (
            ("traces", self.traces_to),
            ("snapshots", self.snapshots_to),
        )
        sinks: list[SinkUri] = []
        for role, uri in roles:
            if uri is None:
                continue
            if not isinstance(uri, str):
                raise ConfigError(
                    f"AgentConfig.{role}_to must be a URI string or None, "
                    f"got a {type(uri).__name__}"
                )
            # Refuses an unknown scheme, a malformed URI, and bigquery:// or otlp:// for
            # snapshots, naming the URI and what to write instead.
            sinks.append(parse_sink_uri(uri, role=role))
        check_sink_options(sinks, options)
