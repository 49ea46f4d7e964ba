"""Issue 28's numbers, side by side in one run: the operator's install, the CLI's import time,
and otlp:// throughput of the SDK-based sink vs the hand-built one it replaced.

1. Install footprint: the built wheel in a fresh venv with only the operator's
   dependencies (``pip install beam-agents``), vs the same wheel with the extras that
   hold what every install got before them (``BEFORE_EXTRAS``: Beam, Kafka, Pub/Sub,
   BigQuery, OpenTelemetry were hard dependencies; the model SDKs were not). Size on disk and file count of each venv's site-packages.
2. ``import beam_agents.cli`` in the operator's venv vs in the full one: median wall
   time of a fresh interpreter (``python -c 'import beam_agents.cli'``), bare Python
   subtracted, and what each imported of Beam/Kafka/GCP/OTel.
3. otlp:// spans/s: the SDK-based writer of this tree vs the hand-built writer of
   ``HAND_BUILT_COMMIT`` (loaded from git), each exporting the same events to one
   in-process OTLP/gRPC receiver, alternating rounds.
4. What the telemetry side channel costs an activation: the per-key step (Beam-free,
   tests/core_agents.py's agent) plain vs measured as the DoFn measures it (inside
   ``measure_activation``, then the telemetry encoded and the batch's seq read),
   alternating rounds.

Run: ``.venv/bin/python bench/ecosystem.py`` (a few minutes: it builds two venvs).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BEFORE_EXTRAS = "pipeline,kafka,pubsub,bigquery,otlp"
HAND_BUILT_COMMIT = "0bd1c7f"
"""The last commit whose otlp:// sink built OTLP requests by hand (before the SDK)."""


def _site_packages(venv: Path) -> Path:
    [site] = (venv / "lib").glob("python3*/site-packages")
    return site


def _footprint(path: Path) -> tuple[int, int]:
    size = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                size += os.path.getsize(full)
                files += 1
    return size, files


def _venv(where: Path, wheel: Path, extra: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    target = f"{wheel}[{extra}]" if extra else str(wheel)
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", target], check=True
    )
    return where


def _import_ms(python: Path, code: str, rounds: int = 7) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([str(python), "-c", code], check=True, cwd="/")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


HEAVY = ("apache_beam", "confluent_kafka", "google.cloud", "opentelemetry", "grpc")


def install_and_import(tmp: Path) -> None:
    dist = tmp / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",  # the sdist, then the wheel from it: nothing is built inside the tree
            "--no-isolation",
            "--outdir",
            str(dist),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("*.whl")
    operator = _venv(tmp / "operator", wheel, "")
    full = _venv(tmp / "full", wheel, BEFORE_EXTRAS)
    print("1. install footprint (site-packages of a fresh venv)")
    rows = []
    for name, venv in (
        ("operator (pip install beam-agents)", operator),
        ("before: every integration", full),
    ):
        size, files = _footprint(_site_packages(venv))
        rows.append((name, size, files))
        print(f"   {name:40s} {size / 1e6:8.1f} MB  {files:7d} files")
    print(
        f"   operator / before: {rows[0][1] / rows[1][1]:.3f} of the size, "
        f"{rows[0][2] / rows[1][2]:.3f} of the files"
    )
    print("2. import beam_agents.cli (median of 7 fresh interpreters, bare python subtracted)")
    check = f"import sys, beam_agents.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    for name, venv in (("operator", operator), ("before: every integration", full)):
        python = venv / "bin" / "python"
        bare = _import_ms(python, "pass")
        cli = _import_ms(python, "import beam_agents.cli")
        loaded = subprocess.run(
            [str(python), "-c", check], capture_output=True, text=True, check=True, cwd="/"
        ).stdout.strip()
        print(f"   {name:40s} {cli - bare:7.1f} ms   heavy modules loaded: {loaded}")


def _old_writer_class() -> Any:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{HAND_BUILT_COMMIT}:beam_agents/sinks/otlp.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "otlp_hand_built.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("otlp_hand_built", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OtlpSinkWriter


def otlp_throughput() -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    from beam_agents.sinks.otlp import OtlpSinkWriter
    from beam_agents.sinks.uri import parse_sink_uri
    from tests.sinks.records import activation_events

    received = [0]

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            received[0] += sum(
                len(s.spans) for rs in request.resource_spans for s in rs.scope_spans
            )
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sink = parse_sink_uri(f"otlp://127.0.0.1:{port}", role="traces")
    events = [e for seq in range(400) for e in activation_events(b"customer-%d" % seq, seq)]
    writers = {"SDK exporter (now)": OtlpSinkWriter, "hand-built (before)": _old_writer_class()}
    rates: dict[str, list[float]] = {name: [] for name in writers}
    for _ in range(5):
        for name, cls in writers.items():
            writer = cls(sink, role="traces", options={"timeout_s": "30"})
            writer.open()
            started = time.perf_counter()
            for event in events:
                writer.write_trace(event)
            writer.flush()
            rates[name].append(len(events) / (time.perf_counter() - started))
            writer.close()
    server.stop(None)
    print(f"3. otlp:// throughput, {len(events)} spans per flush, 5 alternating rounds (median)")
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, rate in medians.items():
        print(f"   {name:40s} {rate:10.0f} spans/s")
    now, before = medians.values()
    print(f"   SDK / hand-built: {now / before:.2f}")
    assert received[0] == 5 * 2 * len(events)


def telemetry_cost(activations: int = 3000) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from core_agents import AGENT, TOOLS, make_provider

    from beam_agents import AgentConfig
    from beam_agents._protos import TraceEvent
    from beam_agents.key_step import Emit
    from beam_agents.telemetry import measure_activation
    from beam_agents.testing import PipelineKey, event_envelope

    config = AgentConfig(provider_factory=make_provider)

    def run(measured: bool) -> float:
        keys = [
            PipelineKey(AGENT, TOOLS, config, entity_key=b"customer-%d" % i) for i in range(100)
        ]
        envelopes = [
            event_envelope(keys[i % 100].entity_key, "msg", b"where is A1?", time_ms=1_000 + i)
            for i in range(activations)
        ]
        started = time.perf_counter()
        for i, envelope in enumerate(envelopes):
            key = keys[i % 100]
            if measured:
                with measure_activation(agent_name="SupportAgent", provider_name="p") as m:
                    result = key.send(envelope)
                for _, events in result.of(Emit.TRACE_BATCHES):
                    TraceEvent.FromString(events[0])
                    m.encode()
            else:
                key.send(envelope)
        return (time.perf_counter() - started) / activations * 1e6

    times: dict[str, list[float]] = {"plain": [], "measured": []}
    for _ in range(5):
        times["plain"].append(run(False))
        times["measured"].append(run(True))
    plain, measured = min(times["plain"]), min(times["measured"])
    print(f"4. telemetry side channel, {activations} activations (fastest of 5 alternating runs)")
    print(f"   plain per-key step                       {plain:8.1f} us/activation")
    print(f"   measured as the DoFn measures            {measured:8.1f} us/activation")
    print(f"   measured / plain: {measured / plain:.3f}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        install_and_import(Path(tmp))
    otlp_throughput()
    telemetry_cost()


if __name__ == "__main__":
    main()
