"""AgentConfig (beam_agents/config.py): refused at construction, naming the culprit; Beam-free.

Lives with the pipeline tests because RunAgent is its only consumer.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from agents import make_provider

from beam_agents import AgentConfig, HitlPolicy
from beam_agents.errors import ConfigError
from beam_agents.llm_cache import CachePolicy


def test_the_seed_page_config_is_accepted() -> None:
    config = AgentConfig(
        provider_factory=make_provider,
        traces_to="kafka://broker:9092/traces",
        snapshots_to="kafka://broker:9092/snapshots",
    )
    assert config.hitl == HitlPolicy()
    assert config.cache == CachePolicy()
    assert config.inbox_limit == 100
    assert config.max_in_flight == 1  # activations one after another unless asked


def test_snapshots_have_no_default_destination() -> None:
    assert AgentConfig(provider_factory=make_provider).snapshots_to is None


def test_bigquery_snapshots_are_refused_with_the_seed_reason() -> None:
    with pytest.raises(ConfigError) as refused:
        AgentConfig(provider_factory=make_provider, snapshots_to="bigquery://proj-1.ds.snaps")
    message = str(refused.value)
    assert "bigquery://proj-1.ds.snaps" in message
    assert "opaque per-key state image with no row layout" in message


def test_otlp_snapshots_are_refused_as_traces_only() -> None:
    with pytest.raises(ConfigError, match="traces-only"):
        AgentConfig(provider_factory=make_provider, snapshots_to="otlp://collector:4317")
    # ...while both are fine for traces.
    AgentConfig(provider_factory=make_provider, traces_to="otlp://collector:4317")
    AgentConfig(provider_factory=make_provider, traces_to="bigquery://proj-1.ds.traces")


@pytest.mark.parametrize(
    ("field", "uri", "named"),
    [
        ("traces_to", "s3://bucket/traces", "unknown scheme"),
        ("snapshots_to", "ftp://host/snaps", "unknown scheme"),
        ("traces_to", "kafka://broker/traces", "host:port"),
        ("snapshots_to", "file://relative/dir", "absolute directory"),
        ("traces_to", "not a uri", "not a URI"),
    ],
)
def test_an_unknown_scheme_or_malformed_uri_is_refused_naming_it(
    field: str, uri: str, named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        AgentConfig(provider_factory=make_provider, **{field: uri})
    assert uri in str(refused.value)
    assert named in str(refused.value)


def test_a_sink_option_no_configured_sink_takes_is_refused() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        AgentConfig(
            provider_factory=make_provider,
            snapshots_to="file:///tmp/snaps",
            sink_options={"bogus": "1"},
        )


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"provider_factory": "make_client"}, "provider_factory"),
        ({"inbox_limit": 0}, "inbox_limit"),
        ({"inbox_limit": True}, "inbox_limit"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": 4097}, "max_in_flight"),
        ({"max_in_flight": 2.0}, "max_in_flight"),
        ({"max_in_flight": True}, "max_in_flight"),
        ({"hitl": {"hitl_timeout_ms": 5}}, "hitl"),
        ({"cache": None}, "cache"),
        ({"traces_to": b"file:///tmp"}, "traces_to"),
        ({"sink_options": {"timeout_s": 5}}, "sink_options"),
    ],
)
def test_bad_values_are_refused_naming_the_field(kwargs: dict[str, object], named: str) -> None:
    arguments: dict[str, object] = {"provider_factory": make_provider, **kwargs}
    with pytest.raises(ConfigError, match=named):
        AgentConfig(**arguments)  # type: ignore[arg-type]


def test_config_is_keyword_only_frozen_and_picklable() -> None:
    with pytest.raises(TypeError):
        AgentConfig(make_provider)  # type: ignore[misc]
    options = {"timeout_s": "5"}
    config = AgentConfig(
        provider_factory=make_provider, traces_to="kafka://b:9092/t", sink_options=options
    )
    options["timeout_s"] = "50"  # the config kept its own copy
    assert config.sink_options == {"timeout_s": "5"}
    with pytest.raises(AttributeError):
        config.inbox_limit = 5  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(config)) == config


def test_importing_and_building_a_config_does_not_import_beam() -> None:
    code = (
        "import sys; from beam_agents import AgentConfig; "
        "AgentConfig(provider_factory=print, snapshots_to='file:///tmp/x'); "
        "print(sorted(m for m in ('apache_beam', 'confluent_kafka', 'google.cloud.pubsub') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- secrets never reach a message or a repr ---------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "kafka://alice:hunter2@broker:9092/traces",
        "kafka://alice:hunter2@b1:9092,b2:9092/traces?acks=all",
        "pubsub://alice:hunter2@my-project/traces",
        "file://alice:hunter2@host/tmp/traces",
        "otlp://alice:hunter2@collector:4317",
        "bigquery://alice:hunter2@proj.ds.table",
    ],
)
def test_a_uri_with_a_password_is_refused_without_echoing_it(uri: str) -> None:
    with pytest.raises(ConfigError) as caught:
        AgentConfig(provider_factory=lambda: None, traces_to=uri)  # type: ignore[arg-type,return-value]
    message = str(caught.value)
    assert "hunter2" not in message and "alice" not in message
    assert "***@" in message and "user information" in message


def test_a_snapshots_uri_with_a_password_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        AgentConfig(
            provider_factory=lambda: None,  # type: ignore[arg-type,return-value]
            snapshots_to="kafka://alice:hunter2@broker:9092/snapshots",
        )
    assert "hunter2" not in str(caught.value)


SECRET_OPTIONS = {
    "sasl.password": "hunter2-sasl",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY----- hunter2-pem",
    "ssl.key.password": "hunter2-keypass",
    "ssl.keystore.password": "hunter2-keystore",
    "sasl.oauthbearer.client.secret": "hunter2-oauth",
    "sasl.jaas.config": "hunter2-jaas",
}


def test_repr_of_a_config_shows_no_sink_option_secret_nor_uri_secret() -> None:
    config = AgentConfig(
        provider_factory=lambda: None,  # type: ignore[arg-type,return-value]
        traces_to="kafka://broker:9092/traces?sasl.password=hunter2-uri&acks=all",
        snapshots_to="kafka://broker:9092/snapshots",
        sink_options={**SECRET_OPTIONS, "security.protocol": "SASL_SSL", "sasl.username": "svc"},
    )
    shown = repr(config)
    assert "hunter2" not in shown
    for name in SECRET_OPTIONS:
        assert f"'{name}': '***'" in shown
    # What is not secret stays readable, and every field is still named.
    assert "'security.protocol': 'SASL_SSL'" in shown and "'sasl.username': 'svc'" in shown
    assert "acks=all" in shown
    assert "snapshots_to='kafka://broker:9092/snapshots'" in shown
    for name in ("provider_factory", "hitl", "cache", "tool_cache", "inbox_limit", "max_in_flight"):
        assert f"{name}=" in shown
    assert str(config) == shown
    assert config.sink_options["sasl.password"] == "hunter2-sasl"  # the config keeps the value


def test_a_non_string_secret_option_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        AgentConfig(
            provider_factory=lambda: None,  # type: ignore[arg-type,return-value]
            traces_to="kafka://broker:9092/traces",
            sink_options={"sasl.password": b"hunter2"},  # type: ignore[dict-item]
        )
    assert "hunter2" not in str(caught.value) and "sasl.password" in str(caught.value)
