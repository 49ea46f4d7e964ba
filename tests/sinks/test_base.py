"""The sink boundary: every writer is a SinkWriter, and no client exception gets past one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from beam_agents.errors import SinkError
from beam_agents.sinks import SinkWriter, open_sink
from beam_agents.sinks.base import describe_snapshot, describe_trace

from .records import activation_events, snapshot


def test_importing_the_sinks_loads_no_client_library() -> None:
    code = (
        "import sys, beam_agents.sinks, beam_agents.sinks.base, beam_agents.sinks.uri\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('confluent_kafka', 'grpc', 'opentelemetry', 'apache_beam') or m.startswith('google.cloud')]\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("uri", ["kafka://127.0.0.1:9/t", "otlp://127.0.0.1:9", "file://{tmp}/out"])
def test_open_sink_returns_an_open_sink_writer(uri: str, tmp_path: Path) -> None:
    writer = open_sink(uri.format(tmp=tmp_path), role="traces")
    try:
        assert isinstance(writer, SinkWriter)
    finally:
        writer.close()


def test_records_are_named_by_key_seq_and_index_or_request_id() -> None:
    assert describe_trace(activation_events(b"k1", 3)[2]) == "trace key=6b31 seq=3 index=2"
    assert describe_snapshot(snapshot(b"k1", 3, "r1")) == "snapshot key=6b31 seq=3 request_id='r1'"
    long_key = describe_trace(activation_events(b"k" * 100, 3)[0])
    assert long_key.startswith("trace key=" + "6b" * 32 + "…(100 bytes)")


# ------------------------------------------------------------ completeness of the mapping


def _client_exceptions() -> list[BaseException]:
    """One of each exception family the client libraries raise (and the OS under them)."""
    import google.api_core.exceptions as gexc
    import google.auth.exceptions as gauth
    import grpc
    import requests
    from confluent_kafka import KafkaError, KafkaException

    return [
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        BufferError("Local: Queue full"),
        gexc.ServiceUnavailable("down"),
        gexc.NotFound("no such table"),
        gauth.DefaultCredentialsError("no credentials"),
        grpc.RpcError(),
        requests.exceptions.ConnectionError("refused"),
        ConnectionRefusedError(111, "refused"),
        TimeoutError("timed out"),
        ValueError("bad value"),
        RuntimeError("stopped"),
    ]


class Exploding:
    """A client whose every method raises ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def method(*args: Any, **kwargs: Any) -> Any:
            raise self._exc

        return method


def _writer(scheme: str, exc: BaseException, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A writer of ``scheme`` whose client raises ``exc`` from every call."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")
    monkeypatch.setenv("BIGQUERY_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("BIGQUERY_STORAGE_EMULATOR_HOST", "127.0.0.1:9")
    uri = {
        "kafka": "kafka://127.0.0.1:9/t?timeout_s=0.2",
        "pubsub": "pubsub://test-project/topic",
        "bigquery": "bigquery://test-project.d.t",
        "otlp": "otlp://127.0.0.1:9",
    }[scheme]
    role = "snapshots" if scheme in ("kafka", "pubsub") else "traces"
    writer: Any = open_sink(uri, role=role)
    writer.close()  # release the real client; the stub takes its place
    attribute = {"kafka": "_producer", "pubsub": "_client", "bigquery": "_client", "otlp": "_exporter"}
    setattr(writer, attribute[scheme], Exploding(exc))
    if scheme == "pubsub":
        writer._topic_path = "projects/test-project/topics/topic"
    return writer


def _calls(scheme: str, writer: Any) -> list[Callable[[], None]]:
    event = activation_events(b"k1", 3)[1]
    if scheme == "pubsub":
        # A publish future that fails with the exception, as the client's would.
        def flush_failed_future() -> None:
            writer._pending = [
                (Exploding(writer._producer_exc), "trace key=6b31 seq=3 index=1", "6b31")
            ]
            writer.flush()

        return [lambda: writer.write_trace(event), flush_failed_future, writer.close]
    if scheme == "kafka":
        return [lambda: writer.write_snapshot(snapshot(b"k1", 3)), writer.flush, writer.close]

    def write_then_flush() -> None:
        writer.write_trace(event)
        writer.flush()

    return [write_then_flush, writer.close]


@pytest.mark.parametrize("scheme", ["kafka", "pubsub", "bigquery", "otlp"])
def test_every_client_exception_becomes_a_sink_error_chained_to_it(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for exc in _client_exceptions():
        writer = _writer(scheme, exc, monkeypatch)
        writer._producer_exc = exc
        if scheme == "kafka":  # flush and close need something outstanding to wait for
            writer._outstanding = {0: "snapshot key=6b31 seq=3 request_id='x'"}
        for call in _calls(scheme, writer):
            with pytest.raises(SinkError) as caught:
                call()
            assert caught.value.__cause__ is exc, (scheme, exc, call)
            assert caught.value.uri.split("://")[0] == scheme
            # The cause names the client's exception (a timeout says what timed out).
            assert type(exc).__name__ in caught.value.cause or (
                isinstance(exc, TimeoutError) and "within timeout_s" in caught.value.cause
            )


@pytest.mark.parametrize("scheme", ["pubsub", "bigquery"])
def test_a_google_client_without_credentials_fails_open_with_a_sink_error(
    scheme: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("BIGQUERY_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "absent.json"))
    uri = {"pubsub": "pubsub://test-project/topic", "bigquery": "bigquery://test-project.d.t"}[
        scheme
    ]
    with pytest.raises(SinkError) as caught:
        open_sink(uri, role="traces")
    assert "DefaultCredentialsError" in caught.value.cause
