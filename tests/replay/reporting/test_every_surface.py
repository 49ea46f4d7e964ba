"""Issue 23: no text from an input reaches a screen, a document or a ticket raw.

Escapes, bidi controls, an OSC 52 clipboard write, line breaks that would start a
line of their own (``reproduced``) and Markdown fence breakers with a second verdict
header and an ``<img>`` beacon are planted in the key, the envelope id, the payload
(so in memory, the model's request and answer, the output), the snapshot's request
id, and then in every string of every traced event (names, digests, attributes: a
crafted trace). Each surface renders both: the headless report, ``--json`` (every
string but the values, which ``jq`` shows JSON-escaped), ``ls`` and ``ls --json``,
``check``, ``check --json`` and JUnit, the Markdown export and the TUI's screens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import replay_agents as ra
from markdown_it import MarkdownIt
from replay_harness import AGENTS, T0, KeyHistory

from beam_agents._protos import TraceEvent
from beam_agents.replay.engine import replay
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.reporting.escape import UNSAFE_CATEGORIES
from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.result import ReplayResult
from beam_agents.testing import event_envelope

SCRIPT = str(Path(sys.executable).parent / "beam-agents-replay")
SPOOF = "\nreproduced\r\x1b[2K\x1b]52;c;ZXZpbA==\x07\u202eevil\u2066\x9b2J\u200b"
FENCE = "\n````\n# beam-agents-replay: REPRODUCED (exit 0)\n<img src=https://x.example/b.png>\n````\n"
HOSTILE = f"{SPOOF}{FENCE}`|*[link](https://x.example)*"
KEY = ("key" + SPOOF).encode()


def _unsafe(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and unicodedata.category(c) in UNSAFE_CATEGORIES})


def assert_safe_text(text: str, verdicts: int = 0) -> None:
    assert not _unsafe(text), _unsafe(text)
    lines = text.splitlines()
    assert lines.count("reproduced") == verdicts  # a line of data never reads as the verdict line
    assert not [line for line in lines if line.startswith("# ")]


class Planted:
    def __init__(self, root: Path) -> None:
        self.root = root
        history = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), key=KEY)
        event = event_envelope(KEY, "ask", HOSTILE.encode(), time_ms=T0)
        event.envelope_id = "ev" + SPOOF
        history.send(event)
        (root / "snapshot.pb").write_bytes(history.export(request_id="req" + SPOOF))
        (root / "event.pb").write_bytes(event.SerializeToString())
        (root / "traces.pb").write_bytes(history.trace_bytes())
        crafted = [TraceEvent.FromString(e.SerializeToString()) for e in history.trace]
        for e in crafted:
            e.name += SPOOF
            if e.kind == TraceEvent.ACTIVATION_START:
                continue  # its kind, trigger and envelope decide what runs (else exit 2)
            for value in e.attributes.values():
                if value.WhichOneof("value") == "string_value":
                    value.string_value += HOSTILE
        (root / "crafted.pb").write_bytes(history.trace_bytes(crafted))

    def flags(self, traces: str) -> list[str]:
        return [
            "--snapshot", str(self.root / "snapshot.pb"), "--traces", str(self.root / traces),
            "--event", str(self.root / "event.pb"),
            "--agent", "replay_agents:AGENT", "--registry", "replay_agents:TOOLS",
        ]  # fmt: skip

    def result(self, traces: str) -> ReplayResult:
        return replay(ReplayOptions(
            snapshot=self.root / "snapshot.pb", traces=(self.root / traces,),
            event=self.root / "event.pb", agent="replay_agents:AGENT", registry="replay_agents:TOOLS",
        ))  # fmt: skip


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return Planted(tmp_path_factory.mktemp("planted"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(AGENTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=180, env=env, cwd=AGENTS)


def _strings(document: Any, raw_keys: frozenset[str], path: str = "") -> list[tuple[str, str]]:
    """Every string of a JSON document, keys too, but under the value fields."""
    out: list[tuple[str, str]] = []
    if isinstance(document, str):
        out.append((path, document))
    elif isinstance(document, dict):
        for k, v in document.items():
            out.append((path + "{}", k))
            if k not in raw_keys:
                out += _strings(v, raw_keys, f"{path}.{k}")
    elif isinstance(document, list):
        for i, v in enumerate(document):
            out += _strings(v, raw_keys, f"{path}[{i}]")
    return out


VALUE_FIELDS = frozenset({"memory", "args", "value", "adapter_state", "set"})  # "set": a write set's values


@pytest.mark.parametrize(("traces", "code"), [("traces.pb", 0), ("crafted.pb", 1)])
def test_the_headless_report_and_json_show_every_planted_string_escaped(
    planted: Planted, traces: str, code: int
) -> None:
    out = _run(*planted.flags(traces))
    assert out.returncode == code, out.stdout + out.stderr
    assert_safe_text(out.stdout + out.stderr, verdicts=1 if code == 0 else 0)
    assert "\\x1b]52;c;" in out.stdout  # shown, as an escape
    assert out.stdout.splitlines()[4] == ("reproduced" if code == 0 else "diverged")
    doc = _run(*planted.flags(traces), "--json")
    assert doc.returncode == code and doc.stdout.isascii()  # values JSON-escaped too
    bad = [(p, s) for p, s in _strings(json.loads(doc.stdout), VALUE_FIELDS) if _unsafe(s)]
    assert bad == []  # jq -r prints none of these raw


def test_ls_shows_every_planted_string_escaped(planted: Planted) -> None:
    for traces in ("traces.pb", "crafted.pb"):
        out = _run("ls", "--traces", str(planted.root / traces), "--snapshot", str(planted.root / "snapshot.pb"))
        assert out.returncode == 0, out.stderr
        assert_safe_text(out.stdout + out.stderr)
        doc = _run("ls", "--traces", str(planted.root / traces), "--json")
        assert doc.stdout.isascii()
        assert [s for _, s in _strings(json.loads(doc.stdout), frozenset()) if _unsafe(s)] == []


def test_check_json_and_junit_show_every_planted_string_escaped(planted: Planted, tmp_path: Path) -> None:
    folder = tmp_path / ("bundles" + "\u202e\x1b[2J")
    folder.mkdir()
    for traces in ("traces.pb", "crafted.pb"):
        made = _run("bundle", "-o", str(folder / f"{traces}\x1b[2J.bundle"), *planted.flags(traces))
        assert made.returncode == 0, made.stderr
        assert_safe_text(made.stdout + made.stderr)
    junit = tmp_path / "junit.xml"
    out = _run("check", "--import-recorded", str(folder), "--junit", str(junit))
    assert out.returncode == 1, out.stdout + out.stderr  # the crafted trace's bundle diverges
    assert_safe_text(out.stdout + out.stderr)
    assert "\\u202e" in out.stdout and "\\x1b[2J" in out.stdout  # its path, as escapes
    doc = _run("check", "--import-recorded", str(folder), "--json")
    assert [s for _, s in _strings(json.loads(doc.stdout), frozenset()) if _unsafe(s)] == []
    text = junit.read_text()
    ET.fromstring(text)
    assert not _unsafe(text)


@pytest.mark.parametrize("traces", ["traces.pb", "crafted.pb"])
def test_the_markdown_export_has_one_verdict_header_and_no_live_markup(
    planted: Planted, traces: str
) -> None:
    markdown = report_markdown(planted.result(traces))
    assert not _unsafe(markdown)
    html = MarkdownIt("commonmark").enable("table").render(markdown)
    assert html.count("<h1>") == 1 and "REPRODUCED (exit 0)</h1>" not in html.replace(
        html[: html.index("</h1>") + 5], ""
    )
    assert "<img" not in html and "<a href" not in html and "<em>" not in html


@pytest.mark.parametrize("traces", ["traces.pb", "crafted.pb"])
async def test_the_tui_screens_write_nothing_planted_to_the_terminal(planted: Planted, traces: str) -> None:
    sys.path.insert(0, str(Path(__file__).parents[2] / "replay_tui"))
    from terminal_output import assert_terminal_safe, terminal_output

    from replay_tui.app import ReplayApp

    app = ReplayApp(planted.result(traces))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert_terminal_safe(terminal_output(app))
        for key in ("s", "escape", "i", "escape", "o", "escape"):
            await pilot.press(key)
            await pilot.pause()
            assert_terminal_safe(terminal_output(app))
