"""Benchmark: scanning a large trace stream for one key (not a test; prints numbers).

Writes a trace stream of 1,000,000 events over 10,000 keys (activations of
realistic shape, interleaved across keys as a sink writes them), then measures,
alternately and several times:

  (a) bare frame splitting, no parsing: ``iter_frames``;
  (b) ``read_trace_stream(..., entity_key=K)`` for one key.

It prints both rates (frames scanned per second), the ratio b/a (target
>= 0.7: the filter must cost little more than finding the frames), and the
peak RSS of (b) run alone in a fresh subprocess (target <= 64 MB: chunked
reads keep memory flat whatever the file size).

    .venv/bin/python bench/trace_scan.py [--out FILE] [--reuse] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from beam_agents._protos import TraceEvent
from beam_agents.trace_events import (
    ATTR_ACTIVATION_KIND,
    ATTR_ARGS_SHA256,
    ATTR_BILLED,
    ATTR_CACHE_HIT,
    ATTR_CACHE_KEY,
    ATTR_CALL_ORDINAL,
    ATTR_ENVELOPE_ID,
    ATTR_EVENT_TYPE,
    ATTR_INTENT_ID,
    ATTR_OUTCOME,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_SHA256,
    ATTR_STATE_SHA256,
    ATTR_TOOL_NAME,
    ATTR_TRIGGER,
    ATTR_USAGE_INPUT,
    ATTR_USAGE_OUTPUT,
    AttrValue,
    make_event,
    sha256_hex,
)
from beam_agents.trace_stream import iter_frames, read_trace_stream, write_trace_stream

EVENTS_PER_ACTIVATION = 10
RATIO_TARGET = 0.7
RSS_TARGET_MB = 64.0
K = TraceEvent.Kind


def key_name(i: int) -> bytes:
    return b"customer-%06d" % i


def activation_events(key: bytes, seq: int) -> list[TraceEvent]:
    """One activation's ten events: start, model calls, tool calls, an intent, end."""
    now = 1_734_000_000_000 + seq * 60_000
    tag = key + b"/%d" % seq
    plan: list[tuple[int, str, dict[str, AttrValue]]] = [
        (
            K.ACTIVATION_START,
            "activation",
            {
                ATTR_ACTIVATION_KIND: "start",
                ATTR_TRIGGER: "event",
                ATTR_ENVELOPE_ID: f"env-{seq:08d}",
                ATTR_EVENT_TYPE: "support.message",
            },
        )
    ]
    for ordinal in range(3):
        plan.append(
            (
                K.LLM_CALL,
                "chat",
                {
                    ATTR_CACHE_KEY: sha256_hex(tag + b"/llm%d" % ordinal)[:32],
                    ATTR_CACHE_HIT: False,
                    ATTR_BILLED: True,
                    ATTR_CALL_ORDINAL: ordinal,
                    ATTR_REQUEST_MODEL: "gpt-4o-mini",
                    ATTR_USAGE_INPUT: 812 + ordinal,
                    ATTR_USAGE_OUTPUT: 96,
                },
            )
        )
    for tool in ("lookup_order", "lookup_customer", "lookup_policy"):
        plan.append(
            (
                K.TOOL_CALL,
                tool,
                {ATTR_TOOL_NAME: tool, ATTR_ARGS_SHA256: sha256_hex(tag + tool.encode())[:32]},
            )
        )
    plan.append(
        (
            K.INTENT_STAGED,
            "issue_refund",
            {ATTR_INTENT_ID: f"it-{seq}-0", ATTR_TOOL_NAME: "issue_refund"},
        )
    )
    plan.append((K.LLM_CALL, "chat", {ATTR_RESPONSE_SHA256: sha256_hex(tag + b"/final")[:32]}))
    plan.append(
        (
            K.ACTIVATION_END,
            "activation",
            {ATTR_OUTCOME: "done", ATTR_STATE_SHA256: sha256_hex(tag + b"/state")[:32]},
        )
    )
    assert len(plan) == EVENTS_PER_ACTIVATION
    return [
        make_event(
            entity_key=key, seq=seq, index=i, kind=kind, name=name, now_ms=now, attributes=attrs
        )
        for i, (kind, name, attrs) in enumerate(plan)
    ]


