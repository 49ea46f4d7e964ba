"""Hand-built ``ReplayResult``s shaped like the engine's, for the TUI's tests and benchmark.

Each one is an activation of the support agent of ``tests/core_agents.py`` as
``run_activation`` traces it (start, model calls hit/miss and billed, a tool
call, intents staged and released, a suspension, the end), with the verdict the
engine gives such a replay. Trace events are built with ``make_event`` and the
``ATTR_*`` names, so they are byte-for-byte the kind of events the TUI gets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.context import derive_intent_id
from beam_agents.replay.judging.compare import normalized_paths
from beam_agents.replay.result import (
    BlobDigest,
    CacheEntryView,
    CacheMiss,
    ContinuationView,
    Divergence,
    EventPair,
    FieldDiff,
    IntentRow,
    Mark,
    NearestEntry,
    PendingIntentView,
    ReplayHeader,
    ReplayResult,
    StateView,
    Value,
    Verdict,
)

KEY = b"customer-42"
SEQ = 7
NOW_MS = 1_734_000_000_000
HOUR_MS = 3_600_000
AGENT_PATH = "core_agents:AGENT"
REGISTRY_PATH = "core_agents:TOOLS"

Attrs = dict[str, te.AttrValue]


def sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def cache_key(label: str) -> str:
    return sha(f"cache-key/{label}")


REFUND_INTENT = derive_intent_id(KEY, SEQ, 0)
EMAIL_INTENT = derive_intent_id(KEY, SEQ, 1)


class Trace:
    """Appends events with consecutive indices, as ``AgentContext.record`` does."""

    def __init__(self, key: bytes = KEY, seq: int = SEQ, now_ms: int = NOW_MS) -> None:
        self.key, self.seq, self.now_ms = key, seq, now_ms
        self.events: list[TraceEvent] = []

    def add(self, kind: int, name: str, attrs: Attrs) -> TraceEvent:
        event = te.make_event(
            entity_key=self.key,
            seq=self.seq,
            index=len(self.events),
            kind=kind,
            name=name,
            now_ms=self.now_ms,
            attributes=attrs,
        )
        self.events.append(event)
        return event

    def start(self, *, kind: str = "start", trigger: str = "event", event_type: str = "message") -> None:
        attrs: Attrs = {
            te.ATTR_ACTIVATION_KIND: kind,
            te.ATTR_TRIGGER: trigger,
            te.ATTR_ENVELOPE_ID: f"ev-{sha('envelope')[:16]}",
            te.ATTR_ENVELOPE_SHA256: sha("envelope"),
        }
        if trigger == "event":
            attrs[te.ATTR_EVENT_TYPE] = event_type
        else:
            attrs[te.ATTR_INBOUND_INTENT_ID] = REFUND_INTENT
            attrs[te.ATTR_INBOUND_STATUS] = "OK"
            attrs[te.ATTR_STEP_INDEX] = 1
        self.add(TraceEvent.ACTIVATION_START, kind, attrs)

    def llm(
        self, label: str, *, hit: bool, model: str = "m-1", ordinal: int = 0, error: str = ""
    ) -> None:
        attrs: Attrs = {
            te.ATTR_CACHE_KEY: cache_key(label),
            te.ATTR_PROVIDER: "scripted",
            te.ATTR_REQUEST_MODEL: model,
            te.ATTR_CALL_ORDINAL: ordinal,
            te.ATTR_CACHE_HIT: hit,
            te.ATTR_BILLED: not hit and not error,
        }
        if error:
            attrs[te.ATTR_ERROR_TYPE] = error
        else:
            attrs |= {
                te.ATTR_RESPONSE_SHA256: sha(f"response/{label}"),
                te.ATTR_RESPONSE_MODEL: model,
                te.ATTR_USAGE_INPUT: 31,
                te.ATTR_USAGE_OUTPUT: 12,
                te.ATTR_STOP_REASON: "end_turn",
            }
        self.add(TraceEvent.LLM_CALL, model, attrs)

    def tool(self, name: str, *, result: str = "order A1 shipped", error: str = "") -> None:
        attrs: Attrs = {te.ATTR_TOOL_NAME: name, te.ATTR_ARGS_SHA256: sha(f"args/{name}")}
        if error:
            attrs[te.ATTR_ERROR_TYPE] = error
        else:
            attrs[te.ATTR_RESULT_SHA256] = sha(f"result/{result}")
        self.add(TraceEvent.TOOL_CALL, name, attrs)

    def stage(self, intent_id: str, tool: str, *, approval: bool, args: str = "") -> None:
        self.add(
            TraceEvent.INTENT_STAGED,
            tool,
            {
                te.ATTR_INTENT_ID: intent_id,
                te.ATTR_TOOL_NAME: tool,
                te.ATTR_ARGS_SHA256: sha(f"intent-args/{tool}/{args}"),
                te.ATTR_REQUIRES_APPROVAL: approval,
                te.ATTR_APPROVAL_CHANNEL: "default" if approval else "",
                te.ATTR_EXPIRES_AT_MS: self.now_ms + 24 * HOUR_MS,
            },
        )

    def release(self, intent_id: str, tool: str) -> None:
        self.add(TraceEvent.INTENT_RELEASED, tool, {te.ATTR_INTENT_ID: intent_id})

    def suspend(self, awaiting: Sequence[str]) -> None:
        self.add(
            TraceEvent.SUSPENDED,
            "suspend",
            {
                te.ATTR_STEP_INDEX: 0,
                te.ATTR_AWAITING: ",".join(awaiting),
                te.ATTR_DEADLINE_MS: self.now_ms + HOUR_MS,
                te.ATTR_STATE_SHA256: sha("adapter-state"),
            },
        )

    def end(self, outcome: str, *, outputs: int = 0, intents: int = 0) -> None:
        self.add(
            TraceEvent.ACTIVATION_END,
            outcome,
            {te.ATTR_OUTCOME: outcome, te.ATTR_OUTPUTS_COUNT: outputs, te.ATTR_INTENTS_COUNT: intents},
        )

    def fail(self, error_type: str) -> None:
        self.add(TraceEvent.ACTIVATION_FAILED, error_type, {te.ATTR_ERROR_TYPE: error_type})


def support_activation(
    *,
    replayed: bool,
    tool_result: str = "order A1 shipped",
    refund_args: str = "500",
) -> list[TraceEvent]:
    """The support agent's refund activation; ``replayed`` gives the re-run's cache flags."""
    trace = Trace()
    trace.start()
    # The first call was a miss (billed) in the pipeline; the re-run is served from the cache.
    trace.llm("greeting", hit=replayed, ordinal=0)
    trace.tool("lookup_order", result=tool_result)
    trace.llm("plan", hit=True, ordinal=1)
    trace.stage(REFUND_INTENT, "issue_refund", approval=True, args=refund_args)
    trace.stage(EMAIL_INTENT, "send_email", approval=False)
    trace.release(EMAIL_INTENT, "send_email")
    trace.suspend([REFUND_INTENT])
    trace.end("suspended", intents=1)
    return trace.events


def header(**overrides: Any) -> ReplayHeader:
    values: dict[str, Any] = {
        "version": "1.0.0a1",
        "agent_path": AGENT_PATH,
        "registry_path": REGISTRY_PATH,
        "entity_key": KEY,
        "seq": SEQ,
        "now_ms": NOW_MS,
        "kind": "start",
        "trigger": "event",
        "hitl_policy": "intent_ttl_ms=86400000 hitl_timeout_ms=3600000 approval_channel=default "
        "approval_required_tools=-",
        "snapshot_seq": 9,
        "snapshot_at_ms": NOW_MS + 2 * HOUR_MS,
        "snapshot_request_id": "incident-1734",
        "state_schema_version": 2,
        "migrations_applied": ("llm_cache v1→v2",),
        "provider": "scripted",
        "envelope_id": f"ev-{sha('envelope')[:16]}",
    }
    values.update(overrides)
    return ReplayHeader(**values)


def state_view(memory: Any | None = None) -> StateView:
    if memory is None:
        memory = {
            "last_order": {"status": "shipped", "total_cents": 1999, "lines": [1, 2, 3]},
            "turns": 3,
            "lucky": 424242,
            "notes": None,
        }
    return StateView(
        memory=memory,
        cache_entries=(
            CacheEntryView(
                cache_key=cache_key("plan"), model="m-1", provider="scripted", age_ms=95 * 60_000,
                ttl_left_ms=265 * 60_000, lru_rank=1, digest_only=False, inserted_seq=5,
                hit_in_activation=True,
            ),
            CacheEntryView(
                cache_key=cache_key("greeting"), model="m-1", provider="scripted", age_ms=0,
                ttl_left_ms=6 * HOUR_MS, lru_rank=2, digest_only=False, inserted_seq=7,
                hit_in_activation=True,
            ),
            CacheEntryView(
                cache_key=cache_key("summary-v0"), model="m-2", provider="scripted",
                age_ms=7 * HOUR_MS, ttl_left_ms=-HOUR_MS, lru_rank=3, digest_only=True,
                inserted_seq=2, hit_in_activation=False,
            ),
        ),
        pending=(
            PendingIntentView(
                intent_id=REFUND_INTENT, tool="issue_refund", seq=SEQ, created_ms=NOW_MS,
                expires_at_ms=NOW_MS + 24 * HOUR_MS, requires_approval=True,
                approval_channel="default", args={"order_id": "A1", "amount_cents": 500},
            ),
        ),
        continuation=ContinuationView(
            suspended_seq=SEQ, step_index=0, awaiting_intent_ids=(REFUND_INTENT,),
            deadline_ms=NOW_MS + HOUR_MS, adapter_state={"refund": REFUND_INTENT, "asked_at": NOW_MS},
        ),
        blob_versions={"memory": 2, "llm_cache": 1, "continuation": 1, "pending": 1},
        migrations_applied=("llm_cache v1→v2",),
    )


def intents_ledger(*, replayed_staged: bool = True) -> tuple[IntentRow, ...]:
    return (
        IntentRow(
            intent_id=REFUND_INTENT, tool="issue_refund", traced_staged=True,
            replayed_staged=replayed_staged, traced_released=False, replayed_released=False,
            requires_approval=True, expires_at_ms=NOW_MS + 24 * HOUR_MS,
        ),
        IntentRow(
            intent_id=EMAIL_INTENT, tool="send_email", traced_staged=True,
            replayed_staged=replayed_staged, traced_released=True,
            replayed_released=replayed_staged, expires_at_ms=NOW_MS + 24 * HOUR_MS,
        ),
    )


def blob(payload: bytes) -> BlobDigest:
    return BlobDigest(size=len(payload), sha256=hashlib.sha256(payload).hexdigest(), payload=payload)


def _pairs(
    traced: Sequence[TraceEvent | None],
    replayed: Sequence[TraceEvent | None],
    differing: dict[int, tuple[str, ...]] | None = None,
) -> tuple[EventPair, ...]:
    differing = differing or {}
    count = max(len(traced), len(replayed))
    pairs = []
    for i in range(count):
        t = traced[i] if i < len(traced) else None
        r = replayed[i] if i < len(replayed) else None
        fields = differing.get(i, ())
        # The engine decides which fields are normalized; a hand-made result asks it too.
        normalized = tuple(normalized_paths(t, r)) if t is not None and r is not None else ()
        pairs.append(
            EventPair(index=i, traced=t, replayed=r, differs=bool(fields) or (t is None) != (r is None),
                      differing_fields=fields, normalized_fields=normalized)
        )
    return tuple(pairs)


MEMORY_BLOB = b'{"last_order":{"status":"shipped","total_cents":1999},"lucky":424242,"turns":3}'


def reproduced_result() -> ReplayResult:
    return ReplayResult(
        verdict=Verdict.REPRODUCED,
        reason="9 events matched the trace (2 model calls served from the cache)",
        header=header(),
        events=_pairs(support_activation(replayed=False), support_activation(replayed=True)),
        intents=intents_ledger(),
        outputs=(),
        memory=blob(MEMORY_BLOB),
        state=state_view(),
    )


def diverged_result() -> ReplayResult:
    traced = support_activation(replayed=False)
    replayed = support_activation(replayed=True, tool_result="order A1 delayed", refund_args="1999")
    result_path = f"attributes[{te.ATTR_RESULT_SHA256!r}]"
    args_path = f"attributes[{te.ATTR_ARGS_SHA256!r}]"
    return ReplayResult(
        verdict=Verdict.DIVERGED,
        reason="event 2 TOOL_CALL lookup_order: attributes['beam_agents.result_sha256'] differs",
        header=header(),
        events=_pairs(traced, replayed, {2: (result_path,), 4: (args_path,)}),
        first_divergence=Divergence(
            index=2,
            kind="TOOL_CALL",
            name="lookup_order",
            fields=(
                FieldDiff(
                    path=result_path,
                    traced=f'"{sha("result/order A1 shipped")}"',
                    replayed=f'"{sha("result/order A1 delayed")}"',
                ),
            ),
            detail="{'values_changed': {\"root['attributes']['beam_agents.result_sha256']\": "
            "{'new_value': '…', 'old_value': '…'}}}\n"
            "The read-only tool returned something else on this machine: its inputs drifted.",
        ),
        intents=intents_ledger(),
        outputs=(),
        memory=blob(MEMORY_BLOB),
        state=state_view(),
    )


def cache_miss_result() -> ReplayResult:
    traced = support_activation(replayed=False)
    trace = Trace()
    trace.start()
    trace.llm("greeting-drifted", hit=False, ordinal=0, error="beam_agents.errors.CacheMissError")
    trace.fail("beam_agents.errors.CacheMissError")
    return ReplayResult(
        verdict=Verdict.IRREPRODUCIBLE,
        reason=f"cache miss at event 1: no cached response for key {cache_key('greeting-drifted')}",
        header=header(),
        events=_pairs(traced, trace.events, {1: (f"attributes[{te.ATTR_CACHE_KEY!r}]",)}),
        cache_miss=CacheMiss(
            event_index=1,
            cache_key=cache_key("greeting-drifted"),
            model="m-1",
            status="absent",
            traced_cache_key=cache_key("greeting"),
            nearest=NearestEntry(cache_key=cache_key("greeting"), model="m-1", differences=("messages[1]",)),
        ),
        intents=intents_ledger(replayed_staged=False),
        provider_calls=1,
        state=state_view(),
    )


def what_if_result() -> ReplayResult:
    trace = Trace(seq=SEQ + 1, now_ms=NOW_MS + 30 * 60_000)
    trace.start(kind="resume", trigger="tool_result")
    trace.llm("summary", hit=True)
    trace.end("done", outputs=1)
    return ReplayResult(
        verdict=Verdict.WHAT_IF,
        reason="pending resume (tool_result for the refund) has not run: no traced outcome to diff",
        header=header(seq=SEQ + 1, now_ms=NOW_MS + 30 * 60_000, kind="resume", trigger="tool_result",
                      continuation_source="snapshot.continuation"),
        events=tuple(EventPair(index=i, traced=None, replayed=e, differs=False) for i, e in enumerate(trace.events)),
        outputs=(blob(b"Your refund of $5.00 was issued.\n"),),
        memory=blob(MEMORY_BLOB),
        state=state_view(),
    )


def usage_error_result(message: str | None = None) -> ReplayResult:
    return ReplayResult(
        verdict=Verdict.USAGE_ERROR,
        reason="the snapshot is newer than this beam-agents",
        header=ReplayHeader(version="1.0.0a1", agent_path=AGENT_PATH, registry_path=REGISTRY_PATH),
        error=message
        or (
            "the snapshot is schema version 9, newer than this beam-agents supports (version 2); "
            "upgrade beam-agents to a release that reads version 9 (guessing forward would silently "
            "misread it)"
        ),
    )


INJECTION = "[bold red]x[/] \x1b[2J\x1b]52;c;ZXZpbA==\x07 \u202eevil"
"""Markup, a clear-screen, an OSC 52 clipboard write and a bidi override, in one string."""


def injection_result() -> ReplayResult:
    """A diverged result with hostile strings in names, memory, outputs, errors and keys."""
    key = b"\x1b[2J[bold]k[/]"
    trace = Trace(key=key)
    trace.start(event_type=INJECTION)
    trace.llm("x", hit=True, model=INJECTION)
    trace.tool(INJECTION, error=INJECTION)
    trace.end(INJECTION)
    replayed = Trace(key=key)
    replayed.start(event_type=INJECTION)
    replayed.llm("x", hit=True, model=INJECTION)
    replayed.tool(INJECTION, result=INJECTION)
    replayed.end(INJECTION)
    memory = {INJECTION: INJECTION, "nested": {"[link=http://evil]y[/link]": [INJECTION]}}
    return ReplayResult(
        verdict=Verdict.DIVERGED,
        reason=f"event 2 TOOL_CALL {INJECTION}: differs",
        header=header(entity_key=key, agent_path=INJECTION, registry_path=INJECTION),
        events=_pairs(trace.events, replayed.events, {2: ("attributes['error.type']",)}),
        first_divergence=Divergence(
            index=2, kind="TOOL_CALL", name=INJECTION,
            fields=(FieldDiff(path=INJECTION, traced=INJECTION, replayed=INJECTION),),
            detail=INJECTION,
        ),
        intents=(
            IntentRow(intent_id=INJECTION, tool=INJECTION, traced_staged=True, replayed_staged=True,
                      traced_released=False, replayed_released=False),
        ),
        outputs=(blob(INJECTION.encode()),),
        memory=blob(INJECTION.encode()),
        state=state_view(memory=memory),
        error=INJECTION,
    )


def injection_error_result() -> ReplayResult:
    return usage_error_result(message=f"cannot read --snapshot {INJECTION}: {INJECTION}")


_PROMPT = "You are a support agent for ACME. Be brief and kind; quote the order id. " * 4
_ANSWER = "Your order A-1001 shipped on 2024-12-09 with DHL; tracking JD0146000062812301." * 2


def _large_values(events: tuple[EventPair, ...]) -> tuple[Value, ...]:
    """Values shaped like the engine's: ~9 per model call, 2 per tool call (verified)."""
    out: list[Value] = []
    digest = "ab" * 32
    for pair in events:
        event = pair.replayed
        assert event is not None
        i = pair.index

        def add(path: str, text: str, i: int = i) -> None:
            out.append(
                Value(
                    event_index=i,
                    path=path,
                    value=text,
                    text=text,
                    mark=Mark.VERIFIED,
                    digest=digest,
                    traced_digest=digest,
                )
            )

        if event.kind == event.LLM_CALL:
            add("request", '{"cache_key": "' + digest + '"}')
            add("request.model", event.name)
            add("request.params", '{"temperature": 0.0}')
            add("request.messages[0]", '{"content": "' + _PROMPT + '", "role": "system"}')
            add("request.messages[1]", f'{{"content": "question {i}", "role": "user"}}')
            add("response.text", _ANSWER)
            add("response.usage", '{"input_tokens": 812, "output_tokens": 96}')
            add("response.stop_reason", "end_turn")
            add("response.model", event.name)
        elif event.kind == event.TOOL_CALL:
            add("args", f'{{"order_id": "A-{i % 97}"}}')
            add("result", f'{{"order_id": "A-{i % 97}", "status": "shipped"}}')
    return tuple(out)


