"""Every code point class the one escaper handles, fed through every human-facing surface.

The surfaces: the headless report (stdout, including the ``traced cache key:``
and ``nearest entry:`` lines) and its error paragraph (stderr), the Markdown
export, and the TUI's renderers (header, verdict banner, timeline rows, detail
pane with the divergence and the cache miss, memory tree, intents, payloads).
A hostile string holding one character of every class sits in every string the
result carries; no surface may let one of them through raw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import tui_results
from hostile_text import CLASSES, EVERY_HOSTILE, assert_no_hostile, visible_escape
from rich.text import Text

from beam_agents.replay.reporting.markdown import report_markdown
from beam_agents.replay.reporting.text import render_error, render_report
from beam_agents.replay.result import CacheMiss, FieldDiff, NearestEntry, ReplayResult
from replay_tui.render import detail, header, state, timeline

HOSTILE = f"[bold]x[/] {EVERY_HOSTILE} end"
# A protobuf string cannot hold a lone surrogate: trace events carry the rest.
HOSTILE_PB = "".join(c for c in HOSTILE if not 0xD800 <= ord(c) <= 0xDFFF)


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> ReplayResult:
    monkeypatch.setattr(tui_results, "INJECTION", HOSTILE_PB)
    result = tui_results.injection_result()
    assert result.state is not None and result.first_divergence is not None
    return dataclasses.replace(
        result,
        reason=HOSTILE,
        error=HOSTILE,
        first_divergence=dataclasses.replace(
            result.first_divergence,
            name=HOSTILE,
            kind=HOSTILE,
            detail=HOSTILE,
            fields=(FieldDiff(path=HOSTILE, traced=HOSTILE, replayed=HOSTILE),),
        ),
        intents=tuple(dataclasses.replace(row, intent_id=HOSTILE, tool=HOSTILE) for row in result.intents),
        state=dataclasses.replace(result.state, memory={HOSTILE: [HOSTILE, {"k": HOSTILE}]}),
        cache_miss=CacheMiss(
            event_index=1,
            cache_key=HOSTILE,
            model=HOSTILE,
            status=HOSTILE,
            traced_cache_key=HOSTILE,
            nearest=NearestEntry(cache_key=HOSTILE, model=HOSTILE, differences=(HOSTILE,)),
        ),
        network_attempts=(HOSTILE,),
        header=dataclasses.replace(
            result.header,
            hitl_policy=HOSTILE,
            hitl_source=HOSTILE,
            trigger=HOSTILE,
            envelope_id=HOSTILE,
            continuation_source=HOSTILE,
            provider=HOSTILE,
            snapshot_request_id=HOSTILE,
            migrations_applied=(HOSTILE,),
            kind=HOSTILE,
            agent_path=HOSTILE,
            registry_path=HOSTILE,
        ),
    )


def _assert_every_class_visible(text: str) -> None:
    assert_no_hostile(text)
    for name, chars in CLASSES.items():
        for char in chars:
            if char != "\n":
                assert visible_escape(char) in text, (name, f"U+{ord(char):04X}")


def test_headless_report(hostile: ReplayResult) -> None:
    text = render_report(hostile)
    _assert_every_class_visible(text)
    for label in ("traced cache key:", "nearest entry:", "cache key:", "network blocked:"):
        line = next(line for line in text.splitlines() if line.strip().startswith(label))
        assert "\\x1b" in line and "\\u202e" in line and "\\U000e0041" in line, line


def test_headless_error(hostile: ReplayResult) -> None:
    error = tui_results.usage_error_result(message=HOSTILE)
    _assert_every_class_visible(render_error(error))


def test_markdown_export(hostile: ReplayResult) -> None:
    _assert_every_class_visible(report_markdown(hostile))


def _tree_labels(node: state.JsonNode) -> Iterator[Text]:
    yield node.label
    for child in node.children or ():
        yield from _tree_labels(child)


def test_tui_renderers(hostile: ReplayResult) -> None:
    texts: list[Text] = list(header.header_lines(hostile.header))
    texts.append(header.verdict_banner(hostile))
    texts.append(header.styled_key(HOSTILE.encode("utf-8", "surrogatepass")))
    for row in timeline.build_rows(hostile):
        texts.append(timeline.render_row(row, 400))
    for pair in hostile.events:
        texts += detail.detail_lines(hostile, pair, 4000)
    assert hostile.state is not None
    texts += list(_tree_labels(state.json_tree(hostile.state.memory)))
    for row in state.intent_rows(hostile.intents):
        texts += list(row)
    for row in state.output_rows(hostile):
        texts += list(row)
    assert hostile.memory is not None
    texts.append(state.payload_as_text(hostile.memory))
    plain = "\n".join(t.plain for t in texts)
    # Divergence, cache miss, memory tree: each shows every class as an escape.
    _assert_every_class_visible(plain)
    assert "[bold]x[/]" in plain, "markup in the input was interpreted, not shown"
