"""Write ``fuzz/corpus/``: valid inputs and every hostile input of the issue-14 review.

    .venv/bin/python fuzz/make_corpus.py

Deterministic; the files are committed. ``tests/test_fuzz_corpus.py`` runs every
target on every file (a regression test per input), and ``fuzz/run.py`` starts
its mutations from them. Findings of later fuzz runs are added here by hand,
named after what they hold.
"""

from __future__ import annotations

import json
import sys

import replay_agents as ra
import targets
from replay_harness import KEY, T0, KeyHistory

from beam_agents._protos import StateSnapshot, TraceEvent
from beam_agents.bigquery_rows import trace_event_to_row
from beam_agents.blobs import encode_blob
from beam_agents.testing import event_envelope


def main() -> None:
    history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    event = event_envelope(KEY, "ask", b"where is A1?", time_ms=T0)
    history.send(event)
    snapshot = history.export()
    traces = history.trace_bytes()
    files: dict[str, dict[str, bytes]] = {name: {} for name in targets.TARGETS}

    files["snapshot"]["valid.pb"] = snapshot
    for name, body in {
        "memory-1e999": b'{"x": 1e999}',
        "memory-lone-surrogate": b'{"x": "\\ud800"}',
        "memory-lone-surrogate-key": b'{"\\udc00": 1}',
        "memory-nested-300": b'{"x": ' + b"[" * 300 + b"]" * 300 + b"}",
        "memory-nested-5000": b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "memory-5000-digit-int": b'{"x": ' + b"9" * 5000 + b"}",
    }.items():
        bad = StateSnapshot.FromString(snapshot)
        bad.memory = encode_blob("memory", body)
        files["snapshot"][f"{name}.pb"] = bad.SerializeToString()

    files["trace"]["valid.pb"] = traces
    bomb = [TraceEvent.FromString(e.SerializeToString()) for e in history.trace]
    bomb[-1].index = 4294967295
    files["trace"]["index-4294967295.pb"] = history.trace_bytes(bomb)
    wide = [TraceEvent.FromString(e.SerializeToString()) for e in history.trace]
    for i in range(5000):
        wide[0].attributes[f"x.{i}"].int_value = i
    files["trace"]["attributes-5000.pb"] = history.trace_bytes(wide)
    files["trace"]["truncated.pb"] = traces[: len(traces) // 2]

    files["event"]["valid.pb"] = event.SerializeToString()
    files["event"]["no-body.pb"] = b""

    rows = [trace_event_to_row(e) for e in history.trace]
    row = rows[1]
    files["rows"]["valid.json"] = json.dumps(rows).encode()
    files["rows"]["valid.ndjson"] = "\n".join(json.dumps(r) for r in rows).encode()
    deep = json.dumps([{**row, "name": None}]).replace("null", "[" * 100_000 + "]" * 100_000)
    files["rows"]["nested-100000.json"] = deep.encode()
    files["rows"]["int-5000-digits.json"] = (
        json.dumps([{**row, "seq": 1}]).replace('"seq": 1', '"seq": ' + "9" * 5000).encode()
    )
    floaty = {**row, "attributes": [{"name": "x", "value_type": "double_value", "double_value": 1}]}
    files["rows"]["float64-10e400.json"] = (
        json.dumps([floaty]).replace('"double_value": 1', f'"double_value": {10**400}').encode()
    )
    files["rows"]["lone-surrogate.json"] = json.dumps([{**row, "name": "\ud800"}]).encode()

    files["cli"]["valid.bin"] = targets.cli_input(snapshot, traces, event.SerializeToString())
    files["cli"]["index-4294967295.bin"] = targets.cli_input(
        snapshot, files["trace"]["index-4294967295.pb"], event.SerializeToString()
    )
    files["cli"]["memory-1e999.bin"] = targets.cli_input(
        files["snapshot"]["memory-1e999.pb"], traces, event.SerializeToString()
    )

    for target, named in files.items():
        directory = targets.CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in named.items():
            (directory / name).write_bytes(data)
    print(f"wrote {sum(len(n) for n in files.values())} files under {targets.CORPUS}", file=sys.stderr)


if __name__ == "__main__":
    main()
