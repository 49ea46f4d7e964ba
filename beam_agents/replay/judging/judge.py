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
- a recorded tool call the snapshot's tool cache cannot serve counts like a cache
  miss: ``irreproducible`` where the trace has a ``TOOL_CALL`` of that tool,
  naming the tool, the args digest and the nearest recorded call's differing
  argument; ``diverged`` where the trace has something else;
- a network attempt → ``irreproducible``, naming the tool and the address;
- no miss, no attempt: ``reproduced`` if every event matches, else ``diverged``;
- last, a run every event of which matches diverges at its ``ACTIVATION_END`` when
  its outputs or memory differ from the traced digests and can be judged
  (``end_check``); when the memory cannot be judged, the reason says why.

A what-if has nothing traced: it is ``what-if`` (exit 0) whatever happened, and
the reason says where it stopped (a pending resume's responses are not minted
yet, docs/replay.md §4, so it usually stops at its first model call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from beam_agents._protos import TraceEvent
from beam_agents.activation import ActivationFailure, ActivationResult
from beam_agents.context import ProviderFailure, ToolMiss, error_type_name
from beam_agents.llm_cache import LookupStatus, ReplayCache
from beam_agents.replay.isolation.guard import (
    NETWORK_OPERATIONS,
    PROCESS_OPERATIONS,
    NetworkAttempt,
)
from beam_agents.replay.judging.compare import EventComparison, compare_events, describe_divergence
from beam_agents.replay.judging.end_check import EndCheck
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.reconstruct.plan import Plan
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import (
    CacheMiss,
    Divergence,
    Mark,
    NearestEntry,
    StopCause,
    ToolCacheMiss,
    UnseenRead,
    UnseenWhy,
    Verdict,
)
from beam_agents.tool_cache import ToolCache, tool_cache_key
from beam_agents.trace_events import ATTR_MEMORY_WRITES_SHA256, ATTR_OUTPUTS_SHA256, kind_name
from beam_agents.trace_view import LlmCall, ToolCall, TraceView, decode

__all__ = ["OTHER_SEQ", "ForkRefused", "Judgement", "fork_outcome", "judge", "judge_fork"]


@dataclass(frozen=True)
class Judgement:
    """The verdict and the facts it rests on."""

    verdict: Verdict
    reason: str
    comparison: EventComparison
    first_divergence: Divergence | None = None
    cache_miss: CacheMiss | None = None
    tool_miss: ToolCacheMiss | None = None
    stop: StopCause | None = None
    """What stopped the re-run short of a judgement on every event (None: nothing did)."""
    redacted_reason: str | None = None
    """``reason`` with the plaintext it quotes as digests (``ReplayResult.redacted_reason``)."""


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


def _diverged(comparison: EventComparison, index: int, detail: bool) -> Judgement:
    divergence = describe_divergence(comparison.pairs[index], detail=detail)
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
    traced_error = ""
    if traced is not None and traced.kind == TraceEvent.LLM_CALL:
        traced_call = LlmCall.of(traced)
        traced_key = traced_call.cache_key
        traced_error = traced_call.error_type or ""
    return CacheMiss(
        event_index=failure.event_index,
        cache_key=failure.cache_key,
        model=failure.model,
        status=failure.lookup_status.value,
        traced_cache_key=traced_key,
        traced_error_type=traced_error,
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
    traced_error = _traced_call_error(miss, traced)
    if traced_error and status in (LookupStatus.ABSENT, LookupStatus.MINTED_LATER):
        later = ""
        if status is LookupStatus.MINTED_LATER:
            entry = cache.get(miss.cache_key)
            by = f"seq {entry.inserted_seq}" if entry is not None else "a later activation"
            later = (
                f"; the entry under this key was cached later, by {by} (a retry or a later "
                "activation whose call succeeded), and is not a response this one received"
            )
        return (
            f"{head}: the original call failed here too ({traced_error}), so no response was "
            f"ever cached for this activation{later}; the activation replays up to this call"
        )
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
        call = LlmCall.of(traced[miss.event_index])
        billed = bool(call.billed)
        hit = bool(call.cache_hit)
        failed = traced[-1].kind == TraceEvent.ACTIVATION_FAILED
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


def _traced_call_error(miss: CacheMiss, traced: Sequence[TraceEvent] | None) -> str:
    """The error type the traced call at the miss failed with (same request), or ``""``."""
    if traced is None or miss.traced_cache_key != miss.cache_key:
        return ""
    if miss.event_index >= len(traced) or traced[miss.event_index].kind != TraceEvent.LLM_CALL:
        return ""
    return LlmCall.of(traced[miss.event_index]).error_type or ""


def judge(
    plan: Plan,
    result: ActivationResult,
    *,
    provider_calls: int,
    attempts: Sequence[NetworkAttempt],
    cache: ReplayCache,
    tool_cache: ToolCache | None = None,
    end: EndCheck | None = None,
    naming: Naming = REPLAYER,
    divergence_detail: bool = True,
) -> Judgement:
    """Judge the re-run (see the module docstring for the rules, in order).

    Args:
        plan: What was re-run (its traced events, or None for a what-if).
        result: What ``run_activation`` returned.
        provider_calls: How many times the re-run reached the provider.
        attempts: The network attempts the guard refused.
        cache: The pre-state's replay cache (to find the nearest entry of a miss).
        tool_cache: The pre-state's tool cache (to find the nearest recorded call of a
            tool miss).
        end: The outputs and memory against the traced ACTIVATION_END (``check_end``);
            None: not checked.
        naming: How the caller named the inputs (for the messages).
        divergence_detail: Render the first divergence's DeepDiff detail (False: its
            field rows, as text; ``ReplayOptions.divergence_detail``).
    """
    judgement = _judge_events(
        plan,
        result,
        provider_calls=provider_calls,
        attempts=[a for a in attempts if not a.at_exit],
        cache=cache,
        tools=tool_cache if tool_cache is not None else ToolCache(),
        naming=naming,
        divergence_detail=divergence_detail,
    )
    judgement = judgement if end is None else _with_end_check(judgement, end, plan.seq)
    return _with_exit_attempts(judgement, [a for a in attempts if a.at_exit], naming)


def _with_exit_attempts(
    judgement: Judgement, at_exit: Sequence[NetworkAttempt], naming: Naming
) -> Judgement:
    """After every other rule: what agent code tried at interpreter exit (run before the
    judgement) makes a run that reproduced (or a what-if that ran to its end)
    irreproducible; a divergence or a stop before it stays the first thing that went wrong."""
    if not at_exit or judgement.verdict not in (Verdict.REPRODUCED, Verdict.WHAT_IF):
        return judgement
    first = at_exit[0]
    return replace(
        judgement,
        verdict=Verdict.IRREPRODUCIBLE,
        reason=_network_reason(first, len(at_exit), naming),
        stop=StopCause.BLOCKED,
        redacted_reason=_network_reason(first.redacted(), len(at_exit), naming),
    )


def _with_end_check(judgement: Judgement, end: EndCheck, seq: int) -> Judgement:
    """The last rules: the end check's divergence, then what the unseen reads leave of it."""
    return _with_unseen_reads(_end_divergence(judgement, end), end, seq)


def _end_divergence(judgement: Judgement, end: EndCheck) -> Judgement:
    """A run whose every event matches diverges at its ACTIVATION_END when its outputs or
    memory writes differ from the traced digests and can be judged (``end_check``).

    Only a run the events call reproduced can diverge here: an earlier divergence or a
    cache miss stays the first thing that went wrong.
    """
    pairs = judgement.comparison.pairs
    if judgement.verdict is not Verdict.REPRODUCED or not pairs:
        return judgement
    if end.fields:
        last = pairs[-1]
        assert last.traced is not None
        fields = [f.path for f in end.fields]
        what = " and ".join(
            "outputs"
            if ATTR_OUTPUTS_SHA256 in f
            else ("memory writes" if ATTR_MEMORY_WRITES_SHA256 in f else "memory")
            for f in fields
        )
        return Judgement(
            verdict=Verdict.DIVERGED,
            reason=(
                f"event {last.index} (ACTIVATION_END {last.traced.name!r}) differs: every earlier "
                f"event matches, but the re-run's {what} differ from the traced digest"
                + _write_summary(end)
            ),
            comparison=EventComparison(
                pairs=pairs.marked(last.index, fields), first_difference=last.index
            ),
            first_divergence=Divergence(
                index=last.index,
                kind=kind_name(last.traced.kind),
                name=last.traced.name,
                fields=end.fields,
                detail="\n".join(end.detail),
            ),
        )
    writes = end.writes
    if writes is not None and writes.mark is Mark.VERIFIED:
        return replace(
            judgement,
            reason=(
                f"{judgement.reason}; its memory writes match the traced digest "
                f"({len(writes.replayed.set)} key(s) set, {len(writes.replayed.deleted)} deleted)"
            ),
        )
    if end.not_comparable and not end.unseen:
        return replace(
            judgement,
            reason=f"{judgement.reason}; memory not judged: {end.not_comparable} (docs/replay.md §4)",
        )
    return judgement


def _write_summary(end: EndCheck) -> str:
    """`` (dropped 'notes', added 'extra')`` for a write-set divergence: the keys it names."""
    return f" ({', '.join(end.write_keys)})" if end.write_keys else ""


def _remedy(read: UnseenRead, seq: int) -> str:
    if read.why in (UnseenWhy.REWRITTEN, UnseenWhy.DELETED) and read.seq is not None:
        return (
            f"a snapshot exported before seq {read.seq} ran holds what seq {seq} read "
            "(docs/replay.md §4)"
        )
    if read.why is UnseenWhy.OWN_WRITE:
        return (
            "every snapshot that can replay it holds its own write: keep what an activation "
            "reads apart from what it writes, e.g. a log keyed by seq (docs/agent-api.md, "
            "Working memory)"
        )
    return "docs/replay.md §4"


def _with_unseen_reads(judgement: Judgement, end: EndCheck, seq: int) -> Judgement:
    """No ``reproduced`` (and no divergence after it) past a read the snapshot could not
    serve as the original saw it: what came of it is not judged (irreproducible).

    A divergence *before* the first such read stands: nothing the re-run did up to there
    depended on it. A cache or tool miss after it stays the verdict, its reason saying
    what came before it.
    """
    unseen = end.unseen
    if not unseen or judgement.verdict in (Verdict.WHAT_IF, Verdict.USAGE_ERROR):
        return judgement
    first = unseen[0]
    at = first.event_index
    more = f" (and {len(unseen) - 1} more such read(s))" if len(unseen) > 1 else ""
    what = f"the re-run {first.text}{more}"
    divergence = judgement.first_divergence
    if judgement.verdict is Verdict.DIVERGED:
        if divergence is None or divergence.index < at:
            return judgement
        return replace(
            judgement,
            verdict=Verdict.IRREPRODUCIBLE,
            reason=(
                f"not judged: {what}, before event {at}: it did not see what the original saw "
                f"there, and from there on {_divergence_reason(divergence)}, which that read "
                f"can explain; {_remedy(first, seq)}"
            ),
            stop=StopCause.MEMORY_UNSEEN,
        )
    if judgement.verdict is Verdict.REPRODUCED:
        return replace(
            judgement,
            verdict=Verdict.IRREPRODUCIBLE,
            reason=(
                f"not judged: {what}, before event {at}: it did not see what the original saw, "
                "so that every traced event (and every memory write) matches says nothing "
                f"about this activation; {_remedy(first, seq)}"
            ),
            stop=StopCause.MEMORY_UNSEEN,
        )
    stopped_at, changed = _stopped_at(judgement)
    if stopped_at is None or stopped_at < at:
        return judgement
    if changed:
        # The re-run asked something else than the original (another request, other tool
        # arguments) after reading what the original did not: that read can explain it.
        return replace(
            judgement,
            reason=(
                f"not judged: {what}, before event {at}: it did not see what the original saw "
                f"there, and from there on {judgement.reason}, which that read can explain; "
                f"{_remedy(first, seq)}"
            ),
            stop=StopCause.MEMORY_UNSEEN,
        )
    return replace(
        judgement,
        reason=f"{judgement.reason}; before it, {what}",
    )


def _stopped_at(judgement: Judgement) -> tuple[int | None, bool]:
    """Where a cache or tool miss stopped the re-run, and whether it asked something other
    than the traced call there (another request, other arguments)."""
    miss, tool = judgement.cache_miss, judgement.tool_miss
    if miss is not None:
        return miss.event_index, miss.traced_cache_key != miss.cache_key
    if tool is not None:
        return tool.event_index, tool.traced_args_sha256 != tool.args_sha256
    return None, False


def _judge_events(
    plan: Plan,
    result: ActivationResult,
    *,
    provider_calls: int,
    attempts: Sequence[NetworkAttempt],
    cache: ReplayCache,
    tools: ToolCache,
    naming: Naming,
    divergence_detail: bool,
) -> Judgement:
    """The verdict from the events, the cache misses and the attempts (the module's rules)."""
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

    tool_misses = sorted(result.tool_misses, key=lambda m: m.event_index)
    first_tool_miss = tool_misses[0] if tool_misses else None
    tool_miss_index = first_tool_miss.event_index if first_tool_miss is not None else None

    if traced is None:
        judgement = _judge_what_if(
            plan, comparison, first_failure, first_attempt, cache, provider_calls, naming
        )
        if first_tool_miss is not None and (
            miss_index is None or first_tool_miss.event_index < miss_index
        ):
            unserved = _tool_miss(first_tool_miss, None, tools)
            return Judgement(
                verdict=Verdict.IRREPRODUCIBLE,
                reason=(
                    f"what-if: seq {plan.seq} (a pending {plan.trigger_name}) has no traced "
                    f"activation; it ran up to {_tool_miss_reason(unserved, tools, None)}"
                ),
                comparison=comparison,
                tool_miss=unserved,
                stop=StopCause.TOOL_MISS,
            )
        return judgement

    stops = [i for i in (miss_index, attempt_index, tool_miss_index) if i is not None]
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
        return _diverged_or_other_answer(
            plan, comparison, first, result, tools, divergence_detail
        )
    if first is not None and first < stop:
        return _diverged_or_other_answer(
            plan, comparison, first, result, tools, divergence_detail
        )
    if attempt_index is not None and attempt_index == stop and first_attempt is not None:
        return Judgement(
            verdict=Verdict.IRREPRODUCIBLE,
            reason=_network_reason(first_attempt, len(attempts), naming),
            comparison=comparison,
            stop=StopCause.BLOCKED,
            redacted_reason=_network_reason(first_attempt.redacted(), len(attempts), naming),
        )
    if (
        first_tool_miss is not None
        and first_tool_miss.event_index == stop
        and (miss_index is None or first_tool_miss.event_index < miss_index)
    ):
        at = first_tool_miss.event_index
        traced_tool = traced[at] if at < len(traced) else None
        if (
            traced_tool is None
            or traced_tool.kind != TraceEvent.TOOL_CALL
            or traced_tool.name != first_tool_miss.tool
        ):
            return _diverged(comparison, at, divergence_detail)
        served_miss = _tool_miss(first_tool_miss, traced_tool, tools)
        return Judgement(
            verdict=Verdict.IRREPRODUCIBLE,
            reason=_tool_miss_reason(served_miss, tools, traced_tool),
            comparison=comparison,
            tool_miss=served_miss,
            stop=StopCause.TOOL_MISS,
        )
    if first_failure is None:
        return Judgement(
            verdict=Verdict.IRREPRODUCIBLE,
            reason=f"the re-run reached the provider {provider_calls} time(s); none can be served",
            comparison=comparison,
            stop=StopCause.PROVIDER_REACHED,
        )
    traced_event = (
        traced[first_failure.event_index] if first_failure.event_index < len(traced) else None
    )
    if traced_event is None or traced_event.kind != TraceEvent.LLM_CALL:
        return _diverged(comparison, first_failure.event_index, divergence_detail)
    miss = _cache_miss(first_failure, traced_event, cache)
    return Judgement(
        verdict=Verdict.IRREPRODUCIBLE,
        reason=_miss_reason(miss, cache, traced),
        comparison=comparison,
        cache_miss=miss,
        stop=StopCause.CACHE_MISS,
    )


def _diverged_or_other_answer(
    plan: Plan,
    comparison: EventComparison,
    index: int,
    result: ActivationResult,
    tools: ToolCache,
    divergence_detail: bool,
) -> Judgement:
    """``diverged`` at ``index``, unless the difference is a recorded tool's answer that the
    tool cache holds from another seq: then the answer this activation got is simply not in
    the snapshot (its activation failed, so it was never committed), and the re-run was
    served another one — irreproducible, not a change of the agent."""
    other = _other_seq_answer(plan, comparison, index, result, tools)
    if other is None:
        return _diverged(comparison, index, divergence_detail)
    miss, reason = other
    return Judgement(
        verdict=Verdict.IRREPRODUCIBLE,
        reason=reason,
        comparison=comparison,
        tool_miss=miss,
        stop=StopCause.TOOL_MISS,
    )


def _other_seq_answer(
    plan: Plan,
    comparison: EventComparison,
    index: int,
    result: ActivationResult,
    tools: ToolCache,
) -> tuple[ToolCacheMiss, str] | None:
    """The served recorded call at ``index`` got another seq's answer than the traced one."""
    if index not in result.served_tool_events or plan.traced is None:
        return None
    pair = comparison.pairs[index]
    traced, replayed = pair.traced, pair.replayed
    if (
        traced is None
        or replayed is None
        or traced.kind != TraceEvent.TOOL_CALL
        or replayed.kind != TraceEvent.TOOL_CALL
        or traced.name != replayed.name
    ):
        return None
    was, got = ToolCall.of(traced), ToolCall.of(replayed)
    if was.args_sha256 is None or was.args_sha256 != got.args_sha256:
        return None
    entry = tools.get(tool_cache_key(replayed.name, was.args_sha256))
    if entry is None or entry.inserted_seq == plan.seq:
        return None  # the entry is this activation's own answer: a real difference
    held = entry.result_sha256.hex()
    if was.error_type is None and (was.result_sha256 is None or was.result_sha256 == held):
        return None  # the traced answer is the one held: the difference is elsewhere
    failed = plan.traced[-1].kind == TraceEvent.ACTIVATION_FAILED
    since = f"seq {entry.inserted_seq}'s" + (
        f" (recorded again through seq {entry.recorded_seq})"
        if entry.recorded_seq != entry.inserted_seq
        else ""
    )
    if was.error_type is not None:
        got_what = (
            f"the original call raised {was.error_type}, so it got no answer to record"
        )
    elif failed:
        got_what = "the answer this activation got was never committed (it failed)"
    else:
        got_what = "the answer this activation got is not in the snapshot's tool cache"
    reason = (
        f"recorded tool {replayed.name!r} at event {index} (args sha256 {was.args_sha256}): "
        f"{got_what}; the cache holds {since}, result sha256 {held} where the traced call got "
        f"{was.result_sha256 or was.error_type}, so replay cannot serve what this activation "
        "got (the service answered differently then)"
    )
    miss = ToolCacheMiss(
        event_index=index,
        tool=replayed.name,
        args_sha256=was.args_sha256,
        status=OTHER_SEQ,
        traced_args_sha256=was.args_sha256,
        nearest_args_sha256=was.args_sha256,
        held_seq=entry.inserted_seq,
        held_result_sha256=held,
        traced_result_sha256=was.result_sha256,
    )
    return miss, reason


OTHER_SEQ = "other_seq"
"""``ToolCacheMiss.status`` of a recorded call whose entry holds another seq's answer."""


def _view(event: TraceEvent | None) -> TraceView | None:
    return None if event is None else decode(event)


def _tool_miss(miss: ToolMiss, traced: TraceEvent | None, tools: ToolCache) -> ToolCacheMiss:
    # The traced event at the miss is a TOOL_CALL unless the run diverged there; any kind
    # that carries an arguments digest (an INTENT_STAGED) is still worth naming.
    traced_args: str | None = getattr(_view(traced), "args_sha256", None)
    nearest = tools.nearest(miss.tool, miss.arg_digests)
    return ToolCacheMiss(
        event_index=miss.event_index,
        tool=miss.tool,
        args_sha256=miss.args_sha256,
        status=miss.lookup_status.value,
        traced_args_sha256=traced_args,
        nearest_args_sha256=None if nearest is None else nearest[0].args_sha256,
        differences=() if nearest is None else tuple(nearest[1]),
    )


def _tool_miss_reason(miss: ToolCacheMiss, tools: ToolCache, traced: TraceEvent | None) -> str:
    """Why the recorded call cannot be served, naming the tool, args digest and nearest call."""
    head = (
        f"recorded tool {miss.tool!r} at event {miss.event_index} (args sha256 "
        f"{miss.args_sha256}) is not served by the snapshot's tool cache"
    )
    status = LookupStatus(miss.status)
    entry = tools.get(tool_cache_key(miss.tool, miss.args_sha256))
    changed = ""
    if miss.traced_args_sha256 is not None and miss.traced_args_sha256 != miss.args_sha256:
        changed = (
            f" (the arguments changed: the traced call had args sha256 {miss.traced_args_sha256})"
        )
    if status is LookupStatus.DIGEST_ONLY:
        return (
            f"{head}: the entry is digest-only — the tool cache kept the result's digest, not "
            "the result (ToolCachePolicy.retain_payloads=False), so replay cannot serve it"
        )
    if status is LookupStatus.EXPIRED:
        return f"{head}: the recorded result had expired at the activation clock{changed}"
    if status is LookupStatus.MINTED_LATER:
        since = f" (seq {entry.inserted_seq})" if entry is not None else ""
        return (
            f"{head}: its recorded result dates from a later activation{since}, which got a "
            "different answer or recorded this call first; the result this activation got is "
            f"gone{changed}; export sooner after the activation"
        )
    if status is LookupStatus.AMBIGUOUS:
        at = f" (seq {entry.inserted_seq})" if entry is not None else ""
        return (
            f"{head}: the activation{at} got two different results for this same call, so "
            "replay cannot tell which result each call received"
        )
    error: str = getattr(_view(traced), "error_type", None) or ""
    if error:
        return (
            f"{head}: the original call raised {error}, so no result was recorded; the "
            "activation replays up to this call"
        )
    if miss.nearest_args_sha256 is not None:
        nearest = (
            f"; the nearest recorded call of {miss.tool!r} (args sha256 "
            f"{miss.nearest_args_sha256}) differs in: {', '.join(miss.differences) or 'nothing'}"
        )
    else:
        nearest = f"; the tool cache holds no recorded call of {miss.tool!r}"
    if miss.traced_args_sha256 is not None and miss.traced_args_sha256 != miss.args_sha256:
        return (
            f"{head}: the arguments changed — the traced call had args sha256 "
            f"{miss.traced_args_sha256}{nearest}"
        )
    if miss.traced_args_sha256 == miss.args_sha256:
        return (
            f"{head}: the result the original received is no longer in the snapshot's tool "
            f"cache (evicted by later activations, or purged when expired){nearest}"
        )
    return f"{head}{nearest}"


def _outcome(result: ActivationResult) -> str:
    if isinstance(result, ActivationFailure):
        return f"the activation fails with {result.error_type}, as traced"
    return "suspended" if result.suspended else "done"


def _network_reason(attempt: NetworkAttempt, count: int, naming: Naming) -> str:
    more = f" ({count - 1} more attempt(s) after it)" if count > 1 else ""
    who = f"read-only tool {attempt.tool!r}" if attempt.tool else "agent code (outside any tool)"
    if attempt.at_exit:
        who = (
            "agent code at interpreter exit (a thread, an atexit hook or a finalizer, run "
            "before the judgement)"
        )
    if attempt.operation in NETWORK_OPERATIONS:
        return (
            f"network blocked: {who} tried to reach {attempt.address} ({attempt.operation}){more}; "
            "replay runs offline, so what that call returned originally cannot be re-obtained. "
            + (
                f"Declare {attempt.tool!r} @tool(recorded=True), so the pipeline keeps its result "
                "for replay, or replay it with a fixture registry "
                f"({naming.name(Input.REGISTRY)}; docs/agent-api.md, Tools)"
                if attempt.tool
                else "Move the call into a @tool(recorded=True) tool, whose result the pipeline "
                "keeps for replay (docs/agent-api.md, Tools)"
            )
        )
    if attempt.operation == "open" or (
        attempt.operation.startswith(("os.", "shutil.", "_posixshmem."))
        and attempt.operation not in PROCESS_OPERATIONS
    ):
        what = f"write the file {attempt.address}"
    elif attempt.operation in ("os.dup2", "os.dup", "os.write", "os.writev", "fcntl.fcntl"):
        what = f"write to, replace or copy {attempt.address}"
    elif attempt.operation == "sqlite3.connect":
        what = f"open the sqlite3 database {attempt.address} (which creates and writes it)"
    elif attempt.operation in ("ctypes.call", "ctypes.call_function"):
        what = f"call the {attempt.address} through ctypes (native code replay cannot see into)"
    elif attempt.operation.startswith("ctypes.") or attempt.operation.startswith("sqlite3."):
        what = f"load native code {attempt.address}"
    elif attempt.operation in (
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "signal.pidfd_send_signal",
        "signal.raise_signal",
    ):
        what = f"send {attempt.address}"
    elif attempt.operation == "resource.prlimit":
        what = f"set the {attempt.address}"
    else:
        what = f"start the process {attempt.address}"
    return (
        f"blocked: {who} tried to {what} ({attempt.operation}){more}; replay runs agent code "
        "isolated (no network, processes, signals, native code or file writes), so what that did "
        "originally cannot be re-done or seen"
    )


def _judge_what_if(
    plan: Plan,
    comparison: EventComparison,
    failure: ProviderFailure | None,
    attempt: NetworkAttempt | None,
    cache: ReplayCache,
    provider_calls: int,
    naming: Naming,
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
    stop: StopCause | None = None
    redacted: str | None = None
    if attempt is not None and (
        failure is None or (attempt.event_index or 0) <= failure.event_index
    ):
        stopped, stop = f", until {_network_reason(attempt, 1, naming)}", StopCause.BLOCKED
        redacted = prefix + f", until {_network_reason(attempt.redacted(), 1, naming)}"
    elif failure is not None:
        stopped = (
            f", up to the model call at event {failure.event_index} (key {failure.cache_key}), "
            "which the cache cannot serve: a pending resume's responses are not minted yet"
        )
        stop = StopCause.CACHE_MISS
    elif provider_calls:
        stopped = ", up to a model call the provider that serves nothing was asked to answer"
        stop = StopCause.PROVIDER_REACHED
    else:
        stopped = ""
    return Judgement(
        verdict=Verdict.IRREPRODUCIBLE if stopped else Verdict.WHAT_IF,
        reason=prefix + stopped,
        comparison=comparison,
        cache_miss=miss,
        stop=stop,
        redacted_reason=redacted,
    )


# ----------------------------------------------------------------------------------- a fork


class ForkRefused(InputError):
    """A fork that cannot be a fork of the traced activation: the events before the forked
    one do not reproduce, or the forked call asks something else (exit 2)."""


def _fork_label(event: TraceEvent) -> str:
    return f"event {event.index} ({_event_label(event)})"


def _same_request(traced: TraceEvent, replayed: TraceEvent) -> str:
    """Empty when ``replayed`` asks what ``traced`` asked (the same model request, the same
    tool with the same arguments), else what differs."""
    if traced.kind != replayed.kind:
        return f"the re-run made {_event_label(replayed)} there"
    if traced.kind == TraceEvent.LLM_CALL:
        if LlmCall.of(traced).cache_key != LlmCall.of(replayed).cache_key:
            return "the re-run's model request there has another cache key (another request)"
        return ""
    mine, theirs = ToolCall.of(traced), ToolCall.of(replayed)
    if replayed.name != traced.name:
        return f"the re-run called tool {replayed.name!r} there"
    if mine.args_sha256 != theirs.args_sha256:
        return "the re-run called the tool with other arguments there"
    return ""


def judge_fork(
    plan: Plan,
    result: ActivationResult,
    *,
    at: int,
    provider_path: str,
    attempts: Sequence[NetworkAttempt],
    cache: ReplayCache,
    tool_cache: ToolCache,
    naming: Naming = REPLAYER,
) -> tuple[Judgement, int | None]:
    """A fork's verdict, and the event where its continuation stopped (None: it ran to its end).

    The events before ``at`` must reproduce the trace and the call at ``at`` must ask what
    the traced one asked (else ``ForkRefused``, naming the first difference); after it
    the continuation runs until a request nothing can serve (a model call the snapshot's
    cache cannot serve and no ``provider_path`` answered, a recorded tool call its tool
    cache cannot serve) or a blocked attempt: exit 3 naming it. Otherwise ``fork``
    (exit 0), never ``reproduced``.

    Raises:
        ForkRefused: The prefix or the forked call does not reproduce (exit 2).
    """
    traced = plan.traced or ()
    comparison = compare_events(traced, result.trace)
    fork_flag = naming.given(Input.FORK, at)
    forked = traced[at]
    first = comparison.first_difference
    if first is not None and first < at:
        divergence = describe_divergence(comparison.pairs[first], detail=False)  # its reason
        raise ForkRefused(
            f"{fork_flag}: the re-run does not reproduce the events before the fork: "
            f"{_divergence_reason(divergence)}",
            "a fork rests on a prefix that reproduces the trace, verified event by event; "
            "replay without the fork to see this divergence, or fork at an earlier event",
        )
    early = [a for a in attempts if not a.at_exit and (a.event_index or 0) <= at]
    if early:
        raise ForkRefused(
            f"{fork_flag}: before the forked call, {_network_reason(early[0], len(early), naming)}",
            "a fork rests on a prefix that reproduces the trace",
        )
    replayed = result.trace[at] if at < len(result.trace) else None
    differs = (
        "the re-run ended before it" if replayed is None else _same_request(forked, replayed)
    )
    if differs:
        raise ForkRefused(
            f"{fork_flag}: traced {_fork_label(forked)} is not the call the re-run made there: "
            f"{differs}",
            "a fork answers the traced call differently; it cannot answer another one",
        )
    answered = "its provider" if provider_path else "nothing"
    stops: list[tuple[int, Judgement]] = []
    failures = [f for f in result.provider_failures if f.event_index > at]
    if failures:
        failure = min(failures, key=lambda f: f.event_index)
        miss = _cache_miss(failure, None, cache)
        if provider_path:
            why = (
                f"the fork provider {provider_path} failed on the model call at event "
                f"{failure.event_index} ({error_type_name(failure.error)})"
            )
        else:
            why = (
                f"the model call at event {failure.event_index} (key {failure.cache_key}) is not "
                f"one the snapshot's cache can serve, and {answered} else may answer it; give "
                f"{naming.name(Input.FORK_PROVIDER)} module:ATTR for the continuation"
            )
        stops.append(
            (
                failure.event_index,
                Judgement(
                    verdict=Verdict.IRREPRODUCIBLE,
                    reason=f"the fork ended at event {failure.event_index}: {why}",
                    comparison=comparison,
                    cache_miss=miss,
                    stop=StopCause.CACHE_MISS,
                ),
            )
        )
    misses = [m for m in result.tool_misses if m.event_index > at]
    if misses:
        tool_miss = _tool_miss(min(misses, key=lambda m: m.event_index), None, tool_cache)
        stops.append(
            (
                tool_miss.event_index,
                Judgement(
                    verdict=Verdict.IRREPRODUCIBLE,
                    reason=(
                        f"the fork ended at event {tool_miss.event_index}: recorded tool "
                        f"{tool_miss.tool!r} was called with arguments (args sha256 "
                        f"{tool_miss.args_sha256}) the snapshot's tool cache holds no result "
                        "for, and a fork runs no recorded tool"
                    ),
                    comparison=comparison,
                    tool_miss=tool_miss,
                    stop=StopCause.TOOL_MISS,
                ),
            )
        )
    late = [a for a in attempts if not a.at_exit and (a.event_index or 0) > at]
    late += [a for a in attempts if a.at_exit]
    if late:
        attempt = late[0]
        index = attempt.event_index if attempt.event_index is not None else len(result.trace)
        stops.append(
            (
                index,
                Judgement(
                    verdict=Verdict.IRREPRODUCIBLE,
                    reason=f"the fork ended at event {index}: "
                    + _network_reason(attempt, len(late), naming),
                    comparison=comparison,
                    stop=StopCause.BLOCKED,
                    redacted_reason=f"the fork ended at event {index}: "
                    + _network_reason(attempt.redacted(), len(late), naming),
                ),
            )
        )
    if stops:
        index, judgement = min(stops, key=lambda s: s[0])
        return judgement, index
    return (
        Judgement(
            verdict=Verdict.FORK,
            reason=(
                f"a counterfactual, not a reproduction: {_fork_label(forked)} received the "
                f"given value instead of the traced answer; the {at} event(s) before it "
                f"reproduced the trace (verified), and the forked activation ran to its end "
                f"({fork_outcome(result)})"
            ),
            comparison=comparison,
        ),
        None,
    )


def fork_outcome(result: ActivationResult) -> str:
    """How a forked activation ended: ``done``, ``suspended``, ``failed: ErrorType``."""
    if isinstance(result, ActivationFailure):
        return f"failed: {result.error_type}"
    return "suspended" if result.suspended else "done"
