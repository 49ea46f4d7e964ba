"""pubsub:// against real Pub/Sub peers on loopback.

Each test taking ``pubsub`` runs once per peer (``conftest.pubsub_peer``):
``[emulator]``, Google's Pub/Sub emulator, where installed, and
``[inprocess]``, the in-process gRPC server of ``pubsub_fake_server.py``. The
client libraries reach either through ``PUBSUB_EMULATOR_HOST``; messages are
read back with a synchronous ``SubscriberClient.pull`` + ``acknowledge``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from beam_agents.errors import SinkError
from beam_agents.sinks import open_sink
from beam_agents.trace_events import serialize_trace_event

from .peers import PubSubPeer, closed_port
from .records import activation_events, snapshot

pytestmark = pytest.mark.slow

PROJECT = "test-project"


@pytest.fixture
def pubsub(pubsub_peer: PubSubPeer, monkeypatch: pytest.MonkeyPatch) -> Iterator[PubSubPeer]:
    """This run's peer, which every Pub/Sub client made in the test talks to."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", pubsub_peer.host)
    yield pubsub_peer


def make_topic(name: str) -> str:
    """Create topic ``name`` and an ordered subscription to it; return the subscription path."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, name)
    subscription: str = subscriber.subscription_path(PROJECT, f"{name}-sub")
    publisher.create_topic(name=topic)
    subscriber.create_subscription(
        request={"name": subscription, "topic": topic, "enable_message_ordering": True}
    )
    publisher.stop()
    subscriber.close()
    return subscription


def pull(subscription: str, count: int, timeout_s: float = 20.0) -> list[Any]:
    """Read ``count`` messages (or what came within ``timeout_s``), acknowledging each pull."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

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
    pubsub: PubSubPeer,
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


def test_snapshots_arrive_as_their_deterministic_serialization(pubsub: PubSubPeer) -> None:
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
    pubsub: PubSubPeer,
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


# ------------------------------------------------------------------ the peers themselves
# What the tests above rely on a peer for, checked on every peer: against
# Google's emulator these pin the behaviour the in-process server must share.


def test_the_peer_answers_topic_and_subscription_calls_as_pubsub_does(pubsub: PubSubPeer) -> None:
    from google.api_core import exceptions
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, "admin-calls")
    missing_topic = publisher.topic_path(PROJECT, "admin-missing")
    subscription = subscriber.subscription_path(PROJECT, "admin-calls-sub")
    try:
        assert publisher.create_topic(name=topic).name == topic
        assert publisher.get_topic(topic=topic).name == topic
        with pytest.raises(exceptions.AlreadyExists):
            publisher.create_topic(name=topic)
        with pytest.raises(exceptions.NotFound):
            publisher.get_topic(topic=missing_topic)
        with pytest.raises(exceptions.InvalidArgument):
            publisher.create_topic(name=publisher.topic_path(PROJECT, "ab"))  # ids: 3+ chars

        created = subscriber.create_subscription(
            request={"name": subscription, "topic": topic, "enable_message_ordering": True}
        )
        assert (created.topic, created.ack_deadline_seconds) == (topic, 10)
        assert created.enable_message_ordering
        assert subscriber.get_subscription(subscription=subscription) == created
        with pytest.raises(exceptions.AlreadyExists):
            subscriber.create_subscription(request={"name": subscription, "topic": topic})
        with pytest.raises(exceptions.NotFound):
            subscriber.create_subscription(
                request={
                    "name": subscriber.subscription_path(PROJECT, "admin-orphan"),
                    "topic": missing_topic,
                }
            )
        with pytest.raises(exceptions.NotFound):
            subscriber.pull(
                request={
                    "subscription": subscriber.subscription_path(PROJECT, "admin-missing-sub"),
                    "max_messages": 1,
                },
                timeout=5,
            )
    finally:
        publisher.stop()
        subscriber.close()


def test_an_ordered_subscription_holds_a_key_until_its_earlier_message_is_acknowledged(
    pubsub: PubSubPeer,
) -> None:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    publisher = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(PROJECT, "held-keys")
    subscription = subscriber.subscription_path(PROJECT, "held-keys-sub")
    try:
        publisher.create_topic(name=topic)
        # Published before the subscription exists: never delivered to it.
        publisher.publish(topic, b"before", ordering_key="a").result(timeout=10)
        subscriber.create_subscription(
            request={"name": subscription, "topic": topic, "enable_message_ordering": True}
        )
        for future in [publisher.publish(topic, d, ordering_key="a") for d in (b"a0", b"a1")]:
            future.result(timeout=10)

        def pull_once(max_messages: int, timeout_s: float) -> list[Any]:
            request = {"subscription": subscription, "max_messages": max_messages}
            return list(subscriber.pull(request=request, timeout=timeout_s).received_messages)

        [first] = pull_once(1, 5)
        assert first.message.data == b"a0"
        assert first.message.message_id and first.message.publish_time
        # a1 waits while a0 is out unacknowledged (the pull answers empty before its deadline).
        assert pull_once(10, 2) == []
        subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [first.ack_id]})
        [second] = pull_once(10, 5)
        assert second.message.data == b"a1"
        assert second.message.message_id != first.message.message_id
        subscriber.acknowledge(request={"subscription": subscription, "ack_ids": [second.ack_id]})
    finally:
        publisher.stop()
        subscriber.close()
