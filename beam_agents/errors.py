"""The exception tree of beam-agents, drawn once.

    BeamAgentsError                      root: catch this to catch everything of ours
    ├── AgentDefinitionError             an agent, tool or registry is declared wrongly
    ├── ConfigError                      AgentConfig / HitlPolicy / sink URI refused at construction
    ├── AgentCodeError                   agent code broke a rule of the context (raised inside it)
    │   ├── SideEffectRefusedError       ctx.call on a side_effect=True tool (use ctx.act)
    │   ├── UnknownToolError             a tool name the registry does not hold
    │   ├── MemoryValueError             a non-JSON value written to ctx.memory
    │   ├── AgentResultError             start/resume returned something other than Done/Suspend
    │   └── RecordedResultError          a recorded tool returned a non-JSON or oversize result
    ├── ProviderError                    the model provider could not answer
    │   ├── CacheMissError               the provider that serves nothing was reached (replay)
    │   └── ProviderCallError            a provider's call failed; ``transient`` says if a retry may help
    │       ├── ProviderRateLimitError   429: slow down (transient)
    │       ├── ProviderTimeoutError     no answer in time, or the call's deadline passed (transient)
    │       ├── ProviderUnavailableError 5xx, overloaded, or no connection (transient)
    │       ├── ProviderRequestError     4xx, or a request the provider refuses to send (permanent)
    │       └── ProviderResponseError    an answer that is not one: wrong shape, not JSON, too
    │                                    deep, too large (permanent)
    ├── ToolNotRecordedError             a recorded tool's result is not in the tool cache (replay)
    ├── NetworkBlockedError              a connection attempted while the network is blocked (replay)
    ├── StateError                       a state blob cannot be used
    │   ├── CorruptBlobError             bytes that do not parse as the blob they claim to be
    │   ├── BlobTooNewError              a blob or snapshot newer than this package (upgrade)
    │   └── MigrationGapError            an old version with no migration path to the current one
    ├── TraceStreamError                 a trace stream that cannot be read
    │   ├── FrameTooLargeError           a frame longer than MAX_FRAME_BYTES
    │   └── TruncatedStreamError         the stream ends inside a frame
    ├── SinkError                        a sink could not deliver a record (fails the bundle)
    └── ReplayError                      replay could not judge the activation (see beam_agents.replay)

Every error carries typed attributes naming what is wrong, so callers (the
replay CLI, the DoFn's dead-letter output) never parse messages.
"""

from __future__ import annotations


class BeamAgentsError(Exception):
    """Root of every error raised by beam-agents."""


class AgentDefinitionError(BeamAgentsError):
    """An agent, tool or registry is declared wrongly (found at definition time)."""


class ConfigError(BeamAgentsError):
    """A configuration value is refused at construction time."""


class AgentCodeError(BeamAgentsError):
    """Agent code broke a rule of the activation context."""


class SideEffectRefusedError(AgentCodeError):
    """A ``side_effect=True`` tool was run by agent code (``ctx.call``, a direct call, ``.fn``)
    inside an activation or a replay; such tools go through ``ctx.act`` and an executor."""

    def __init__(self, tool: str, *, direct: bool = False) -> None:
        self.tool = tool
        how = (
            "it refuses to run inside an activation or a replay, however it is called"
            if direct
            else "ctx.call refuses to run it"
        )
        super().__init__(
            f"tool {tool!r} is declared side_effect=True, so {how}; "
            f"stage it with ctx.act({tool!r}, ...) and an executor will perform it"
        )


class UnknownToolError(AgentCodeError):
    """A tool name the registry does not hold."""

    def __init__(self, tool: str, known: list[str]) -> None:
        self.tool = tool
        self.known = known
        super().__init__(
            f"no tool named {tool!r} in the registry (it has: {', '.join(known) or 'none'})"
        )


class MemoryValueError(AgentCodeError):
    """A value that is not JSON was written to ``ctx.memory``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"ctx.memory{path}: {reason}; working memory holds JSON values only")


class AgentResultError(AgentCodeError):
    """``start``/``resume`` returned something other than ``Done`` or ``Suspend``."""


class ProviderError(BeamAgentsError):
    """The model provider could not answer."""


class CacheMissError(ProviderError):
    """A request reached the provider that serves nothing: it is not in the replay cache."""

    def __init__(self, cache_key: str, model: str) -> None:
        self.cache_key = cache_key
        self.model = model
        super().__init__(f"cache miss: no cached response for key {cache_key} (model {model!r})")


class RecordedResultError(AgentCodeError):
    """A ``recorded=True`` tool returned what the tool cache cannot keep (fails the activation)."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(
            f"recorded tool {tool!r}: {reason}; a recorded result must be a JSON value or bytes "
            "within ToolCachePolicy.max_result_bytes, so replay can serve it"
        )


