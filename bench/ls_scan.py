"""Benchmark: ``ls`` over large trace streams, with and without ``--key`` (not a test).

For each size (default 100 MB and 1 GB) a stream of many keys' activations is written
under ``--dir`` (a fresh folder in /tmp by default, deleted afterwards; ``--keep`` keeps
it, and a stream already there is reused): ``KEYS`` keys, each with activations of a
start, model and tool calls, a staged intent and an end, in interleaved order as a sink
writes them. Then, side by side in one run:

  bare split   the frames counted by ``trace_stream.iter_frames`` in a child process
               (the floor: reading and splitting, nothing parsed);
  ls --key     the console script, the key given as text (resolved before the scan:
               only its frames are parsed); target <= 1.5x the bare split, <= 64 MB;
  ls           every key: linear in the activations (it was quadratic in keys): its
               seconds per 100 MB at each size, and the largest size's over the smallest's
               (target: about 1; quadratic would grow with the size).

Each runs in its own process; peak RSS from ``getrusage(RUSAGE_CHILDREN)`` of a
one-child wrapper. Prints seconds, MB, and the ratio to the bare split.

    .venv/bin/python bench/ls_scan.py [--sizes 100,1000] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from beam_agents._protos import TraceEvent
from beam_agents._wire import varint
from beam_agents.trace_events import serialize_trace_event

KEYS = 2000
MB = 1024 * 1024


def _activation(key: bytes, seq: int) -> list[bytes]:
    def event(index: int, kind: int, name: str, **attrs: str) -> bytes:
        ev = TraceEvent(entity_key=key, seq=seq, index=index, kind=kind, name=name)
        ev.start_ms = ev.end_ms = 1_734_000_000_000 + seq * 1000
        for k, v in attrs.items():
            ev.attributes[f"beam_agents.{k}"].string_value = v
        data = serialize_trace_event(ev)
        return varint(len(data)) + data

    digest = f"{seq:064x}"
    return [
        event(0, TraceEvent.ACTIVATION_START, "start", activation_kind="start",
              trigger="event", envelope_id=f"ev-{seq}", envelope_sha256=digest),
        event(1, TraceEvent.LLM_CALL, "bench-model", cache_key=digest, provider="bench"),
        event(2, TraceEvent.TOOL_CALL, "lookup", args_sha256=digest, result_sha256=digest),
        event(3, TraceEvent.INTENT_STAGED, "refund", intent_id=f"in-{seq}", args_sha256=digest),
        event(4, TraceEvent.ACTIVATION_END, "done", outputs_sha256=digest, memory_sha256=digest),
    ]  # fmt: skip


def write_stream(path: Path, size_mb: int) -> None:
    """About ``size_mb`` MB: activations of ``KEYS`` keys, round-robin."""
    target = size_mb * MB
    written = 0
    seq = 0
    with open(path.with_suffix(".tmp"), "wb") as out:
        while written < target:
            seq += 1
            batch = b"".join(
                frame for k in range(KEYS) for frame in _activation(f"key-{k:05d}".encode(), seq)
            )
            out.write(batch)
            written += len(batch)
    path.with_suffix(".tmp").rename(path)


_WRAPPER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(rss, dt, p.returncode)\n"
)


def measure(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak MB, exit code) of one child process."""
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[1]), int(out[0]) / 1024, int(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="stream sizes in MB")
    parser.add_argument("--dir", help="where the streams are written (default: a new /tmp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the streams afterwards")
    args = parser.parse_args()
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="beam-agents-bench-ls-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        run(folder, [int(s) for s in args.sizes.split(",")])
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


def run(folder: Path, sizes: list[int]) -> None:
    script = str(Path(sys.executable).parent / "beam-agents-replay")
    split = (
        "import sys; from beam_agents.trace_stream import iter_frames\n"
        "print(sum(1 for _ in iter_frames(sys.argv[1])))"
    )
    per_100mb: list[float] = []
    for size in sizes:
        path = folder / f"traces-{size}mb.pb"
        if not path.exists():
            write_stream(path, size)
        actual = path.stat().st_size / MB
        bare_s, bare_mb, _ = measure([sys.executable, "-c", split, str(path)])
        key_s, key_mb, key_code = measure(
            [script, "ls", "--traces", str(path), "--key", "key-00042"]
        )
        all_s, all_mb, all_code = measure([script, "ls", "--traces", str(path)])
        print(f"{actual:7.0f} MB stream, {KEYS} keys:")
        print(f"    bare frame split   {bare_s:7.2f} s  {bare_mb:6.0f} MB")
        print(
            f"    ls --key TEXT      {key_s:7.2f} s  {key_mb:6.0f} MB  ratio {key_s / bare_s:5.2f} "
            f"(target <= 1.50 and <= 64 MB)  exit {key_code}"
        )
        print(
            f"    ls (every key)     {all_s:7.2f} s  {all_mb:6.0f} MB  ratio {all_s / bare_s:5.2f} "
            f"(linear in activations)  exit {all_code}"
        )
        per_100mb.append(all_s / actual * 100)
    if len(per_100mb) > 1:
        growth = per_100mb[-1] / per_100mb[0]
        print(
            "ls (every key), seconds per 100 MB: "
            + ", ".join(f"{s} MB {t:.2f} s" for s, t in zip(sizes, per_100mb, strict=True))
            + f";  {sizes[-1]} MB over {sizes[0]} MB: {growth:.2f} (target: about 1, linear)"
        )


if __name__ == "__main__":
    main()
