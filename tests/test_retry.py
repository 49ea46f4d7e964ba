"""RetryPolicy: the schedule of a failed trigger's attempts, and what counts as transient."""

from __future__ import annotations

import pickle

import pytest

from beam_agents import AgentConfig
from beam_agents.errors import (
    AgentResultError,
    ConfigError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from beam_agents.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_transient

KEY = b"customer-42"


def test_the_default_rides_out_about_fifteen_minutes() -> None:
    policy = RetryPolicy(jitter=0)
    waits = [policy.wait_ms(n, entity_key=KEY, seq=n) for n in range(1, policy.max_attempts)]
    assert waits == [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]
    assert sum(waits) == 910_000
    assert DEFAULT_RETRY_POLICY.max_attempts == 8


def test_jitter_shortens_each_wait_by_a_fixed_draw_of_the_key_and_seq() -> None:
    policy = RetryPolicy(jitter=0.5)
    waits = {(key, seq): policy.wait_ms(1, entity_key=key, seq=seq)
             for key in (b"a", b"b", b"c") for seq in (1, 2, 3)}  # fmt: skip
    assert all(5_000 <= w <= 10_000 for w in waits.values())
    assert len(set(waits.values())) > 1  # keys that failed together spread out
    assert waits == {k: policy.wait_ms(1, entity_key=k[0], seq=k[1]) for k in waits}  # same again


def test_next_attempt_only_for_a_transient_failure_with_attempts_left() -> None:
    policy = RetryPolicy(max_attempts=3, jitter=0)
    limited = ProviderRateLimitError("p", "slow down", status=429)
    assert policy.next_attempt_ms(limited, failures=1, now_ms=1000, entity_key=KEY, seq=1) == 11_000
    assert policy.next_attempt_ms(limited, failures=2, now_ms=0, entity_key=KEY, seq=2) == 20_000
    assert policy.next_attempt_ms(limited, failures=3, now_ms=0, entity_key=KEY, seq=3) is None
    broken = RuntimeError("agent code broke")
    assert policy.next_attempt_ms(broken, failures=1, now_ms=0, entity_key=KEY, seq=1) is None
    assert RetryPolicy(max_attempts=1).next_attempt_ms(
        limited, failures=1, now_ms=0, entity_key=KEY, seq=1
    ) is None


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ProviderRateLimitError("p", "x"), True),
        (ProviderTimeoutError("p", "x"), True),
        (ProviderUnavailableError("p", "x"), True),
        (ProviderRequestError("p", "x"), False),
        (ProviderResponseError("p", "x"), False),
        (AgentResultError("returned None"), False),
        (RuntimeError("bug"), False),
        (SystemExit(3), False),
    ],
)
def test_what_is_transient(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_agent_code_that_wraps_a_transient_failure_is_still_retried() -> None:
    try:
        try:
            raise ProviderUnavailableError("p", "503")
        except ProviderUnavailableError as exc:
            raise ValueError("could not triage") from exc
    except ValueError as wrapped:
        assert is_transient(wrapped)
    try:
        try:
            raise ProviderUnavailableError("p", "503")
        except ProviderUnavailableError:
            raise KeyError("fallback broke too") from None
    except KeyError as handled:
        assert is_transient(handled)  # __context__ is kept under `from None`


def test_a_cyclic_chain_ends() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a
    assert is_transient(a) is False


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"initial_backoff_ms": 0}, "initial_backoff_ms"),
        ({"backoff_multiplier": 0.5}, "backoff_multiplier"),
        ({"jitter": 1.0}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"initial_backoff_ms": 10, "max_backoff_ms": 5}, "max_backoff_ms"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(options: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        RetryPolicy(**options)  # type: ignore[arg-type]


def test_the_config_carries_a_policy_and_refuses_anything_else() -> None:
    config = AgentConfig(provider_factory=lambda: None, retry=RetryPolicy(max_attempts=2))  # type: ignore[arg-type, return-value]
    assert pickle.loads(pickle.dumps(config.retry)) == RetryPolicy(max_attempts=2)
    assert AgentConfig(provider_factory=lambda: None).retry == DEFAULT_RETRY_POLICY  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigError, match=r"AgentConfig\.retry must be a RetryPolicy"):
        AgentConfig(provider_factory=lambda: None, retry=3)  # type: ignore[arg-type, return-value]


def test_a_retry_after_from_the_provider_is_a_floor_up_to_the_longest_backoff() -> None:
    policy = RetryPolicy(initial_backoff_ms=10_000, max_backoff_ms=60_000, jitter=0)
    asked = ProviderRateLimitError("p", "slow down", status=429, retry_after_s=45)
    assert policy.next_attempt_ms(asked, failures=1, now_ms=0, entity_key=KEY, seq=1) == 45_000
    greedy = ProviderRateLimitError("p", "slow down", status=429, retry_after_s=3600)
    assert policy.next_attempt_ms(greedy, failures=1, now_ms=0, entity_key=KEY, seq=1) == 60_000
    brief = ProviderRateLimitError("p", "slow down", status=429, retry_after_s=1)
    assert policy.next_attempt_ms(brief, failures=1, now_ms=0, entity_key=KEY, seq=1) == 10_000


def test_a_retry_after_too_large_for_an_int_is_the_longest_backoff() -> None:
    """Retry-After: 1e308 is inf ms: int() raised OverflowError out of the key's step."""
    policy = RetryPolicy(initial_backoff_ms=10_000, max_backoff_ms=60_000, jitter=0)
    for seconds in (1e308, float("inf")):
        huge = ProviderRateLimitError("p", "slow down", status=429, retry_after_s=seconds)
        assert policy.next_attempt_ms(huge, failures=1, now_ms=0, entity_key=KEY, seq=1) == 60_000