class ToolNotRecordedError(BeamAgentsError):
    """Replay: a ``recorded=True`` tool call whose result the snapshot's tool cache cannot serve."""

    def __init__(self, tool: str, args_sha256: str, status: str) -> None:
        self.tool = tool
        self.args_sha256 = args_sha256
        self.status = status
        super().__init__(
            f"recorded tool {tool!r} (args sha256 {args_sha256}): the snapshot's tool cache "
            f"cannot serve it ({status}); replay never runs a recorded tool"
        )


class ProviderCallError(ProviderError):
    """A provider's call failed; the SDK's own error (if any) is the ``__cause__``.

    Raised by ``beam_agents.providers`` once the call's own attempts are spent (and by
    any provider that maps its client's errors to these types). The activation records
    the subclass's name as the LLM_CALL's ``error_type``. ``transient`` says whether the
    same request may succeed later: ``RunAgent`` retries an activation that failed with a
    transient one on the key (``AgentConfig.retry``) and dead-letters one that failed
    with a permanent one at once. Agent code may catch it too
    (``except ProviderCallError as exc: if exc.transient: ...``).
    """

    transient: bool = False
    """True when the same request may succeed later (rate limit, timeout, 5xx, no connection)."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        attempts: int = 1,
        retry_after_s: float | None = None,
    ) -> None:
        self.provider = provider
        """The provider's ``name``."""
        self.status = status
        """The HTTP status, when the provider answered with one."""
        self.request_id = request_id
        """The provider's request id (quote it to the provider's support), when it sent one."""
        self.detail = message
        self.attempts = attempts
        """How many HTTP attempts the call made before giving up (1: it was not retried)."""
        self.retry_after_s = retry_after_s
        """The wait the provider asked for (``Retry-After``), when it asked: the key's retry
        policy waits at least this long (up to its ``max_backoff_ms``)."""
        where = f" (HTTP {status})" if status is not None else ""
        rid = f" [request id {request_id}]" if request_id else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"provider {provider!r}{where}{tries}: {message}{rid}")

    @property
    def retryable(self) -> bool:
        """The same as ``transient`` (its earlier name)."""
        return self.transient


class ProviderRateLimitError(ProviderCallError):
    """The provider refused the call for now (HTTP 429): too many requests or tokens."""

    transient = True


class ProviderTimeoutError(ProviderCallError):
    """No answer within ``timeout_s`` (or HTTP 408), or the call's deadline passed first."""

    transient = True


class ProviderUnavailableError(ProviderCallError):
    """The provider failed (HTTP 5xx, overloaded) or could not be reached at all."""

    transient = True


class ProviderRequestError(ProviderCallError):
    """The provider refused the request itself (HTTP 4xx: bad request, auth, unknown model),
    or the request is one this provider refuses to send (a stream, material its protocol
    cannot carry)."""


class ProviderResponseError(ProviderCallError):
    """The provider answered, but not with an answer: a body without the vendor's response
    shape, not JSON, nested too deep, or larger than the provider's ``max_response_bytes``."""


class NetworkBlockedError(BeamAgentsError):
    """Code tried to open a network connection while replay blocks the network."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__(f"network connection to {address} blocked: replay runs offline")


class StateError(BeamAgentsError):
    """A state blob or snapshot cannot be used."""


class CorruptBlobError(StateError):
    """Bytes that do not parse as the blob they claim to be."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"the {kind} blob is corrupt: {detail}")


class BlobTooNewError(StateError):
    """A blob (or snapshot) stamped with a schema version newer than this package."""

    def __init__(self, kind: str, found: int, supported: int) -> None:
        self.kind = kind
        self.found = found
        self.supported = supported
        super().__init__(
            f"the {kind} is schema version {found}, newer than this beam-agents supports "
            f"(version {supported}); upgrade beam-agents to a release that reads version {found} "
            f"(guessing forward would silently misread it)"
        )


class MigrationGapError(StateError):
    """A blob version with no migration path to the current version."""

    def __init__(self, kind: str, found: int, current: int, missing_step: int) -> None:
        self.kind = kind
        self.found = found
        self.current = current
        self.missing_step = missing_step
        super().__init__(
            f"the {kind} blob is schema version {found} and no migration leads from version "
            f"{missing_step} to {missing_step + 1} (current is {current}); this blob cannot be read"
        )


class TraceStreamError(BeamAgentsError):
    """A trace stream that cannot be read."""

    def __init__(self, message: str, *, source: str = "", offset: int = 0) -> None:
        self.source = source
        self.offset = offset
        super().__init__(message)


class FrameTooLargeError(TraceStreamError):
    """A frame declares a length over ``MAX_FRAME_BYTES``."""


class TruncatedStreamError(TraceStreamError):
    """The stream ends in the middle of a frame."""


class SinkError(BeamAgentsError):
    """A sink could not deliver a record; the bundle fails so the runner retries it."""

    def __init__(self, uri: str, record: str, cause: str) -> None:
        self.uri = uri
        self.record = record
        self.cause = cause
        super().__init__(f"sink {uri} could not deliver {record}: {cause}")


class ReplayError(BeamAgentsError):
    """Replay could not judge the activation (see ``beam_agents.replay`` for its kinds)."""
