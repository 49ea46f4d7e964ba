"""Real servers of each sink's protocol, started on loopback by the test suite itself.

Each peer listens on 127.0.0.1 on a port picked free, and is stopped by the
object that started it (a process by its own PID, never by name). The
recipes are those of ``shared/INFRA.md``:

- Kafka: the librdkafka mock cluster (a Kafka-protocol broker inside this
  process), through the C API of the librdkafka that ships in the
  confluent-kafka wheel.
- Pub/Sub: Google's Pub/Sub emulator (a Java server), where installed, and
  an in-process gRPC Pub/Sub server (``pubsub_fake_server.py``) everywhere;
  ``pubsub_peer_kinds`` says which of them the tests run against.
- BigQuery: ``local-bigquery`` in its own Python 3.13 venv, built once under
  ``.peers/`` by ``scripts/peers/bigquery_emulator.py``.
- OTLP: an in-process OTLP/gRPC ``TraceService`` that records what it receives.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS_DIR = Path(os.environ.get("BEAM_AGENTS_PEERS_DIR", REPO / ".peers"))
PEER_THREAD_PREFIX = "sink-test-peer"
"""Threads of in-process peers are named so; they live for the session on purpose."""


def unavailable(reason: str) -> None:
    """Skip with ``reason`` — except under CI, where a missing peer is a failure.

    CI here must not silently skip a sink's real-peer test (issue 4): a peer
    that cannot start there is a broken machine or a broken setup, not a
    reason to pass.
    """
    if os.environ.get("CI"):
        pytest.fail(f"peer unavailable under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        time.sleep(0.05)
    return False


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Stop a peer we started, by its PID (its process group, so a Java child goes too)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# --------------------------------------------------------------------------- Kafka


class KafkaMockCluster:
    """A librdkafka mock cluster: a real Kafka-protocol broker on 127.0.0.1, in this process."""

    PRODUCE_API_KEY = 0

    def __init__(self, brokers: int = 1) -> None:
        import confluent_kafka

        libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
        candidates = sorted(glob.glob(str(libs / "librdkafka*.so*")))
        if not candidates:
            unavailable(f"no librdkafka shared library under {libs}")
        lib = ctypes.CDLL(candidates[0])
        vp = ctypes.c_void_p
        lib.rd_kafka_conf_new.restype = vp
        lib.rd_kafka_new.restype = vp
        lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_mock_cluster_new.restype = vp
        lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
        lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
        lib.rd_kafka_mock_topic_create.argtypes = [vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_push_request_errors_array.argtypes = [
            vp,
            ctypes.c_int16,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_int),
        ]
        lib.rd_kafka_mock_broker_set_down.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_broker_set_up.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
        lib.rd_kafka_destroy.argtypes = [vp]
        self._lib = lib
        errbuf = ctypes.create_string_buffer(512)
        self._rk = lib.rd_kafka_new(0, lib.rd_kafka_conf_new(), errbuf, 512)
        if not self._rk:
            unavailable(f"rd_kafka_new failed: {errbuf.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            unavailable("rd_kafka_mock_cluster_new failed")
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._mc, 0)
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    def create_topic(self, name: str, partitions: int = 3) -> None:
        err = self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions, 1)
        assert err == 0, f"rd_kafka_mock_topic_create({name!r}) returned error {err}"

    def fail_next_produce_requests(self, error_code: int, count: int) -> None:
        """Make the broker answer the next ``count`` Produce requests with ``error_code``."""
        errors = (ctypes.c_int * count)(*([error_code] * count))
        self._lib.rd_kafka_mock_push_request_errors_array(
            self._mc, self.PRODUCE_API_KEY, count, errors
        )

    def set_broker_down(self, broker_id: int = 1) -> None:
        """Disconnect the broker's clients and refuse new connections (mock broker ids start at 1)."""
        self._lib.rd_kafka_mock_broker_set_down(self._mc, broker_id)

    def set_broker_up(self, broker_id: int = 1) -> None:
        """Accept connections again."""
        self._lib.rd_kafka_mock_broker_set_up(self._mc, broker_id)

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None


def consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = 20.0) -> list[Any]:
    """Read ``count`` messages of ``topic`` from the beginning, with a separate consumer."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sink-test-{os.getpid()}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
        }
    )
    messages: list[Any] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
    finally:
        consumer.close()
    return messages


# --------------------------------------------------------------------------- Pub/Sub

PUBSUB_PEER_ENV = "BEAM_AGENTS_PUBSUB_PEER"
"""``inprocess`` or ``emulator``: run the Pub/Sub tests against that peer only."""

PUBSUB_PEER_KINDS = ("emulator", "inprocess")


class PubSubPeer(Protocol):
    """A Pub/Sub server the client libraries reach through ``PUBSUB_EMULATOR_HOST``."""

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``."""
        ...

    def close(self) -> None:
        """Stop the server."""
        ...


def pubsub_peer_kinds() -> list[str]:
    """The Pub/Sub peers the tests run against, each a parameter of the ``pubsub_peer`` fixture.

    By default both: Google's emulator (its runs skip where it is not
    installed) and the in-process server (which therefore stands in for the
    emulator where it is missing, and is proven against the same tests where
    it is present). ``BEAM_AGENTS_PUBSUB_PEER=inprocess`` (or ``=emulator``)
    selects one.

    Raises:
        pytest.UsageError: The variable names no peer.
    """
    chosen = os.environ.get(PUBSUB_PEER_ENV, "").strip().lower()
    if not chosen:
        return list(PUBSUB_PEER_KINDS)
    if chosen not in PUBSUB_PEER_KINDS:
        raise pytest.UsageError(
            f"{PUBSUB_PEER_ENV}={chosen!r}: expected one of {', '.join(PUBSUB_PEER_KINDS)}"
        )
    return [chosen]


