"""The top of docs/index.md's layer diagram: the CLI starts the TUI, both sit on the replay package.

    beam_agents.cli  ->  replay_tui  ->  beam_agents.replay (and the core below it)

Nothing below imports what is above it: the replay package and the core never import the
CLI or the TUI, and the TUI never imports the CLI. Every import statement counts, the lazy
ones inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(source: str) -> set[str]:
    """Every module an import statement in ``source`` names (``from a import b`` gives a and a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def offending(package: Path, forbidden: tuple[str, ...]) -> list[str]:
    """``path: module`` for each import under ``package`` (but not in the CLI itself) of a
    ``forbidden`` module or one below it."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if "cli" in path.relative_to(package.parent).parts[1:2]:
            continue  # beam_agents/cli/: the top layer imports what it likes
        for name in sorted(imported_modules(path.read_text())):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(package.parent)}: {name}")
    return found


def test_the_replay_package_and_the_core_import_neither_the_cli_nor_the_tui() -> None:
    modules = list((ROOT / "beam_agents" / "replay").rglob("*.py"))
    assert len(modules) > 20  # the walk sees the package
    assert offending(ROOT / "beam_agents", ("beam_agents.cli", "replay_tui")) == []


def test_the_tui_does_not_import_the_cli() -> None:
    assert offending(ROOT / "replay_tui", ("beam_agents.cli",)) == []


def test_the_cli_starts_the_tui_from_one_module_only() -> None:
    # The TUI (Textual) is imported by the `tui` command when it runs, nowhere else in the CLI.
    importers = [
        path.name
        for path in sorted((ROOT / "beam_agents" / "cli").glob("*.py"))
        if any(n.startswith("replay_tui") for n in imported_modules(path.read_text()))
    ]
    assert importers == ["tui.py"]


@pytest.mark.parametrize(
    "source",
    [
        "import beam_agents.cli\n",
        "from beam_agents import cli\n",
        "from beam_agents.cli.parsing import PROG\n",
        "def f():\n    from replay_tui.app import run_tui\n",
        "import replay_tui\n",
    ],
)
def test_the_check_sees_each_way_of_importing(tmp_path: Path, source: str) -> None:
    module = tmp_path / "beam_agents" / "replay" / "probe.py"
    module.parent.mkdir(parents=True)
    module.write_text(f"import json\n{source}")
    found = offending(tmp_path / "beam_agents", ("beam_agents.cli", "replay_tui"))
    assert found and all(f.startswith("beam_agents/replay/probe.py: ") for f in found), found
    (tmp_path / "beam_agents" / "cli").mkdir()
    module.rename(tmp_path / "beam_agents" / "cli" / "probe.py")
    assert offending(tmp_path / "beam_agents", ("beam_agents.cli", "replay_tui")) == []
