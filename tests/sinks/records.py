"""Trace events and snapshots shaped like the ones an activation emits, for the sink tests."""

from __future__ import annotations

from beam_agents import trace_events as te
from beam_agents._protos import Continuation, StateSnapshot, ToolIntent, TraceEvent


def activation_events(
    entity_key: bytes, seq: int, *, now_ms: int = 1_734_000_000_000
) -> list[TraceEvent]:
    """One activation's events: start, a model call, a tool call, a staged intent, the end."""

    def event(index: int, kind: int, name: str, attributes: dict[str, te.AttrValue]) -> TraceEvent:
        return te.make_event(
            entity_key=entity_key,
            seq=seq,
            index=index,
            kind=kind,
            name=name,
            now_ms=now_ms,
            attributes=attributes,
        )

    return [
        event(
            0,
            TraceEvent.ACTIVATION_START,
            "start",
            {
                te.ATTR_ACTIVATION_KIND: "start",
                te.ATTR_TRIGGER: "event",
                te.ATTR_ENVELOPE_ID: f"env-{seq}",
                te.ATTR_EVENT_TYPE: "order.created",
            },
        ),
        event(
            1,
            TraceEvent.LLM_CALL,
            "gpt-test",
            {
                te.ATTR_REQUEST_MODEL: "gpt-test",
                te.ATTR_RESPONSE_MODEL: "gpt-test-0613",
                te.ATTR_CACHE_KEY: "ck-" + "ab" * 16,
                te.ATTR_CACHE_HIT: False,
                te.ATTR_BILLED: True,
                te.ATTR_USAGE_INPUT: 120,
                te.ATTR_USAGE_OUTPUT: 0,
                te.ATTR_CALL_ORDINAL: 0,
                te.ATTR_STOP_REASON: "",
            },
        ),
        event(
            2,
            TraceEvent.TOOL_CALL,
            "lookup_order",
            {
                te.ATTR_TOOL_NAME: "lookup_order",
                te.ATTR_ARGS_SHA256: "cd" * 32,
            },
        ),
        event(
            3,
            TraceEvent.INTENT_STAGED,
            "issue_refund",
            {
                te.ATTR_TOOL_NAME: "issue_refund",
                te.ATTR_INTENT_ID: f"intent-{seq}-0",
                te.ATTR_REQUIRES_APPROVAL: True,
                te.ATTR_EXPIRES_AT_MS: now_ms + 3_600_000,
            },
        ),
        event(
            4,
            TraceEvent.ACTIVATION_END,
            "done",
            {
                te.ATTR_OUTCOME: "done",
                te.ATTR_OUTPUTS_COUNT: 1,
            },
        ),
    ]


def failed_activation_events(entity_key: bytes, seq: int) -> list[TraceEvent]:
    """A failed activation: start, then ACTIVATION_FAILED naming the error type."""
    start = te.make_event(
        entity_key=entity_key,
        seq=seq,
        index=0,
        kind=TraceEvent.ACTIVATION_START,
        name="start",
        now_ms=1_734_000_000_000,
    )
    failed = te.make_event(
        entity_key=entity_key,
        seq=seq,
        index=1,
        kind=TraceEvent.ACTIVATION_FAILED,
        name="ValueError",
        now_ms=1_734_000_000_000,
        attributes={te.ATTR_ERROR_TYPE: "ValueError"},
    )
    return [start, failed]


def snapshot(entity_key: bytes, seq: int, request_id: str = "incident-1734") -> StateSnapshot:
    """A snapshot of a suspended key, with every seed field set."""
    return StateSnapshot(
        state_schema_version=1,
        entity_key=entity_key,
        seq=seq,
        snapshot_at_ms=1_734_000_000_500,
        memory=b"\x0a\x06memory\x10\x01",
        llm_cache=b"\x0a\x09llm_cache\x10\x01",
        continuation=Continuation(
            suspended_seq=seq,
            step_index=1,
            adapter_snapshot=b"{}",
            awaiting_intent_ids=[f"intent-{seq}-0"],
            deadline_ms=1,
        ),
        pending=[
            ToolIntent(
                intent_id=f"intent-{seq}-0",
                entity_key=entity_key,
                seq=seq,
                tool="issue_refund",
                args=b'{"amount_cents":500}',
            )
        ],
        request_id=request_id,
    )
