"""The doctor on its corpus (tests/doctor/agents): exactly one finding per ``# doctor: CAUSE``
marker, at its file and line, with the cause the marker names; none on the clean agents.

Each agent runs the same script (two keys, two messages each) through the real doctor:
the pipeline's per-key step in a worker process, then every activation replayed under
every condition. The read-only tool that asks a service talks to a real HTTP server on
loopback, started here.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from beam_agents.doctor import Cause, diagnose

AGENTS = Path(__file__).parent / "agents"
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = {
    "steps": [
        {"key": "customer-a", "event": "message", "payload": "A-1001"},
        {"key": "customer-b", "event": "message", "payload": "B-2002"},
        {"key": "customer-a", "event": "message", "payload": "A-1001 again"},
        {"key": "customer-b", "event": "message", "payload": "B-2002 again"},
    ]
}
MARKER = re.compile(r"#\s*doctor:\s*([a-z-]+)")


def expected(name: str) -> set[tuple[Cause, str, int]]:
    path = AGENTS / f"{name}.py"
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = MARKER.search(line)
        if match:
            found.add((Cause(match.group(1)), str(path.relative_to(ROOT)), number))
    return found


@pytest.fixture(scope="module")
def order_service() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "shipped", "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run(name: str) -> object:
    return diagnose(
        agent=f"tests.doctor.agents.{name}:AGENT",
        registry=f"tests.doctor.agents.{name}:TOOLS",
        script=SCRIPT,
        provider="tests.doctor.agents.common:make_provider",
        jobs=2,
    )


@pytest.mark.parametrize(
    "name",
    ["clock", "randomness", "hash_order", "environment", "files", "module_state", "own_memory"],
)
def test_each_cause_is_found_at_its_line(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    report = run(name)
    found = {(f.cause, f.file, f.line) for f in report.findings}
    assert found == expected(name), report.render()
    assert report.exit_code == 1
    for finding in report.findings:
        assert finding.evidence and finding.remedy and finding.consequence.text


def test_a_plain_tool_reading_a_service_is_found_and_its_replays_are_irreproducible(
    order_service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("DOCTOR_CORPUS_SERVICE", order_service)
    report = run("unrecorded")
    found = {(f.cause, f.file, f.line) for f in report.findings}
    assert found == expected("unrecorded"), report.render()
    (finding,) = report.findings
    assert finding.tool == "order_status" and "127.0.0.1" in finding.what
    assert finding.consequence.exit_code == 3, finding.consequence


def test_the_clean_agent_has_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    report = run("clean")
    assert report.findings == (), report.render()
    assert report.exit_code == 0
    assert all(
        verdict == "reproduced" for a in report.activations for verdict in a["replays"].values()
    )
    assert len(report.activations) == 4


def test_the_markers_are_where_the_corpus_says() -> None:
    # The corpus itself: one marker per faulty agent, none in the clean one.
    for name in ("clock", "randomness", "hash_order", "environment", "files", "module_state",
                 "own_memory", "unrecorded"):  # fmt: skip
        assert len(expected(name)) == 1, name
    assert expected("clean") == set()
    assert os.path.isfile(AGENTS / "faq.txt")
