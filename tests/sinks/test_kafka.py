"""kafka:// against a real Kafka-protocol broker (the librdkafka mock cluster) on loopback."""

from __future__ import annotations

import time

import pytest

from beam_agents._version import __version__
from beam_agents.errors import ConfigError, SinkError
from beam_agents.migrations import STATE_SCHEMA_VERSION
from beam_agents.sinks import open_sink
from beam_agents.trace_events import serialize_trace_event

from .peers import KafkaMockCluster, closed_port, consume_all
from .records import activation_events, snapshot

pytestmark = pytest.mark.slow

# Kafka protocol error codes (non-retriable for a producer).
INVALID_RECORD = 87


def test_traces_arrive_keyed_by_entity_key_with_the_deterministic_bytes(
    kafka_cluster: KafkaMockCluster,
) -> None:
    kafka_cluster.create_topic("traces-roundtrip")
    events = activation_events(b"customer-42", 7) + activation_events(b"\x00\xffbin", 1)
    writer = open_sink(
        f"kafka://{kafka_cluster.bootstrap}/traces-roundtrip",
        role="traces",
        options={"timeout_s": "10"},
    )
    try:
        for event in events:
            writer.write_trace(event)
        writer.flush()
    finally:
        writer.close()

    messages = consume_all(kafka_cluster.bootstrap, "traces-roundtrip", len(events))
    received = sorted((m.key(), m.value()) for m in messages)
    assert received == sorted((e.entity_key, serialize_trace_event(e)) for e in events)
    # Each record says what its value is (a consumer needs nothing out of band).
    assert {tuple(m.headers()) for m in messages} == {
        (
            ("content-type", b"application/x-protobuf; messageType=beam_agents.v1.TraceEvent"),
            ("beam-agents-message-type", b"beam_agents.v1.TraceEvent"),
            ("beam-agents-state-schema-version", str(STATE_SCHEMA_VERSION).encode()),
            ("beam-agents-version", __version__.encode()),
        )
    }
    # One key's events share a partition, in the order written.
    for key in (b"customer-42", b"\x00\xffbin"):
        of_key = [m for m in messages if m.key() == key]
        assert len({m.partition() for m in of_key}) == 1
        assert [m.value() for m in sorted(of_key, key=lambda m: m.offset())] == [
            serialize_trace_event(e) for e in events if e.entity_key == key
        ]


def test_snapshots_arrive_as_their_deterministic_serialization(
    kafka_cluster: KafkaMockCluster,
) -> None:
    kafka_cluster.create_topic("snapshots-roundtrip")
    snapshots = [snapshot(b"customer-42", 7), snapshot(b"customer-43", 2, request_id="r/2")]
    writer = open_sink(f"kafka://{kafka_cluster.bootstrap}/snapshots-roundtrip", role="snapshots")
    try:
        for item in snapshots:
            writer.write_snapshot(item)
        writer.flush()
    finally:
        writer.close()

    messages = consume_all(kafka_cluster.bootstrap, "snapshots-roundtrip", len(snapshots))
    for message, sent in zip(
        sorted(messages, key=lambda m: m.value()),
        sorted(snapshots, key=lambda s: s.SerializeToString(deterministic=True)),
        strict=True,
    ):
        assert dict(message.headers()) == {
            "content-type": b"application/x-protobuf; messageType=beam_agents.v1.StateSnapshot",
            "beam-agents-message-type": b"beam_agents.v1.StateSnapshot",
            "beam-agents-state-schema-version": str(sent.state_schema_version).encode(),
            "beam-agents-version": __version__.encode(),
        }
    assert sorted((m.key(), m.value()) for m in messages) == sorted(
        (s.entity_key, s.SerializeToString(deterministic=True)) for s in snapshots
    )


def test_an_unreachable_broker_fails_the_flush_within_the_timeout() -> None:
    writer = open_sink(
        f"kafka://127.0.0.1:{closed_port()}/traces", role="traces", options={"timeout_s": "2"}
    )
    try:
        event = activation_events(b"k1", 3)[2]
        writer.write_trace(event)
        started = time.monotonic()
        with pytest.raises(SinkError) as caught:
            writer.flush()
        assert time.monotonic() - started < 6
    finally:
        writer.close()
    assert caught.value.record == "trace key=6b31 seq=3 index=2"
    assert "not delivered within timeout_s=2" in caught.value.cause
    assert caught.value.uri.startswith("kafka://127.0.0.1:")


