"""The operator's first hour (issue 27): keys that work where the help says, a footer that
keeps what matters at 80 columns, readable NO_COLOR, diffs by content, export and copy
with the values. Each test failed before its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from beam_agents.replay.result import ReplayResult
from replay_tui.app import ReplayApp
from replay_tui.render.monochrome import MIN_CONTRAST, ReadableMonochrome, contrast_ratio
from replay_tui.render.state import memory_delta
from replay_tui.screens.help import KEY_COLUMN_WIDTH, HelpScreen
from replay_tui.screens.main import MainScreen
from replay_tui.widgets.footer import KeysFooter

Real = Callable[[str], ReplayResult]
SIZES = [(80, 24), (160, 48)]


def footer_keys(app: ReplayApp) -> list[str]:
    from textual.widgets._footer import FooterKey

    footer = app.screen.query_one(KeysFooter)
    return [key.key_display for key in footer.query(FooterKey) if "-command-palette" not in key.classes]


@pytest.mark.parametrize("size", SIZES)
async def test_q_quits_from_the_help_screen(real: Real, size: tuple[int, int]) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.exit_code == 1


@pytest.mark.parametrize("size", SIZES)
async def test_the_footer_keeps_q_help_and_the_verdicts_keys(real: Real, size: tuple[int, int]) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        keys = footer_keys(app)
        assert keys[:4] == ["q", "?", "d", "n"], keys
        footer = app.screen.query_one(KeysFooter)
        used = sum(key.region.width for key in footer.children)
        assert used <= size[0]


@pytest.mark.parametrize("size", SIZES)
async def test_the_footer_while_a_query_line_is_open_says_how_to_apply_close_and_quit(
    real: Real, size: tuple[int, int]
) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=size) as pilot:
        for key, submit in (("f", "Apply"), ("slash", "Next match")):
            await pilot.press(key)
            await pilot.pause()
            from textual.widgets._footer import FooterKey

            shown = {k.description: k.key_display for k in app.screen.query(FooterKey)}
            assert shown.get("Quit") == "^q" and submit in shown and "Close" in shown, shown
            await pilot.press("escape")


async def test_the_search_placeholder_comes_from_the_result_not_the_demo(real: Real) -> None:
    from textual.widgets import Input

    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(160, 48)):
        placeholder = app.screen.query_one("#search", Input).placeholder
    assert "B2001" not in placeholder
    names = {p.traced.name for p in real("diverged").events if p.traced is not None}
    assert any(f"e.g. {name}" in placeholder for name in names), placeholder


async def test_the_palette_has_every_key_of_the_main_screen_under_its_key(real: Real) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(160, 48)):
        commands = app.palette_commands(app.screen)
        keys = {key for _, _, key, _ in commands}
        assert "f" in keys and "/" in keys and "v" in keys  # Filter was labelled "/"
        filter_row = next(c for c in commands if c[0] == "Filter timeline")
        assert filter_row[2] == "f"
        for binding in MainScreen.BINDINGS:
            action = binding.action  # type: ignore[union-attr]
            assert any(
                getattr(run, "__name__", "") == f"action_{action}" for *_, run in commands
            ), action


def test_the_help_key_column_is_as_wide_as_its_longest_key() -> None:
    assert KEY_COLUMN_WIDTH < 20  # a section title made it 45 of 80 columns


async def test_the_help_at_80_columns_leaves_room_for_what_the_keys_do(real: Real) -> None:
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = app.export_screenshot()
        assert "quit; the exit code" in text.replace("&#160;", " ")


async def test_q_after_switching_exits_with_the_opened_activations_code() -> None:
    import real_results  # noqa: F401  (puts tests/replay on sys.path)
    from incident_history import Incident
    from test_seq_switch import shown_seq, wait_for

    from beam_agents.replay.incidents.bundle import bundle_options, load_bundle

    bundle = load_bundle(Incident().make(all_seqs=True))
    app = ReplayApp(options=bundle_options(bundle, seq=2, import_recorded=True), seqs=bundle.seqs)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: shown_seq(app) == 2)
        opened = app.result
        assert opened is not None
        for _ in range(2):
            before = shown_seq(app)
            await pilot.press("right_square_bracket")
            await wait_for(pilot, lambda before=before: shown_seq(app) not in (None, before))
        await pilot.press("q")
    assert app.exit_code == opened.exit_code


def test_no_color_staged_labels_are_readable() -> None:
    from rich.segment import Segment
    from rich.style import Style
    from textual.color import Color

    background = Color.parse("#1e1e1e")
    [segment] = ReadableMonochrome().apply([Segment("STAGED", Style(color="magenta"))], background)
    assert segment.style is not None and segment.style.color is not None
    grey = segment.style.color.get_truecolor().red
    assert contrast_ratio(grey, background.monochrome.r) >= MIN_CONTRAST


async def test_no_color_the_app_uses_the_readable_filter(real: Real, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = ReplayApp(real("diverged"))
    assert any(isinstance(f, ReadableMonochrome) for f in app._filters)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")


def test_a_reordered_list_is_one_move_not_every_item_changed() -> None:
    before = {"log": [{"seq": 1}, {"seq": 2}, {"seq": 3}]}
    after = {"log": [{"seq": 2}, {"seq": 3}, {"seq": 1}]}
    rows = memory_delta(before, after)
    assert rows == [('["log"][0]', '{"seq": 1}', 'moved to ["log"][2] (same item)')]
    inserted = memory_delta({"l": [1, 2, 3]}, {"l": [0, 1, 2, 3]})
    assert inserted == [('["l"][0]', "—", "0")]
    changed = memory_delta({"l": [{"a": 1}, {"b": 2}]}, {"l": [{"a": 1}, {"b": 3}]})
    assert changed == [('["l"][1]["b"]', "2", "3")]


@pytest.mark.parametrize("size", SIZES)
async def test_the_cache_tab_shows_hit_and_a_cached_responses_text(real: Real, size: tuple[int, int]) -> None:
    result = real("reproduced")
    assert result.state is not None
    app = ReplayApp(result)
    async with app.run_test(size=size) as pilot:
        await pilot.press("s", "2")
        await pilot.pause()
        table = app.screen.query_one("#cache-table", DataTable)
        labels = [str(c.label) for c in table.columns.values()]
        assert labels.index("hit") <= 1
        shown = str(app.screen.query_one("#cache-entry-text", Static).render())
        entry = sorted(result.state.cache_entries, key=lambda e: e.lru_rank)[0]
        assert entry.cache_key in shown
        assert entry.response is not None and entry.response.text[:20] in shown


async def test_c_copies_the_values_the_detail_pane_shows(real: Real) -> None:
    result = real("diverged")
    app = ReplayApp(result)
    copied: list[str] = []
    async with app.run_test(size=(160, 48)) as pilot:
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.press("c")
    document = json.loads(copied[0])
    assert result.first_divergence is not None
    index = result.first_divergence.index
    texts = [v["text"] for v in document["values"]]
    assert texts and sorted(texts) == sorted(v.text for v in result.values if v.event_index == index)


async def test_e_quotes_the_values_and_says_it_wrote_into_the_current_directory(
    real: Real, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = real("diverged")
    app = ReplayApp(result)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("e")
        await pilot.pause()
    assert app.last_export is not None
    markdown = app.last_export[0].read_text()
    value = next(v for v in result.values if v.event_index == result.first_divergence.index)  # type: ignore[union-attr]
    assert value.text[:30] in markdown
    assert any("into the current directory" in message for _, message in app.notices)


async def test_e_creates_no_folder(real: Real, tmp_path: Path) -> None:
    app = ReplayApp(real("diverged"), export_dir=tmp_path / "typo" / "reports")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("e")
        await pilot.pause()
    assert not (tmp_path / "typo").exists()
    assert any(severity == "error" and "no such folder" in m for severity, m in app.notices)


@pytest.mark.parametrize("size", SIZES)
async def test_the_traced_rows_are_painted_while_the_rerun_runs(
    size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline waited for the whole replay (6.6 s for 100,000 events); now the traced
    events are painted once the activation is planned, the replayed side saying it is
    replaying, and the result replaces them."""
    import threading

    import real_results
    from test_seq_switch import wait_for

    from beam_agents.replay import engine
    from replay_tui.screens.loading import LoadingScreen
    from replay_tui.widgets.timeline import Timeline

    gate = threading.Event()
    real_replay = engine.replay

    def held(options: object, *, on_planned: engine.Planned | None = None) -> ReplayResult:
        def planned(header: object, traced: object) -> None:
            assert on_planned is not None
            on_planned(header, traced)  # type: ignore[arg-type]
            gate.wait(30)  # the re-run waits until the test has seen the preview

        return real_replay(options, on_planned=planned)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "replay", held)
    app = ReplayApp(options=real_results.SCENARIOS["diverged"]().options())
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: len(app.screen.query("#preview-timeline")) > 0)
        assert isinstance(app.screen, LoadingScreen) and app.result is None
        preview = app.screen.query_one("#preview-timeline", Timeline)
        await pilot.pause()
        text = app.export_screenshot().replace("&#160;", " ")
        assert "START" in text and "replaying…" in text
        gate.set()
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.result is not None and len(preview.model) == len(
            [p for p in app.result.events if p.traced is not None]
        )
        await pilot.press("q")
    assert app.exit_code == 1
