"""``ls`` at scale and for the operator (issue 27): a text key resolved before the scan, a
time column, versioned JSON, progress on a terminal; the CLI's words around it."""

from __future__ import annotations

import io
import json

import pytest
import replay_agents as ra
from replay_harness import KEY, T0, KeyHistory

from beam_agents._wire import varint
from beam_agents.cli import main
from beam_agents.replay.incidents import listing as ls
from beam_agents.testing import event_envelope

OTHER = b"customer-other"


def _traces() -> bytes:
    a = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    a.send(event_envelope(KEY, "ask", b"hi", time_ms=T0))
    b = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), key=OTHER)
    b.send(event_envelope(OTHER, "ask", b"hi", time_ms=T0))
    return a.trace_bytes() + b.trace_bytes()


def test_a_text_key_is_resolved_before_the_scan_so_other_keys_are_not_parsed() -> None:
    """Resolved after the scan, every key was parsed and summarized (46 s and 1.7 GB on
    1 GB): a frame of another key that does not parse proves it is no longer read."""
    bad = b"\x0a" + varint(len(OTHER)) + OTHER + b"\xff\xff\xff"  # another key's, corrupt
    traces = _traces() + varint(len(bad)) + bad
    with pytest.raises(Exception, match="not a TraceEvent"):
        ls.list_activations([traces])  # every key: the corrupt frame is read
    listing = ls.list_activations([traces], key=KEY.decode())
    assert {r.entity_key for r in listing.rows} == {KEY}


def test_the_table_says_when_each_activation_ran_in_utc_and_how_long_ago() -> None:
    listing = ls.list_activations([_traces()])
    text = ls.render_listing(listing, now_ms=T0 + 3 * 3_600_000 + 12 * 60_000)
    assert "at (UTC)" in text and "ago" in text
    assert "2024-12-12 10:40:00  3h 12m ago" in text or "3h 12m ago" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    assert "3h 12m ago" in row


def test_the_json_documents_are_versioned_and_one_row_per_line() -> None:
    listing = ls.list_activations([_traces()])
    out = io.StringIO()
    ls.write_listing_json(listing, out)
    document = json.loads(out.getvalue())
    assert document["schema"] == ls.LS_JSON_SCHEMA == "beam-agents-replay-ls/1"
    assert document == json.loads(json.dumps(ls.listing_json(listing)))
    assert document["rows"][0]["at_utc"] == "2024-12-12 10:40:00"
    rows = [line for line in out.getvalue().splitlines() if line.startswith('    {"entity_key"')]
    assert len(rows) == len(listing.rows) == 2


def test_the_table_is_built_per_key_not_by_filtering_every_row_for_each_key() -> None:
    """Rendering read every row once per key (quadratic: 14 min 41 s on 1 GB)."""
    listing = ls.list_activations([_traces()])
    reads = 0
    rows = listing.rows

    class Counting(type(rows)):  # type: ignore[misc]
        def __iter__(self):  # type: ignore[no-untyped-def]
            nonlocal reads
            for row in super().__iter__():
                reads += 1
                yield row

    counted = Counting(rows._build, len(rows))  # type: ignore[attr-defined]
    lines = list(ls.listing_lines(ls.Listing(rows=counted, key_counts=listing.key_counts)))
    assert reads == len(rows) and len(lines) == 2 * len(listing.key_counts) + len(rows) + 1


def test_progress_shows_on_a_terminal_and_is_erased(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from beam_agents.cli import progress

    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    seen: list[int] = []
    stream = io.StringIO()
    with progress.Progress("ls", "trace events read", stream) as shown:
        for n in (1, 2, 3):
            shown(n)
            seen.append(n)
    text = stream.getvalue()
    assert "ls: 1 trace events read" in text and text.endswith("\r\x1b[K")
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    quiet = io.StringIO()
    with progress.Progress("ls", "x", quiet) as shown:
        shown(1)
    assert quiet.getvalue() == ""


def test_check_help_has_its_exit_codes_and_v_prints_the_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "  2  error" in out and "  1  diverged" in out
    assert main(["-V"]) == 0
    assert capsys.readouterr().out.startswith("beam-agents-replay ")


def test_help_points_at_documentation_that_exists(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from beam_agents.cli import docs

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    path = out.rsplit("the --json schema: ", 1)[1].split()[0]
    assert Path(path).is_file(), path
    assert docs._online("replay.md").endswith("/docs/replay.md")


def test_check_of_a_missing_path_prints_no_placeholder(
    tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", "--jobs", "1", str(tmp_path) + "/nosuchdir"])  # type: ignore[operator]
    out = capsys.readouterr().out
    assert code == 2 and "FILE" not in out and "cannot read the bundle" in out, out
