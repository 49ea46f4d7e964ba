"""``RetryPolicy``: when a key tries a failed activation's trigger again, and when it gives up.

An activation that fails commits nothing but its SEQ and its trace (invariant 1).
What becomes of its trigger is decided here, per failure:

- **transient** (``is_transient``: the error, or an error it was raised from or while
  handling, is a ``ProviderCallError`` whose ``transient`` is true: a rate limit, a
  timeout, an unavailable or unreachable provider): the key holds the trigger and tries
  it again ``wait_ms`` later, as a new activation with the next SEQ, up to
  ``max_attempts`` activations in all;
- **permanent** (anything else: agent code raised or returned what is not ``Done`` or
  ``Suspend``, the provider refused the request or gave no answer) or transient past
  ``max_attempts``: the trigger is dead-lettered on ``.errors`` with every attempt.

Waits are measured on the activation clock (event time): a retry runs when the
watermark passes its due time, on that time as its clock, like a HITL timeout. So the
schedule is the same on every run of the same input, and replay sees every attempt's
clock in its trace. Beam-free (``beam_agents.key_step`` applies it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from beam_agents.errors import ConfigError, ProviderCallError

SECOND_MS = 1000
MAX_CAUSES = 16
"""How far ``is_transient`` follows ``__cause__`` / ``__context__`` (a chain is rarely 3)."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How a key retries a trigger whose activation failed transiently (``AgentConfig.retry``).

    The default tries 8 times over about 15 minutes of event time (waits of 10 s, 20 s,
    40 s, 80 s, 160 s, then 300 s, each up to 10 % shorter), which rides out a rate-limit
    storm or a provider outage of a few minutes. ``RetryPolicy(max_attempts=1)`` never
    retries: every failure is dead-lettered at once.
    """

    max_attempts: int = 8
    """Activations of one trigger in all, the first included (1: never retry)."""
    initial_backoff_ms: int = 10 * SECOND_MS
    """The wait after the first failure."""
    backoff_multiplier: float = 2.0
    """Each further wait is the previous one times this."""
    max_backoff_ms: int = 300 * SECOND_MS
    """No wait is longer than this."""
    jitter: float = 0.1
    """Each wait is shortened by up to this fraction (0 to below 1), by an amount drawn
    from the key and the failed seq: keys that failed together do not all retry at once,
    and the same history always gets the same schedule."""

    def __post_init__(self) -> None:
        for name in ("max_attempts", "initial_backoff_ms", "max_backoff_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RetryPolicy.{name} must be an int of 1 or more, got {value!r}")
        multiplier = self.backoff_multiplier
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not (
            1.0 <= multiplier <= 100.0
        ):
            raise ConfigError(
                f"RetryPolicy.backoff_multiplier must be a number from 1 to 100, got {multiplier!r}"
            )
        jitter = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not (
            0.0 <= jitter < 1.0
        ):
            raise ConfigError(f"RetryPolicy.jitter must be a number from 0 to below 1, got {jitter!r}")
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ConfigError(
                f"RetryPolicy.max_backoff_ms ({self.max_backoff_ms}) is shorter than "
                f"initial_backoff_ms ({self.initial_backoff_ms})"
            )

    def wait_ms(self, failures: int, *, entity_key: bytes, seq: int) -> int:
        """The wait after a trigger's ``failures``-th failed activation (at ``seq``), in ms."""
        base = float(self.initial_backoff_ms) * self.backoff_multiplier ** max(0, failures - 1)
        wait = min(base, float(self.max_backoff_ms))
        if self.jitter:
            material = b"beam-agents/retry\x00" + entity_key + b"\x00" + str(seq).encode()
            draw = int.from_bytes(hashlib.sha256(material).digest()[:8], "big") / 2**64
            wait *= 1.0 - self.jitter * draw
        return max(1, int(wait))

    def next_attempt_ms(
        self, error: BaseException, *, failures: int, now_ms: int, entity_key: bytes, seq: int
    ) -> int | None:
        """When to try the trigger again after its ``failures``-th failure, or None: give up.

        ``now_ms`` is the failed activation's clock; a transient failure with attempts
        left is retried ``wait_ms`` after it, or after the ``Retry-After`` the provider
        sent if that is longer (up to ``max_backoff_ms``).
        """
        found = transient_cause(error)
        if failures >= self.max_attempts or found is None:
            return None
        wait = self.wait_ms(failures, entity_key=entity_key, seq=seq)
        if found.retry_after_s is not None:
            # The provider said how long it needs: no sooner (within max_backoff_ms).
            # min() on floats first: a Retry-After of 1e308 s is inf ms, which int() refuses.
            asked_ms = found.retry_after_s * 1000.0
            if asked_ms == asked_ms:  # not NaN (a hand-built error's retry_after_s may be)
                wait = max(wait, int(min(float(self.max_backoff_ms), asked_ms)))
        return now_ms + wait

    def describe(self) -> str:
        """One line naming every setting (for dead-letter reasons and reports)."""
        return (
            f"max_attempts={self.max_attempts} initial_backoff_ms={self.initial_backoff_ms} "
            f"backoff_multiplier={self.backoff_multiplier:g} max_backoff_ms={self.max_backoff_ms} "
            f"jitter={self.jitter:g}"
        )


DEFAULT_RETRY_POLICY = RetryPolicy()


def is_transient(error: BaseException) -> bool:
    """Whether a failed activation's ``error`` may not recur: a transient provider failure.

    True when ``error``, or an exception it was raised from (``__cause__``) or while
    handling (``__context__``), is a ``ProviderCallError`` whose ``transient`` is true:
    agent code that catches a rate limit and raises its own error is still retried.
    """
    return transient_cause(error) is not None


def transient_cause(error: BaseException) -> ProviderCallError | None:
    """The transient ``ProviderCallError`` ``error`` is or comes from (``is_transient``)."""
    seen: set[int] = set()
    current: BaseException | None = error
    pending: list[BaseException] = []
    while current is not None and len(seen) < MAX_CAUSES:
        if id(current) not in seen:
            seen.add(id(current))
            if isinstance(current, ProviderCallError) and current.transient:
                return current
            for linked in (current.__cause__, current.__context__):
                if linked is not None:
                    pending.append(linked)
        current = pending.pop(0) if pending else None
    return None


__all__ = ["DEFAULT_RETRY_POLICY", "RetryPolicy", "is_transient", "transient_cause"]
