"""HitlPolicy: how intents expire and how long a suspended key waits for a human.

Kept in the core (not the pipeline) because replay re-runs activations with the
same policy type: the default one, or the pipeline's own via ``--hitl``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from beam_agents.errors import ConfigError

HOUR_MS = 3_600_000
MAX_DURATION_MS = 100 * 365 * 24 * HOUR_MS
"""The longest intent TTL or HITL timeout (a hundred years): added to an activation's clock
(``expires_at_ms``, the timer), it must stay within the int64 of a trace or an intent."""


@dataclass(frozen=True, kw_only=True)
class HitlPolicy:
    """Human-in-the-loop settings of a pipeline."""

    intent_ttl_ms: int = 24 * HOUR_MS
    """An intent's ``expires_at_ms`` is its ``created_ms`` plus this."""
    hitl_timeout_ms: int = 1 * HOUR_MS
    """A suspended key resumes with a ``Timeout`` this long after it suspended."""
    approval_channel: str = "default"
    """Stamped on approval-gated intents so the approval service can route them."""
    approval_required_tools: frozenset[str] = field(default_factory=frozenset)
    """Tools that need approval in this pipeline even if not declared ``requires_approval``."""

    def __post_init__(self) -> None:
        for name in ("intent_ttl_ms", "hitl_timeout_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    f"HitlPolicy.{name} must be an int of milliseconds, got "
                    f"{type(value).__name__}: {value!r:.80}"
                )
            if not 0 < value <= MAX_DURATION_MS:
                raise ConfigError(
                    f"HitlPolicy.{name} must be > 0 and at most {MAX_DURATION_MS} (a hundred "
                    f"years in ms), got {value}"
                )
        if not self.approval_channel:
            raise ConfigError("HitlPolicy.approval_channel must be a non-empty string")
        object.__setattr__(self, "approval_required_tools", frozenset(self.approval_required_tools))

    def describe(self) -> str:
        """One line naming every setting, for replay reports."""
        tools = ",".join(sorted(self.approval_required_tools)) or "-"
        return (
            f"intent_ttl_ms={self.intent_ttl_ms} hitl_timeout_ms={self.hitl_timeout_ms} "
            f"approval_channel={self.approval_channel} approval_required_tools={tools}"
        )


DEFAULT_HITL_POLICY = HitlPolicy()