def generate(n_events: int, n_keys: int) -> Iterator[TraceEvent]:
    """Activations round-robin over the keys, as a sink interleaves them."""
    keys = [key_name(i) for i in range(n_keys)]
    activations = n_events // EVENTS_PER_ACTIVATION
    for a in range(activations):
        yield from activation_events(keys[a % n_keys], a // n_keys)


def scan_frames(path: Path) -> int:
    n = 0
    for _ in iter_frames(path):
        n += 1
    return n


def scan_key(path: Path, key: bytes) -> int:
    n = 0
    for _ in read_trace_stream(path, entity_key=key):
        n += 1
    return n


# Linux charges a child with the resident size of the image it exec'ed over,
# that is the parent's (fork/vfork), so RUSAGE_CHILDREN read here, in a process
# that has just scanned 200 MB, would report this process's size. A tiny
# launcher interpreter starts the measured child and reads RUSAGE_CHILDREN.
_LAUNCHER = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], check=True)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)
_HWM = (
    "\nimport sys\n"
    "sys.stderr.write(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
)


def child_peak_rss_mb(code: str) -> tuple[float, float | None]:
    """Run ``code`` in a fresh interpreter; its peak RSS in MB (RUSAGE_CHILDREN, and VmHWM)."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, sys.executable, "-c", code + _HWM],
        check=True,
        capture_output=True,
        text=True,
    )
    hwm = float(done.stderr) / 1024 if done.stderr.strip().isdigit() else None
    return int(done.stdout) / 1024, hwm  # both in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where to write the stream (default: temp dir)")
    parser.add_argument("--reuse", action="store_true", help="reuse --out if it exists")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5, help="alternating runs of (a) and (b)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="trace-scan-") as tmp:
        path: Path = args.out or Path(tmp) / "traces.pb"
        if not (args.reuse and path.exists()):
            t0 = time.perf_counter()
            written = write_trace_stream(path, generate(args.events, args.keys))
            print(f"wrote {written:,} events in {time.perf_counter() - t0:.1f} s")
        size_mb = path.stat().st_size / 1e6
        total = scan_frames(path)  # also warms the page cache for both measurements
        print(f"stream: {path}  {size_mb:.1f} MB  {total:,} events  {args.keys:,} keys")
        print(f"        {path.stat().st_size / total:.0f} bytes per event on average")

        key = key_name(args.keys // 2)
        expected = args.events // args.keys
        rates_a: list[float] = []
        rates_b: list[float] = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            n = scan_frames(path)
            rates_a.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            found = scan_key(path, key)
            rates_b.append(total / (time.perf_counter() - t0))
            if found != expected:
                sys.exit(f"filter found {found} events of {key!r}, expected {expected}")

        a = statistics.median(rates_a)
        b = statistics.median(rates_b)
        print(
            f"(a) bare frame splitting (iter_frames): {a / 1e6:.2f} M frames/s (median of "
            f"{args.rounds}; runs: {', '.join(f'{r / 1e6:.2f}' for r in rates_a)})"
        )
        print(
            f"(b) filter to one key (read_trace_stream): {b / 1e6:.2f} M frames/s scanned "
            f"(median; runs: {', '.join(f'{r / 1e6:.2f}' for r in rates_b)}), "
            f"{expected} events found"
        )
        verdict = "ok" if b / a >= RATIO_TARGET else "MISSED"
        print(f"ratio b/a: {b / a:.2f}  (target >= {RATIO_TARGET}: {verdict})")

        setup = "from pathlib import Path; from beam_agents.trace_stream import read_trace_stream\n"
        baseline, _ = child_peak_rss_mb(setup)
        scan = (
            setup + f"n = sum(1 for _ in read_trace_stream(Path({str(path)!r}), "
            f"entity_key={key!r}))\nassert n == {expected}, n\n"
        )
        peak, hwm = child_peak_rss_mb(scan)
        verdict = "ok" if peak <= RSS_TARGET_MB else "MISSED"
        print(
            f"peak RSS of (b) in a fresh process: {peak:.1f} MB (VmHWM {hwm or 0:.1f} MB; "
            f"interpreter + imports alone: {baseline:.1f} MB; "
            f"target <= {RSS_TARGET_MB:.0f} MB: {verdict})"
        )


if __name__ == "__main__":
    main()
