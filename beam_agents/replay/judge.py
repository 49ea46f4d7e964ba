"""The verdict: what the re-run's events, cache misses and network attempts say together.

Walk the events in order. A re-run *stops being a reproduction* at its first
cache miss (any model call the provider was asked to answer, even one the
agent caught: a replay that reached the provider can never be "reproduced")
or its first blocked network attempt. Then:

- a difference before that point → ``diverged`` (exit 1) at that event;
- else a miss where the trace has an ``LLM_CALL`` → ``irreproducible`` (exit 3),
  naming the cache key, the event, the nearest cached entry and the request
  components that differ (or saying the response is simply gone);
- else a miss where the trace has something else → ``diverged`` at that event
  (the re-run called the model where the original did not);
- a network attempt → ``irreproducible``, naming the tool and the address;
- no miss, no attempt: ``reproduced`` if every event matches, else ``diverged``.

A what-if has nothing traced: it is ``what-if`` (exit 0) whatever happened, and
the reason says where it stopped (a pending resume's responses are not minted
yet, seed §4, so it usually stops at its first model call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from beam_agents._protos import TraceEvent
from beam_agents.activation import ActivationFailure, ActivationResult
from beam_agents.context import ProviderFailure
from beam_agents.llm_cache import LookupStatus, ReplayCache
from beam_agents.replay.compare import EventComparison, compare_events, describe_divergence
from beam_agents.replay.network_guard import NetworkAttempt
from beam_agents.replay.reconstruct import Plan
from beam_agents.replay.result import CacheMiss, Divergence, NearestEntry, Verdict
from beam_agents.trace_events import (
    ATTR_BILLED,
    ATTR_CACHE_HIT,
    ATTR_CACHE_KEY,
    ATTR_ERROR_TYPE,
    kind_name,
)

__all__ = ["Judgement", "judge"]


@dataclass(frozen=True)
class Judgement:
    """The verdict and the facts it rests on."""

    verdict: Verdict
    reason: str
    comparison: EventComparison
    first_divergence: Divergence | None = None
    cache_miss: CacheMiss | None = None


def _event_label(event: TraceEvent) -> str:
    return f"{kind_name(event.kind)} {event.name!r}"


def _divergence_reason(divergence: Divergence) -> str:
    where = f"event {divergence.index} ({divergence.kind} {divergence.name!r})"
    if divergence.missing:
        return f"the re-run ended before traced {where}"
    if divergence.extra:
        return f"the re-run produced {where}, which the trace does not have"
    fields = ", ".join(row.path for row in divergence.fields)
    return f"{where} differs: {fields}"


def _diverged(comparison: EventComparison, index: int) -> Judgement:
    divergence = describe_divergence(comparison.pairs[index])
    return Judgement(
        verdict=Verdict.DIVERGED,
        reason=_divergence_reason(divergence),
        comparison=comparison,
        first_divergence=divergence,
    )


def _cache_miss(
    failure: ProviderFailure, traced: TraceEvent | None, cache: ReplayCache
) -> CacheMiss:
    nearest = cache.nearest(failure.fingerprint)
    traced_key: str | None = None
    if (
        traced is not None
        and traced.kind == TraceEvent.LLM_CALL
        and ATTR_CACHE_KEY in traced.attributes
    ):
        traced_key = traced.attributes[ATTR_CACHE_KEY].string_value
    return CacheMiss(
        event_index=failure.event_index,
        cache_key=failure.cache_key,
        model=failure.model,
        status=failure.lookup_status.value,
        traced_cache_key=traced_key,
        nearest=None
        if nearest is None
        else NearestEntry(
            cache_key=nearest[0].cache_key, model=nearest[0].model, differences=tuple(nearest[1])
        ),
    )


def _miss_reason(
    miss: CacheMiss,
    cache: ReplayCache,
    traced: Sequence[TraceEvent] | None,
) -> str:
    head = f"cache miss at event {miss.event_index} (LLM_CALL {miss.model!r}, key {miss.cache_key})"
    status = LookupStatus(miss.status)
    if status is LookupStatus.DIGEST_ONLY:
        return (
            f"{head}: the entry is digest-only — the cache kept the response's digest, not the "
            "response (over the payload limit, or payloads not retained), so replay cannot serve it"
        )
    if status is LookupStatus.EXPIRED:
        return f"{head}: the cached entry had expired at the activation clock"
    if status is LookupStatus.MINTED_LATER:
        entry = cache.get(miss.cache_key)
        minted = f" (seq {entry.inserted_seq})" if entry is not None else ""
        return (
            f"{head}: the entry under this key was minted by a later activation{minted}; the "
            "response this activation consumed is gone"
        )
    if miss.traced_cache_key is not None and miss.traced_cache_key != miss.cache_key:
        differs = ", ".join(miss.nearest.differences) if miss.nearest else ""
        nearest = (
            f"; the nearest cached entry ({miss.nearest.cache_key}) differs in: {differs or 'nothing'}"
            if miss.nearest
            else "; the cache holds no entry to compare with"
        )
        return (
            f"{head}: the request changed — the traced call had key {miss.traced_cache_key}"
            f"{nearest}"
        )
    if traced is not None and miss.traced_cache_key == miss.cache_key:
        event = traced[miss.event_index]
        attrs = event.attributes
        billed = ATTR_BILLED in attrs and attrs[ATTR_BILLED].bool_value
        hit = ATTR_CACHE_HIT in attrs and attrs[ATTR_CACHE_HIT].bool_value
        error = attrs[ATTR_ERROR_TYPE].string_value if ATTR_ERROR_TYPE in attrs else ""
        failed = traced[-1].kind == TraceEvent.ACTIVATION_FAILED
        if error:
            return (
                f"{head}: the original call failed here too ({error}), so no response was ever "
                "cached; the activation replays up to this call"
            )
        if billed and failed:
            return (
                f"{head}: the original reached the provider here and then failed, so this "
                "response was never committed (a failed activation commits nothing); it replays "
                "up to its first uncached call"
            )
        if hit:
            return (
                f"{head}: the original was served this response from the cache, and the entry is "
                "no longer in the snapshot's cache (evicted by later activations, or purged when "
                "expired); export sooner after the activation"
            )
        return (
            f"{head}: the response the original received here is no longer in the snapshot's "
            "cache (evicted by later activations, or purged when expired); export sooner after "
            "the activation"
        )
    return f"{head}: the snapshot's cache holds no response for this request"


def judge(
    plan: Plan,
    result: ActivationResult,
    *,
    provider_calls: int,
    attempts: Sequence[NetworkAttempt],
    cache: ReplayCache,
) -> Judgement:
    """Judge the re-run (see the module docstring for the rules, in order).

    Args:
        plan: What was re-run (its traced events, or None for a what-if).
        result: What ``run_activation`` returned.
        provider_calls: How many times the re-run reached the provider.
        attempts: The network attempts the guard refused.
        cache: The pre-state's replay cache (to find the nearest entry of a miss).
    """
    traced = plan.traced
    comparison = compare_events(traced or (), result.trace)
    failures = sorted(result.provider_failures, key=lambda f: f.event_index)
    first_failure = failures[0] if failures else None
    # An attempt outside any context (agent module code) is taken to be at the start.
    first_attempt = min(
        attempts, key=lambda a: a.event_index if a.event_index is not None else -1, default=None
    )
    attempt_index = None
    if first_attempt is not None:
        attempt_index = first_attempt.event_index if first_attempt.event_index is not None else 0
    miss_index = first_failure.event_index if first_failure is not None else None
    if first_failure is None and provider_calls:
        # The provider was reached without the context recording it: still no reproduction.
        miss_index = len(result.trace)

    if traced is None:
        return _judge_what_if(plan, comparison, first_failure, first_attempt, cache, provider_calls)

    stops = [i for i in (miss_index, attempt_index) if i is not None]
    stop = min(stops) if stops else None
    first = comparison.first_difference
    if stop is None:
        if first is None:
            return Judgement(
                verdict=Verdict.REPRODUCED,
                reason=(
                    f"all {len(traced)} traced events match the re-run "
                    f"({_outcome(result)}; cache_hit/billed normalized on LLM_CALL)"
                ),
                comparison=comparison,
            )
        return _diverged(comparison, first)
    if first is not None and first < stop:
        return _diverged(comparison, first)
    if attempt_index is not None and attempt_index == stop and first_attempt is not None:
        return Judgement(
            verdict=Verdict.IRREPRODUCIBLE,
            reason=_network_reason(first_attempt, len(attempts)),
            comparison=comparison,
        )
    if first_failure is None:
        return Judgement(
            verdict=Verdict.IRREPRODUCIBLE,
            reason=f"the re-run reached the provider {provider_calls} time(s); none can be served",
            comparison=comparison,
        )
    traced_event = (
        traced[first_failure.event_index] if first_failure.event_index < len(traced) else None
    )
    if traced_event is None or traced_event.kind != TraceEvent.LLM_CALL:
        return _diverged(comparison, first_failure.event_index)
    miss = _cache_miss(first_failure, traced_event, cache)
    return Judgement(
        verdict=Verdict.IRREPRODUCIBLE,
        reason=_miss_reason(miss, cache, traced),
        comparison=comparison,
        cache_miss=miss,
    )


def _outcome(result: ActivationResult) -> str:
    if isinstance(result, ActivationFailure):
        return f"the activation fails with {result.error_type}, as traced"
    return "suspended" if result.suspended else "done"


def _network_reason(attempt: NetworkAttempt, count: int) -> str:
    more = f" ({count - 1} more attempt(s) after it)" if count > 1 else ""
    who = f"read-only tool {attempt.tool!r}" if attempt.tool else "agent code (outside any tool)"
    return (
        f"network blocked: {who} tried to reach {attempt.address} ({attempt.operation}){more}; "
        "replay runs offline, so what that call returned originally cannot be re-obtained"
    )


def _judge_what_if(
    plan: Plan,
    comparison: EventComparison,
    failure: ProviderFailure | None,
    attempt: NetworkAttempt | None,
    cache: ReplayCache,
    provider_calls: int,
) -> Judgement:
    # Seed §4: a pending resume has no traced outcome to diff, so a run that completes is
    # a what-if (exit 0). Its responses are "not yet minted", so it may well stop at its
    # first uncached model call: then it did not run to the end, and saying exit 0 would
    # tell a script "the what-if ran" when it did not. A cache miss is exit 3 (seed's
    # table) here too; the reason says it was a what-if and where it stopped.
    prefix = (
        f"what-if: seq {plan.seq} (a pending {plan.trigger_name}) has no traced activation, "
        "so there is no traced outcome to diff; this is what the resume would do"
    )
    miss = _cache_miss(failure, None, cache) if failure is not None else None
    if attempt is not None and (
        failure is None or (attempt.event_index or 0) <= failure.event_index
    ):
        stopped = f", until {_network_reason(attempt, 1)}"
    elif failure is not None:
        stopped = (
            f", up to the model call at event {failure.event_index} (key {failure.cache_key}), "
            "which the cache cannot serve: a pending resume's responses are not minted yet"
        )
    elif provider_calls:
        stopped = ", up to a model call the provider that serves nothing was asked to answer"
    else:
        stopped = ""
    return Judgement(
        verdict=Verdict.IRREPRODUCIBLE if stopped else Verdict.WHAT_IF,
        reason=prefix + stopped,
        comparison=comparison,
        cache_miss=miss,
    )
