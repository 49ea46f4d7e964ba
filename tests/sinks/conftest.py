"""Session-scoped real peers for the sink tests, each started on first use and stopped at the end.

Nothing needs to be set up beforehand: ``make test`` on a fresh machine builds
the BigQuery emulator's venv under ``.peers/`` the first time (about a
minute), and reuses it afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from .peers import (
    PEER_THREAD_PREFIX,
    BigQueryEmulator,
    KafkaMockCluster,
    OtlpReceiver,
    PubSubEmulator,
    pubsub_emulator_launcher,
)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaMockCluster]:
    cluster = KafkaMockCluster()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PubSubEmulator]:
    launcher = pubsub_emulator_launcher()
    if launcher is None:
        # Google's emulator is a Debian package of this machine image; where it
        # is missing the Pub/Sub tests skip (also under CI: issue 4 requires
        # Kafka, BigQuery and OTLP there, and Pub/Sub "when present").
        pytest.skip(
            "Google's Pub/Sub emulator is not installed "
            "(Debian package google-cloud-cli-pubsub-emulator)"
        )
    emulator = PubSubEmulator(launcher, tmp_path_factory.mktemp("pubsub-emulator"))
    try:
        yield emulator
    finally:
        emulator.close()


@pytest.fixture(scope="session")
def bigquery_emulator() -> Iterator[BigQueryEmulator]:
    emulator = BigQueryEmulator()
    try:
        yield emulator
    finally:
        emulator.close()


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


@pytest.fixture
def otlp(otlp_receiver: OtlpReceiver) -> Iterator[OtlpReceiver]:
    """The session's OTLP receiver, emptied and answering normally for this test."""
    otlp_receiver.reset()
    yield otlp_receiver
    otlp_receiver.reset()


@pytest.fixture(autouse=True)
def no_client_thread_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a client thread running after its writer was closed.

    A sink must not leave work behind a closed writer (a retry loop, a
    publisher thread): it would deliver records after the bundle failed, and
    in this suite it would run into later tests (a thread drawing on
    ``random`` breaks Hypothesis's determinism check there). A module whose
    tests run a Beam runner (which keeps job-service threads of its own) sets
    ``RUNS_BEAM = True`` to opt out.
    """
    before = set(threading.enumerate())
    yield
    if getattr(request.module, "RUNS_BEAM", False):
        return
    deadline = time.monotonic() + 10
    while True:
        left = [
            t
            for t in set(threading.enumerate()) - before
            if t.is_alive() and not t.name.startswith(PEER_THREAD_PREFIX)
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"threads still running after the test: {sorted(t.name for t in left)}"