def test_a_delivery_the_broker_refuses_fails_the_flush_naming_the_record_and_the_retry_goes_through(
    kafka_cluster: KafkaMockCluster,
) -> None:
    kafka_cluster.create_topic("traces-refused")
    writer = open_sink(
        f"kafka://{kafka_cluster.bootstrap}/traces-refused",
        role="traces",
        options={"timeout_s": "10", "enable.idempotence": "false", "retries": "0"},
    )
    # Several rounds: purging the producer after the refusal made librdkafka purge the
    # retry's record too, asynchronously, in about 1 round in 6 on a quiet machine.
    rounds = 12
    try:
        # Warm up (metadata, connection) so the injected error hits our Produce request.
        writer.write_trace(activation_events(b"warm", 1)[0])
        writer.flush()
        for _ in range(rounds):
            kafka_cluster.fail_next_produce_requests(INVALID_RECORD, 1)
            writer.write_trace(activation_events(b"k1", 3)[1])
            with pytest.raises(SinkError) as caught:
                writer.flush()
            assert caught.value.record == "trace key=6b31 seq=3 index=1"
            assert "INVALID_RECORD" in caught.value.cause
            # The writer is usable again: the runner's retry of the bundle goes through.
            writer.write_trace(activation_events(b"k1", 3)[1])
            writer.flush()
    finally:
        writer.close()
    delivered = consume_all(kafka_cluster.bootstrap, "traces-refused", 1 + rounds)
    assert sorted(m.key() for m in delivered) == sorted([b"warm"] + [b"k1"] * rounds)


def test_a_record_queued_when_the_flush_times_out_is_never_delivered_after_it() -> None:
    # Its own cluster: the broker goes down for a while.
    cluster = KafkaMockCluster()
    try:
        cluster.create_topic("traces-timeout", partitions=1)
        writer = open_sink(
            f"kafka://{cluster.bootstrap}/traces-timeout",
            role="traces",
            # The replacement producer is made while the broker is down: keep its
            # reconnect backoff short so the retry does not wait out librdkafka's 10 s.
            options={"timeout_s": "3", "reconnect.backoff.max.ms": "200"},
        )
        try:
            writer.write_trace(activation_events(b"warm", 1)[0])
            writer.flush()
            cluster.set_broker_down()
            writer.write_trace(activation_events(b"stale", 2)[1])
            with pytest.raises(SinkError) as caught:
                writer.flush()
            assert caught.value.record == "trace key=7374616c65 seq=2 index=1"
            assert "not delivered within timeout_s=3" in caught.value.cause
            cluster.set_broker_up()
            # The bundle's retry writes its own records; the stale one must not follow.
            writer.write_trace(activation_events(b"retry", 2)[1])
            writer.flush()
            time.sleep(1.0)
        finally:
            writer.close()
        delivered = consume_all(cluster.bootstrap, "traces-timeout", 3, timeout_s=5)
    finally:
        cluster.close()
    assert [m.key() for m in delivered] == [b"warm", b"retry"]


def test_a_record_over_the_message_size_limit_is_refused_at_write(
    kafka_cluster: KafkaMockCluster,
) -> None:
    writer = open_sink(
        f"kafka://{kafka_cluster.bootstrap}/traces",
        role="snapshots",
        options={"message.max.bytes": "1000"},
    )
    try:
        big = snapshot(b"k1", 3)
        big.memory = b"x" * 5000
        with pytest.raises(SinkError) as caught:
            writer.write_snapshot(big)
    finally:
        writer.close()
    assert caught.value.record == "snapshot key=6b31 seq=3 request_id='incident-1734'"
    assert "KafkaException" in caught.value.cause


def test_a_producer_setting_librdkafka_refuses_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"no\.such\.setting"):
        open_sink("kafka://127.0.0.1:9/traces", role="traces", options={"no.such.setting": "1"})


def test_uri_query_settings_override_configuration_options(kafka_cluster: KafkaMockCluster) -> None:
    # The URI says lz4, the options say an invalid codec: the URI wins, so it opens and delivers.
    kafka_cluster.create_topic("traces-lz4")
    writer = open_sink(
        f"kafka://{kafka_cluster.bootstrap}/traces-lz4?compression.type=lz4",
        role="traces",
        options={"compression.type": "not-a-codec"},
    )
    try:
        event = activation_events(b"k", 1)[0]
        writer.write_trace(event)
        writer.flush()
    finally:
        writer.close()
    [message] = consume_all(kafka_cluster.bootstrap, "traces-lz4", 1)
    assert message.value() == serialize_trace_event(event)
