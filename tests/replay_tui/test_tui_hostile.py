"""TUI robustness from the hostile-input review: NO_COLOR, Ctrl+C, export that never overwrites.

Before: ``NO_COLOR=1`` crashed the detail pane (Textual's monochrome filter met an
unstyled segment), Ctrl+C showed raw ``[b]ctrl+q[/b]`` instead of quitting, and
``e`` wrote ``replay-<key>-seq<N>.md`` in the working directory through a planted
symbolic link, overwriting silently.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from beam_agents.replay.result import ReplayResult
from replay_tui.app import INTERRUPTED_EXIT_CODE, ReplayApp
from replay_tui.export import export_report, report_basename

Real = Callable[[str], ReplayResult]
WIDE = (160, 48)


@pytest.mark.parametrize("scenario", ["diverged", "cache-miss"])
def test_no_color_snapshot(
    snap_compare: Any, real: Real, scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(ReplayApp(real(scenario)), press=["down", "d"], terminal_size=WIDE)


async def test_no_color_every_screen_renders(real: Real, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = ReplayApp(real("diverged"))
    async with app.run_test(size=WIDE) as pilot:
        for key in ["down", "d", "n", "s", "s", "i", "i", "o", "o", "question_mark", "escape"]:
            await pilot.press(key)
            app.export_screenshot()
        await pilot.press("q")
    assert app.return_code == 1


@pytest.mark.parametrize(("scenario", "code"), [("diverged", 1), ("reproduced", 0), ("cache-miss", 3)])
async def test_ctrl_c_quits_with_the_verdicts_code(real: Real, scenario: str, code: int) -> None:
    app = ReplayApp(real(scenario))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("s")  # from a sub-screen too
        await pilot.press("ctrl+c")
    assert app.exit_code == code and app.return_code == code
    assert not any("[b]" in message for _, message in app.notices)


async def test_ctrl_c_while_loading_quits_with_130(
    real: Real, monkeypatch: pytest.MonkeyPatch
) -> None:
    import real_results

    from beam_agents.replay import engine

    release = threading.Event()

    def stuck(options: Any, *, on_planned: Any = None) -> ReplayResult:
        release.wait(30)
        return real("diverged")

    monkeypatch.setattr(engine, "replay", stuck)
    app = ReplayApp(options=real_results.diverged_inputs().options())
    try:
        async with app.run_test(size=WIDE) as pilot:
            await pilot.pause()
            await pilot.press("ctrl+c")
    finally:
        release.set()
    assert app.return_code == INTERRUPTED_EXIT_CODE


def test_export_names_agent_key_and_seq(real: Real, tmp_path: Path) -> None:
    result = real("diverged")
    md_path, json_path = export_report(result, tmp_path)
    agent = result.header.agent_path.replace(":", "_")
    assert md_path.name.startswith(f"replay-{agent}-") and md_path.name.endswith(
        f"-seq{result.header.seq}.md"
    )
    assert json_path.name == md_path.name[:-3] + ".json"


def test_export_never_follows_a_planted_symlink(real: Real, tmp_path: Path) -> None:
    result = real("diverged")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    base = report_basename(result)
    (tmp_path / f"{base}.md").symlink_to(victim)
    (tmp_path / f"{base}.json").symlink_to(tmp_path / "dangling-target")
    md_path, json_path = export_report(result, tmp_path)
    assert victim.read_text() == "precious"
    assert not (tmp_path / "dangling-target").exists()
    assert md_path.name == f"{base}-2.md" and json_path.name == f"{base}-2.json"
    assert not md_path.is_symlink() and md_path.read_text().startswith("# beam-agents-replay")


def test_export_never_overwrites_and_numbers_the_next_pair(real: Real, tmp_path: Path) -> None:
    result = real("reproduced")
    first = export_report(result, tmp_path)
    first[0].write_text("edited by the operator")
    second = export_report(result, tmp_path)
    third = export_report(result, tmp_path)
    assert first[0].read_text() == "edited by the operator"
    assert [p.name for p in (second[0], third[0])] == [
        f"{report_basename(result)}-2.md",
        f"{report_basename(result)}-3.md",
    ]
    assert len(list(tmp_path.iterdir())) == 6


def test_a_hostile_agent_path_cannot_leave_the_directory(real: Real, tmp_path: Path) -> None:
    import dataclasses

    result = real("reproduced")
    hostile = dataclasses.replace(
        result, header=dataclasses.replace(result.header, agent_path="../../etc/x:\x1b[2J/y")
    )
    (tmp_path / "out").mkdir()
    md_path, _ = export_report(hostile, tmp_path / "out")
    assert md_path.parent == (tmp_path / "out").resolve()
    assert "/" not in md_path.name and "\x1b" not in md_path.name


def test_tui_export_dir_flag_reaches_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    import real_results

    from beam_agents import cli
    from beam_agents.cli import tui

    seen: list[dict[str, Any]] = []
    fake = types.ModuleType("replay_tui.app")
    fake.run_tui = lambda options, **kw: seen.append(kw) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "replay_tui.app", fake)
    monkeypatch.setattr(tui, "_has_terminal", lambda: True)
    flags = real_results.write_inputs("diverged", tmp_path / "in")
    (tmp_path / "reports").mkdir()  # e creates no folder: --export-dir names an existing one
    assert cli.main(["tui", *flags, "--export-dir", str(tmp_path / "reports")]) == 0
    assert seen[0]["export_dir"] == tmp_path / "reports"
