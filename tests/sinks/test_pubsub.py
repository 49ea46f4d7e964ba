"""pubsub:// against Google's Pub/Sub emulator on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from beam_agents.errors import SinkError
from beam_agents.sinks import open_sink
from beam_agents.trace_events import serialize_trace_event

from .peers import PubSubEmulator, closed_port
from .records import activation_events, snapshot

pytestmark = pytest.mark.slow

PROJECT = "test-project"


@pytest.fixture
def emulator(
    pubsub_emulator: PubSubEmulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PubSubEmulator]:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_emulator.host)
    yield pubsub_emulator


def make_topic(name: str) -> str:
    """Create topic ``name`` and an ordered subscription to it; return the subscription path."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, name)
    subscription = subscriber.subscription_path(PROJECT, f"{name}-sub")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_message_ordering": True}
    )
    publisher.stop()
    subscriber.close()
    return subscription


def pull(subscription: str, count: int, timeout_s: float = 20.0) -> list[Any]:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    received: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            response = subscriber.pull(
                request={"subscription": subscription, "max_messages": 100}, timeout=5
            )
            if response.received_messages:
                subscriber.acknowledge(
                    request={
                        "subscription": subscription,
                        "ack_ids": [m.ack_id for m in response.received_messages],
                    }
                )
            received.extend(m.message for m in response.received_messages)
    finally:
        subscriber.close()
    return received


def test_traces_arrive_with_their_bytes_attributes_and_per_key_order(
    emulator: PubSubEmulator,
) -> None:
    subscription = make_topic("traces")
    events = activation_events(b"customer-42", 7) + activation_events(b"\x00\xff", 1)
    writer = open_sink(f"pubsub://{PROJECT}/traces", role="traces", options={"timeout_s": "20"})
    try:
        for event in events:
            writer.write_trace(event)
        writer.flush()
    finally:
        writer.close()

    messages = pull(subscription, len(events))
    assert sorted(m.data for m in messages) == sorted(serialize_trace_event(e) for e in events)
    for key in (b"customer-42", b"\x00\xff"):
        of_key = [m for m in messages if m.attributes["entity_key"] == key.hex()]
        assert [m.data for m in of_key] == [
            serialize_trace_event(e) for e in events if e.entity_key == key
        ]
        assert {m.ordering_key for m in of_key} == {key.hex()}
    first = next(m for m in messages if m.data == serialize_trace_event(events[2]))
    assert dict(first.attributes) == {
        "entity_key": b"customer-42".hex(),
        "kind": "trace",
        "seq": "7",
        "index": "2",
    }


def test_snapshots_arrive_as_their_deterministic_serialization(emulator: PubSubEmulator) -> None:
    subscription = make_topic("snapshots")
    item = snapshot(b"customer-42", 7)
    writer = open_sink(f"pubsub://{PROJECT}/snapshots", role="snapshots")
    try:
        writer.write_snapshot(item)
        writer.flush()
    finally:
        writer.close()
    [message] = pull(subscription, 1)
    assert message.data == item.SerializeToString(deterministic=True)
    assert dict(message.attributes) == {
        "entity_key": b"customer-42".hex(),
        "kind": "snapshot",
        "seq": "7",
    }


def test_a_missing_topic_fails_the_flush_and_the_key_can_publish_again(
    emulator: PubSubEmulator,
) -> None:
    writer = open_sink(
        f"pubsub://{PROJECT}/no-such-topic", role="traces", options={"timeout_s": "10"}
    )
    try:
        writer.write_trace(activation_events(b"k1", 3)[1])
        with pytest.raises(SinkError) as caught:
            writer.flush()
        assert caught.value.record == "trace key=6b31 seq=3 index=1"
        assert "NotFound" in caught.value.cause
        # The failed key was resumed: a retried bundle publishes again (and
        # fails again only because the topic is still missing, not "paused").
        writer.write_trace(activation_events(b"k1", 3)[1])
        with pytest.raises(SinkError) as again:
            writer.flush()
        assert "NotFound" in again.value.cause
    finally:
        writer.close()


def test_an_unreachable_service_fails_the_flush_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{closed_port()}")
    writer = open_sink(f"pubsub://{PROJECT}/traces", role="traces", options={"timeout_s": "2"})
    try:
        writer.write_trace(activation_events(b"k1", 3)[0])
        started = time.monotonic()
        with pytest.raises(SinkError) as caught:
            writer.flush()
        assert time.monotonic() - started < 8
    finally:
        writer.close()
    assert caught.value.record == "trace key=6b31 seq=3 index=0"