def large_result(events: int, *, values: bool = True) -> ReplayResult:
    """A reproduced activation of ``events`` events (for the benchmark): mostly model and tool calls.

    With ``values`` it carries values shaped like the engine's (about 6 per event).
    """
    trace = Trace()
    trace.start()
    body = events - 2
    ordinal = 0
    for i in range(body):
        if i % 3 == 2:
            trace.tool("lookup_order", result=f"order {i % 97}")
        else:
            trace.llm(f"call-{i % 64}", hit=True, ordinal=ordinal)
            ordinal += 1
    trace.end("done", outputs=1)
    pairs = tuple(EventPair(index=i, traced=e, replayed=e, differs=False) for i, e in enumerate(trace.events))
    return ReplayResult(
        verdict=Verdict.REPRODUCED,
        reason=f"{len(pairs)} events matched the trace",
        header=header(),
        events=pairs,
        outputs=(blob(b"done"),),
        memory=blob(MEMORY_BLOB),
        state=state_view(),
        values=_large_values(pairs) if values else (),
    )


RESULTS: dict[str, Callable[[], ReplayResult]] = {
    "reproduced": reproduced_result,
    "diverged": diverged_result,
    "cache-miss": cache_miss_result,
    "what-if": what_if_result,
    "usage-error": usage_error_result,
    "injection": injection_result,
}