def pubsub_emulator_launcher() -> str | None:
    """The emulator's launcher script, from its Debian package (or PATH)."""
    found = shutil.which("cloud-pubsub-emulator")
    if found:
        return found
    try:
        listing = subprocess.run(
            ["dpkg", "-L", "google-cloud-cli-pubsub-emulator"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in listing.splitlines():
        if line.endswith("bin/cloud-pubsub-emulator") and os.access(line, os.X_OK):
            return line
    return None


class PubSubEmulator:
    """Google's Pub/Sub emulator on 127.0.0.1:PORT, started directly and stopped by PID."""

    def __init__(self, launcher: str, workdir: Path) -> None:
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self._log_path = workdir / "pubsub-emulator.log"
        log = self._log_path.open("wb")
        self._proc = subprocess.Popen(
            [launcher, "--host=127.0.0.1", f"--port={self.port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"Server started, listening on" in self._log_path.read_bytes():
                return
            if self._proc.poll() is not None:
                break
            time.sleep(0.1)
        stop_process(self._proc)
        tail = self._log_path.read_text(errors="replace")[-2000:]
        unavailable(f"the Pub/Sub emulator did not start:\n{tail}")

    def close(self) -> None:
        stop_process(self._proc)


# --------------------------------------------------------------------------- BigQuery


class BigQueryEmulator:
    """``local-bigquery serve`` from its own venv (built once under .peers/), on loopback."""

    PROJECT = "test-project"

    def __init__(self) -> None:
        setup = REPO / "scripts" / "peers" / "bigquery_emulator.py"
        root = PEERS_DIR / "bigquery"
        result = subprocess.run(
            [sys.executable, str(setup), "ensure", "--root", str(root)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if result.returncode != 0:
            unavailable(f"BigQuery emulator setup failed:\n{result.stdout}\n{result.stderr}")
        venv_bin = Path(result.stdout.strip().splitlines()[-1])
        self.port = free_port()
        grpc_port = self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_host = f"127.0.0.1:{grpc_port}"
        self._data = PEERS_DIR / "bigquery" / "runs" / f"{os.getpid()}-{self.port}"
        self._data.mkdir(parents=True, exist_ok=True)
        self._log_path = self._data / "serve.log"
        log = self._log_path.open("wb")
        env = {**os.environ, "HOME": str(root / "home")}
        self._proc = subprocess.Popen(
            [
                str(venv_bin / "local-bigquery"),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--grpc-port",
                str(grpc_port),
                "--data-dir",
                str(self._data / "data"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(
                    f"{self.url}/bigquery/v2/projects/{self.PROJECT}/datasets", timeout=2
                ) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        stop_process(self._proc)
        tail = self._log_path.read_text(errors="replace")[-2000:]
        unavailable(f"local-bigquery did not become ready:\n{tail}")

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(
            project=self.PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.url},
        )

    def close(self) -> None:
        stop_process(self._proc)
        shutil.rmtree(self._data, ignore_errors=True)


# --------------------------------------------------------------------------- OTLP


def spans_of(requests: list[Any]) -> list[Any]:
    """Every span of some ``ExportTraceServiceRequest``s, in the order they came."""
    return [
        span
        for request in requests
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


class OtlpReceiver:
    """An in-process OTLP/gRPC TraceService on 127.0.0.1 that keeps every request it gets."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        receiver = self
        self.requests: list[Any] = []
        self.metadata: list[dict[str, str]] = []
        self.fail_with: Any = None  # a grpc.StatusCode to answer with, or None
        self.rejected_spans = 0
        self._lock = threading.Lock()

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with receiver._lock:
                    if receiver.fail_with is not None:
                        context.abort(receiver.fail_with, "refused by the test receiver")
                    receiver.requests.append(request)
                    receiver.metadata.append(dict(context.invocation_metadata()))
                    response = trace_service_pb2.ExportTraceServiceResponse()
                    if receiver.rejected_spans:
                        response.partial_success.rejected_spans = receiver.rejected_spans
                        response.partial_success.error_message = "rejected by the test receiver"
                    return response

        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix=PEER_THREAD_PREFIX)
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Servicer(), self._server
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def spans(self) -> list[Any]:
        with self._lock:
            return spans_of(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.metadata.clear()
            self.fail_with = None
            self.rejected_spans = 0

    def close(self) -> None:
        self._server.stop(grace=None).wait()


@contextlib.contextmanager
def env_var(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def closed_port() -> int:
    """A loopback port that was just free: connecting to it is refused."""
    return free_port()


class PhoenixReceiver:
    """Arize Phoenix (``phoenix serve``) from its own venv under .peers/, on loopback.

    A real OTLP receiver over gRPC and HTTP/protobuf; ``spans(trace_id)`` reads back
    what it stored through its REST API (``/v1/projects/default/spans``).
    """

    def __init__(self) -> None:
        setup = REPO / "scripts" / "peers" / "phoenix.py"
        root = PEERS_DIR / "phoenix"
        result = subprocess.run(
            [sys.executable, str(setup), "ensure", "--root", str(root)],
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
        if result.returncode != 0:
            unavailable(f"Phoenix setup failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        venv_bin = Path(result.stdout.strip().splitlines()[-1])
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self._work = PEERS_DIR / "phoenix" / "runs" / f"{os.getpid()}-{self.http_port}"
        self._work.mkdir(parents=True, exist_ok=True)
        self._log_path = self._work / "serve.log"
        log = self._log_path.open("wb")
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(self._work),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.http_port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }
        self._proc = subprocess.Popen(
            [str(venv_bin / "phoenix"), "serve"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self._proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    if response.status == 200 and wait_for_port(self.grpc_port, deadline):
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        stop_process(self._proc)
        tail = self._log_path.read_text(errors="replace")[-2000:]
        unavailable(f"Phoenix did not become ready:\n{tail}")

    def spans(self, trace_id: bytes, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The spans of ``trace_id`` Phoenix stored, once it has ``count`` (it ingests async)."""
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with urllib.request.urlopen(
                f"{self.url}/v1/projects/default/spans?limit=1000", timeout=10
            ) as response:
                data = json.loads(response.read())["data"]
            found = [s for s in data if s["context"]["trace_id"] == trace_id.hex()]
            if len(found) >= count:
                break
            time.sleep(0.2)
        return sorted(found, key=lambda s: s["attributes"].get("beam_agents.trace.index", -1))

    def close(self) -> None:
        stop_process(self._proc)
        shutil.rmtree(self._work, ignore_errors=True)


class OtlpHttpReceiver:
    """An in-process OTLP/HTTP receiver (``POST /v1/traces``, protobuf, gzip) on 127.0.0.1."""

    def __init__(self) -> None:
        import gzip
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        receiver = self
        self.requests: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.rejected_spans = 0
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver._lock:
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if receiver.status != 200:
                        self.send_response(receiver.status)
                        self.end_headers()
                        return
                    receiver.requests.append(
                        trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    )
                    response = trace_service_pb2.ExportTraceServiceResponse()
                    if receiver.rejected_spans:
                        response.partial_success.rejected_spans = receiver.rejected_spans
                        response.partial_success.error_message = "rejected by the test receiver"
                data = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"{PEER_THREAD_PREFIX}-otlp-http", daemon=True
        )
        self._thread.start()

    def spans(self) -> list[Any]:
        with self._lock:
            return spans_of(self.requests)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers.clear()
            self.status = 200
            self.rejected_spans = 0

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
