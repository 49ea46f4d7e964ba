"""Sink URIs are parsed and refused at configuration time, naming the URI and the remedy."""

from __future__ import annotations

import pytest

from beam_agents.errors import ConfigError
from beam_agents.sinks import SinkUri, check_sink_options, parse_sink_uri, resolve_sink_options


def test_kafka_uri_holds_its_bootstrap_servers_and_topic() -> None:
    sink = parse_sink_uri("kafka://b1:9092,b2:9093/agent.traces", role="traces")
    assert sink == SinkUri("kafka", "kafka://b1:9092,b2:9093/agent.traces",
                           hosts=("b1:9092", "b2:9093"), topic="agent.traces")  # fmt: skip
    assert parse_sink_uri("kafka://[::1]:9092/t", role="snapshots").hosts == ("[::1]:9092",)


def test_pubsub_uri_holds_project_and_topic() -> None:
    sink = parse_sink_uri("pubsub://my-project/agent-snapshots", role="snapshots")
    assert (sink.scheme, sink.project, sink.topic) == ("pubsub", "my-project", "agent-snapshots")


def test_bigquery_uri_holds_project_dataset_and_table() -> None:
    sink = parse_sink_uri("bigquery://my-project.agents.traces", role="traces")
    assert (sink.project, sink.dataset, sink.table) == ("my-project", "agents", "traces")
    assert sink.table_path == "my-project.agents.traces"
    # A domain-scoped project id keeps its dots.
    scoped = parse_sink_uri("bigquery://example.com:proj.ds.t", role="traces")
    assert (scoped.project, scoped.dataset, scoped.table) == ("example.com:proj", "ds", "t")


def test_otlp_and_file_uris() -> None:
    assert parse_sink_uri("otlp://collector:4317", role="traces").hosts == ("collector:4317",)
    assert parse_sink_uri("file:///tmp/out%20dir/", role="snapshots").directory == "/tmp/out dir"
    assert parse_sink_uri("file://localhost/tmp/x", role="traces").directory == "/tmp/x"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("bigquery://p.d.t", "a snapshot is an opaque per-key state image with no row layout"),
        ("otlp://collector:4317", "otlp:// is a traces-only exporter"),
    ],
)
def test_traces_only_schemes_are_refused_for_snapshots_with_the_seeds_reason(
    uri: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sink_uri(uri, role="snapshots")
    assert reason in str(caught.value)
    assert uri in str(caught.value)
    assert "kafka://, pubsub:// or file://" in str(caught.value)


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("s3://bucket/traces", "unknown scheme 's3://'"),
        ("traces.pb", "not a URI"),
        ("kafka://broker/traces", "not host:port"),
        ("kafka://broker:99999/traces", "no valid port"),
        ("kafka://broker:9092", "no topic"),
        ("kafka://broker:9092/a/b", "not a single topic"),
        ("kafka://broker:9092/bad topic", "not a Kafka topic name"),
        ("kafka://user:pw@broker:9092/t", "credentials as sink options"),
        ("pubsub://my-project", "no topic"),
        ("pubsub://P/topic", "not a Google Cloud project id"),
        ("pubsub://my-project/goog-topic", "not a Pub/Sub topic id"),
        ("bigquery://dataset.table", "not project.dataset.table"),
        ("bigquery://p/d/t", "host part, not a path"),
        ("otlp://collector", "not host:port"),
        ("otlp://a:1,b:2", "one endpoint only"),
        ("otlp://collector:4317/v1/traces?protocol=grpc", "takes no path"),
        ("otlp://:4317", "':4317' is not host:port"),
        ("otlp://c:4317?protocol=http/json", "must be one of grpc, http/protobuf"),
        ("file://relative/dir", "three slashes"),
        ("kafka://b:1/t#frag", "no #fragment"),
        ("kafka://b:1/t?acks=1&acks=all", "given twice"),
        ("pubsub://my-project/t?compression.type=lz4", "no option 'compression.type'"),
        ("otlp://c:4317?timeout_s=0", "timeout_s='0'"),
        ("otlp://c:4317?tls=yes", "must be 'true' or 'false'"),
        ("kafka://b:1/t?bootstrap.servers=x:1", "set by the sink itself"),
    ],
)
def test_malformed_uris_are_refused_naming_what_to_write(uri: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sink_uri(uri, role="traces")
    assert says in str(caught.value)


def test_a_refused_uri_never_echoes_a_secret() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sink_uri("kafka://b:1/t?sasl.password=hunter2&acks=x&acks=y", role="traces")
    assert "hunter2" not in str(caught.value)
    sink = parse_sink_uri("kafka://b:1/t?sasl.password=hunter2&acks=all", role="traces")
    assert "hunter2" not in sink.redacted
    assert "acks=all" in sink.redacted
    assert str(sink) == sink.redacted


def test_uri_query_overrides_configuration_options() -> None:
    sink = parse_sink_uri("kafka://b:1/t?compression.type=lz4", role="traces")
    options = {"compression.type": "gzip", "security.protocol": "SASL_SSL"}
    assert resolve_sink_options(sink, options) == {
        "compression.type": "lz4",
        "security.protocol": "SASL_SSL",
    }


def test_each_sink_takes_only_its_own_configuration_options() -> None:
    # One options mapping serves traces_to and snapshots_to: the OTLP sink
    # leaves the producer settings meant for the Kafka sink.
    options = {"security.protocol": "SSL", "timeout_s": "5", "tls": "true"}
    otlp = parse_sink_uri("otlp://c:4317", role="traces")
    kafka = parse_sink_uri("kafka://b:1/snapshots", role="snapshots")
    check_sink_options([otlp, kafka], options)
    assert resolve_sink_options(otlp, options) == {"timeout_s": "5", "tls": "true"}
    assert resolve_sink_options(kafka, options)["security.protocol"] == "SSL"


def test_an_option_no_configured_sink_takes_is_refused() -> None:
    file_sink = parse_sink_uri("file:///tmp/t", role="traces")
    otlp = parse_sink_uri("otlp://c:4317", role="traces")
    with pytest.raises(ConfigError, match="'timeout' is taken by none of the configured sinks"):
        check_sink_options([file_sink, otlp], {"timeout": "5"})
    with pytest.raises(ConfigError, match="timeout_s='-1'"):
        check_sink_options([otlp], {"timeout_s": "-1"})


def test_role_must_be_traces_or_snapshots() -> None:
    with pytest.raises(ConfigError, match="role"):
        parse_sink_uri("file:///tmp/x", role="intents")  # type: ignore[arg-type]
