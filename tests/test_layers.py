"""The layout of docs/index.md ("How the code is laid out"), checked: every import statement counts.

Between the packages:

    beam_agents.cli  ->  replay_tui  ->  beam_agents.replay  ->  the core

nothing below imports what is above it: the replay package and the core never import
the CLI or the TUI, the TUI never imports the CLI, and the core never imports replay.

Inside ``beam_agents/replay/`` (its floors, lowest first; a folder is one unit, the
vocabulary modules are one):

    0  vocabulary    result, options, naming, refusal
    1  inputs/  reporting/
    2  reconstruct/  isolation/
    3  judging/
    4  engine
    5  replayer
    6  incidents/

1. Imports only go down a floor; two units of one floor never import each other (so
   ``reporting/``, on floor 1, reads only the vocabulary and the core: a renderer cannot
   decide a verdict).
2. A verdict is decided in ``judging/`` only: a ``Judgement`` is built in
   ``judging/judge.py``, a ``ReplayResult`` in ``engine.py`` (the judgement assembled, or
   a refusal mapped), and a ``Verdict`` member is taken as a value (not compared, not a
   key of a table of labels) only in ``judging/``, ``refusal.py`` (a refusal's verdict),
   ``result.py`` (the table of exit codes) and the exemptions of ``VERDICT_VALUES``.
3. No private name crosses a module: nothing imports ``_name`` from another module of
   ours (a private *module*, such as ``beam_agents._running``, is the package's own), or
   reads ``module._name``; and every name a folder of replay gives to another unit is
   listed in that folder's docstring (its ``__init__.py``), so the docstring is the
   folder's interface.

Each rule is checked on the real tree, and each check is shown to fail on a violation
planted in a scratch tree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

VOCABULARY = frozenset({"result", "options", "naming", "refusal"})
FLOORS = {
    "vocabulary": 0,
    "inputs": 1,
    "reporting": 1,
    "reconstruct": 2,
    "isolation": 2,
    "judging": 3,
    "engine": 4,
    "replayer": 5,
    "incidents": 6,
}

VERDICT_VALUES = {
    ("beam_agents/replay/incidents/check_rows.py", "worst_of"): (
        "the worst verdict of no rows is reproduced (exit 0)"
    ),
    ("beam_agents/cli/replay.py", "usage_error_json"): (
        "a command line the parser refused, as a --json document: no replay ran"
    ),
}
"""Functions outside judging/ that take a ``Verdict`` member as a value, and why."""

RESULT_BUILDERS = {
    ("beam_agents/cli/replay.py", "usage_error_json"): VERDICT_VALUES[
        ("beam_agents/cli/replay.py", "usage_error_json")
    ],
}
"""Functions outside engine.py that build a ``ReplayResult``, and why."""


# --------------------------------------------------------------------------- reading the tree


def module_name(root: Path, path: Path) -> str:
    """``beam_agents.replay.judging.judge`` for ``root/beam_agents/replay/judging/judge.py``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(root: Path, dotted: str) -> bool:
    """Whether ``dotted`` names a module or package of the tree (not a name inside one)."""
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(source: str) -> Iterator[tuple[ast.ImportFrom | ast.Import, str, str | None]]:
    """``(node, module, name)`` for every import: ``name`` is what ``from module import``
    takes (None for ``import module``). Relative imports are resolved by the caller."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node, node.module, alias.name


def imported_modules(root: Path | None, source: str) -> set[str]:
    """Every module an import statement of ``source`` names: ``from a import b`` gives
    ``a``, and ``a.b`` when ``b`` is a module of the tree at ``root`` (None: always)."""
    names: set[str] = set()
    for _, module, name in imports(source):
        names.add(module)
        if name is not None and (root is None or is_module(root, f"{module}.{name}")):
            names.add(f"{module}.{name}")
    return names


def python_files(root: Path, *folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (root / folder).rglob("*.py"))


# --------------------------------------------------------------------------- the checks


def offending(package: Path, forbidden: tuple[str, ...]) -> list[str]:
    """``path: module`` for each import under ``package`` (but not in the CLI itself) of a
    ``forbidden`` module or one below it."""
    found = []
    root = package.parent
    for path in sorted(package.rglob("*.py")):
        if "cli" in path.relative_to(root).parts[1:2]:
            continue  # beam_agents/cli/: the top layer imports what it likes
        for name in sorted(imported_modules(None, path.read_text())):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(root)}: {name}")
    return found


def replay_unit(module: str) -> str | None:
    """The unit of replay ``module`` belongs to (None: not in replay, or its public face)."""
    parts = module.split(".")
    if parts[:2] != ["beam_agents", "replay"] or len(parts) < 3:
        return None
    return "vocabulary" if parts[2] in VOCABULARY else parts[2]


def floor_violations(root: Path) -> list[str]:
    """Rule 1: an import up a floor or across one floor, or a unit on no floor."""
    found = []
    for path in python_files(root, "beam_agents/replay"):
        own = replay_unit(module_name(root, path))
        if own is None:
            continue  # beam_agents/replay/__init__.py: the face loads every floor lazily
        where = path.relative_to(root)
        if own not in FLOORS:
            found.append(f"{where}: {own!r} is on no floor (add it to the layout)")
            continue
        for name in sorted(imported_modules(root, path.read_text())):
            other = replay_unit(name)
            if other is None or other == own:
                continue
            if other not in FLOORS:
                found.append(f"{where}: imports {name}, which is on no floor")
            elif FLOORS[other] >= FLOORS[own]:
                way = "across its floor" if FLOORS[other] == FLOORS[own] else "up a floor"
                found.append(f"{where}: imports {name} ({way}: {own} -> {other})")
    return found


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _function_of(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node.name
    return ""


def _calls(tree: ast.AST, name: str) -> Iterator[tuple[str, int]]:
    """``(enclosing function, line)`` of each call of ``name`` (or ``something.name``)."""
    parents = _parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                yield _function_of(node, parents), node.lineno


def _verdict_values(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """``(enclosing function, line)`` of each ``Verdict.X`` that is neither compared with
    nor a key of a dict literal (a label table)."""
    parents = _parents(tree)

    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Verdict"
            and node.attr.isupper()
        ):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Compare):
            continue
        if isinstance(parent, ast.Tuple) and isinstance(parents.get(parent), ast.Compare):
            continue  # verdict in (Verdict.A, Verdict.B)
        if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
            continue
        yield _function_of(node, parents), node.lineno


def verdict_violations(root: Path) -> list[str]:
    """Rule 2: a Judgement, a ReplayResult or a Verdict value made outside its place."""
    found = []
    replay = root / "beam_agents" / "replay"
    for path in python_files(root, "beam_agents", "replay_tui"):
        if "_protos" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        inside = path.relative_to(replay).as_posix() if path.is_relative_to(replay) else None
        where = path.relative_to(root).as_posix()
        if inside != "judging/judge.py":
            found += [f"{where}:{n}: builds a Judgement" for _, n in _calls(tree, "Judgement")]
        if inside != "engine.py":
            found += [
                f"{where}:{line}: builds a ReplayResult"
                for function, line in _calls(tree, "ReplayResult")
                if (where, function) not in RESULT_BUILDERS
            ]
        if inside is not None and (
            inside.startswith("judging/") or inside in ("refusal.py", "result.py")
        ):
            continue
        for function, line in _verdict_values(tree):
            if (where, function) not in VERDICT_VALUES:
                found.append(f"{where}:{line}: takes a Verdict as a value in {function or 'module'}")
    return found


def _docstring_names(root: Path, folder: str) -> set[str]:
    init = root / "beam_agents" / "replay" / folder / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) if init.is_file() else None
    return set(re.findall(r"\w+", doc or ""))


def private_violations(root: Path) -> list[str]:
    """Rule 3: a private name imported or read across modules; a folder's name given to
    another unit but missing from the folder's docstring."""
    found = []
    for path in python_files(root, "beam_agents", "replay_tui"):
        if "_protos" in path.parts:
            continue
        source = path.read_text()
        where = path.relative_to(root)
        own = module_name(root, path)
        modules: set[str] = set()  # local names bound to modules of ours
        for node, module, name in imports(source):
            if not module.startswith(("beam_agents", "replay_tui")):
                continue
            if name is None:
                alias = next(a for a in node.names if a.name == module)
                modules.add(alias.asname or module.split(".")[0])
                continue
            alias = next(a for a in node.names if a.name == name)
            if is_module(root, f"{module}.{name}"):
                modules.add(alias.asname or name)
                continue
            if name.startswith("_") and not name.startswith("__") and module != own:
                found.append(f"{where}:{node.lineno}: imports {module}.{name}, a private name")
                continue
            theirs = replay_unit(module)
            folder = root / "beam_agents" / "replay" / str(theirs)
            if (
                theirs not in (None, "vocabulary", replay_unit(own))
                and folder.is_dir()
                and name not in _docstring_names(root, str(theirs))
            ):
                found.append(
                    f"{where}:{node.lineno}: imports {name} from {module}, which the "
                    f"docstring of beam_agents/replay/{theirs}/__init__.py does not list"
                )
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{where}:{node.lineno}: reads {node.value.id}.{node.attr}, a private name")
    return found


# --------------------------------------------------------------------------- the real tree


def test_the_replay_package_and_the_core_import_neither_the_cli_nor_the_tui() -> None:
    modules = list((ROOT / "beam_agents" / "replay").rglob("*.py"))
    assert len(modules) > 30  # the walk sees the package, its folders too
    assert offending(ROOT / "beam_agents", ("beam_agents.cli", "replay_tui")) == []


def test_the_tui_does_not_import_the_cli() -> None:
    assert offending(ROOT / "replay_tui", ("beam_agents.cli",)) == []


def test_the_core_does_not_import_replay() -> None:
    core = [
        p
        for p in python_files(ROOT, "beam_agents")
        if p.relative_to(ROOT / "beam_agents").parts[0] not in ("cli", "doctor", "pipeline", "replay")
    ]
    assert len(core) > 30
    found = [
        f"{p.relative_to(ROOT)}: {name}"
        for p in core
        for name in sorted(imported_modules(ROOT, p.read_text()))
        if name.startswith("beam_agents.replay")
    ]
    assert found == []


def test_the_cli_starts_the_tui_from_one_module_only() -> None:
    # The TUI (Textual) is imported by the `tui` command when it runs, nowhere else in the CLI.
    importers = [
        path.name
        for path in sorted((ROOT / "beam_agents" / "cli").glob("*.py"))
        if any(n.startswith("replay_tui") for n in imported_modules(ROOT, path.read_text()))
    ]
    assert importers == ["tui.py"]


def test_every_replay_module_is_on_a_floor_and_imports_only_below_it() -> None:
    units = {replay_unit(module_name(ROOT, p)) for p in python_files(ROOT, "beam_agents/replay")}
    assert units - {None} == set(FLOORS)  # every floor is there, and nothing else
    assert floor_violations(ROOT) == []


def test_a_verdict_is_decided_in_judging_only() -> None:
    assert verdict_violations(ROOT) == []
    # Each exemption is still needed (a stale one would say a wrong thing).
    for (name, function), why in VERDICT_VALUES.items():
        tree = ast.parse((ROOT / name).read_text())
        assert any(f == function for f, _ in _verdict_values(tree)), why
    for (name, function), why in RESULT_BUILDERS.items():
        tree = ast.parse((ROOT / name).read_text())
        assert any(f == function for f, _ in _calls(tree, "ReplayResult")), why


def test_no_private_name_crosses_a_module_and_folders_list_what_they_give() -> None:
    assert private_violations(ROOT) == []


# --------------------------------------------------------------------------- planted violations


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A scratch tree with the real replay's folders (empty) and ``files`` in it."""
    for unit in FLOORS:
        if unit not in ("vocabulary", "engine", "replayer"):
            init = tmp_path / "beam_agents" / "replay" / unit / "__init__.py"
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text('"""A folder giving: judge, escape, Plan."""\n')
    for name in ("beam_agents/__init__.py", "beam_agents/replay/__init__.py"):
        (tmp_path / name).write_text("")
    for name in ("result", "options", "naming", "refusal", "engine", "replayer"):
        (tmp_path / "beam_agents" / "replay" / f"{name}.py").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


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


@pytest.mark.parametrize(
    ("where", "source", "says"),
    [
        # up a floor: a renderer reading the judge
        ("reporting/text.py", "from beam_agents.replay.judging.judge import judge\n", "up a floor"),
        # across a floor: two folders of floor 1
        ("reporting/text.py", "from beam_agents.replay.inputs import traces\n", "across its floor"),
        ("isolation/guard.py", "def f():\n    import beam_agents.replay.reconstruct.plan\n", "across"),
        # the vocabulary importing a stage
        ("result.py", "from beam_agents.replay.engine import replay\n", "up a floor"),
        ("engine.py", "from beam_agents.replay.incidents.check import check_bundles\n", "up"),
        # a module on no floor
        ("stray.py", "import json\n", "on no floor"),
    ],
)
def test_the_floor_check_fails_on_a_planted_import(
    tmp_path: Path, where: str, source: str, says: str
) -> None:
    clean = _tree(tmp_path, {f"beam_agents/replay/{where}": "import json\n"})
    assert [f for f in floor_violations(clean) if "stray" not in where] == []
    planted = _tree(tmp_path, {f"beam_agents/replay/{where}": source})
    found = floor_violations(planted)
    assert len(found) == 1 and says in found[0] and where in found[0], found


def test_imports_down_the_floors_pass(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "beam_agents/replay/incidents/check.py": "from beam_agents.replay import engine\n",
            "beam_agents/replay/engine.py": "from beam_agents.replay.judging.judge import judge\n",
            "beam_agents/replay/judging/judge.py": (
                "from beam_agents.replay.reconstruct.plan import Plan\n"
                "from beam_agents.replay.judging import compare\n"
                "from beam_agents.replay.result import Verdict\n"
            ),
            "beam_agents/replay/reconstruct/plan.py": "from beam_agents.replay.inputs import traces\n",
        },
    )
    assert floor_violations(tree) == []


@pytest.mark.parametrize(
    ("where", "source", "says"),
    [
        ("beam_agents/replay/reporting/text.py", "x = Judgement(verdict=v)\n", "builds a Judgement"),
        ("beam_agents/replay/incidents/check.py", "r = ReplayResult(verdict=v)\n", "ReplayResult"),
        ("beam_agents/cli/replay.py", "r = result.ReplayResult(verdict=v)\n", "ReplayResult"),
        (
            "beam_agents/replay/reporting/text.py",
            "def f(r):\n    return replace(r, verdict=Verdict.REPRODUCED)\n",
            "as a value in f",
        ),
        ("replay_tui/render/header.py", "SHOWN = [Verdict.DIVERGED]\n", "as a value in module"),
        ("beam_agents/replay/engine.py", "def f():\n    return Verdict.USAGE_ERROR\n", "value"),
    ],
)
def test_the_verdict_check_fails_on_a_planted_verdict(
    tmp_path: Path, where: str, source: str, says: str
) -> None:
    planted = _tree(tmp_path, {where: source})
    found = verdict_violations(planted)
    assert len(found) == 1 and says in found[0] and where in found[0], found


def test_reading_a_verdict_is_not_deciding_one(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "beam_agents/replay/reporting/text.py": (
                "TITLES = {Verdict.REPRODUCED: 'ok'}\n"
                "def f(r):\n"
                "    return r.verdict is Verdict.DIVERGED or r.verdict in (Verdict.WHAT_IF,)\n"
            ),
            "beam_agents/replay/judging/judge.py": "j = Judgement(verdict=Verdict.DIVERGED)\n",
            "beam_agents/replay/engine.py": "r = ReplayResult(verdict=judgement.verdict)\n",
            "beam_agents/replay/refusal.py": "class R:\n    verdict = Verdict.USAGE_ERROR\n",
        },
    )
    assert verdict_violations(tree) == []


@pytest.mark.parametrize(
    ("where", "source", "says"),
    [
        (
            "beam_agents/replay/replayer.py",
            "from beam_agents.replay.engine import _guarded\n",
            "private name",
        ),
        (
            "beam_agents/pipeline/replay_bundles.py",
            "def f():\n    from beam_agents.replay.incidents.check import _refused_row\n",
            "private name",
        ),
        ("beam_agents/cli/tui.py", "from beam_agents.replay import engine\nengine._go()\n", "reads"),
        (
            "beam_agents/replay/incidents/listing.py",
            "from beam_agents.replay.reconstruct.plan import resumed_continuation\n",
            "does not list",
        ),
    ],
)
def test_the_private_check_fails_on_a_planted_crossing(
    tmp_path: Path, where: str, source: str, says: str
) -> None:
    planted = _tree(tmp_path, {where: source})
    found = private_violations(planted)
    assert len(found) == 1 and says in found[0] and where in found[0], found


def test_private_modules_and_listed_names_pass_and_private_stays_private_in_a_folder(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        {
            "beam_agents/_running.py": "ACTIVATION = None\n",
            "beam_agents/replay/isolation/guard.py": (
                "from beam_agents import _running\n_running.ACTIVATION\n"
            ),
            "beam_agents/replay/engine.py": (
                "from beam_agents.replay.judging.judge import judge\n"
                "from beam_agents.replay.reporting.escape import escape\n"
            ),
            "beam_agents/replay/reconstruct/plan.py": (
                "from beam_agents.replay.reconstruct.pending import _helper\n"  # own folder
            ),
        },
    )
    found = private_violations(tree)
    assert found == [
        "beam_agents/replay/reconstruct/plan.py:1: imports "
        "beam_agents.replay.reconstruct.pending._helper, a private name"
    ]


# --------------------------------------------------------------------------- the doctor
# beam_agents/doctor/ is above replay and key_step (it drives both: the samples through the
# pipeline's per-key step, every activation through replay's engine) and below the CLI: a
# package of its own rather than a floor of replay, since replay's engine must never know
# the doctor that perturbs it.

DOCTOR_FORBIDDEN = ("beam_agents.cli", "replay_tui", "beam_agents.pipeline", "apache_beam")


def doctor_violations(root: Path) -> list[str]:
    """An import of the doctor from below it (anything but the CLI), or of what is above it
    (the CLI, the TUI) or beside it (the pipeline and Beam) from inside it."""
    found = []
    for path in python_files(root, "beam_agents"):
        where = path.relative_to(root)
        parts = where.parts
        names = imported_modules(root, path.read_text())
        if parts[1] == "doctor":
            found += [f"{where}: imports {n}" for n in sorted(names)
                      if any(n == f or n.startswith(f + ".") for f in DOCTOR_FORBIDDEN)]  # fmt: skip
        elif parts[1] != "cli":
            found += [f"{where}: imports {n}, the doctor" for n in sorted(names)
                      if n == "beam_agents.doctor" or n.startswith("beam_agents.doctor.")]  # fmt: skip
    return found


def test_the_doctor_sits_above_replay_and_below_the_cli() -> None:
    assert (ROOT / "beam_agents" / "doctor" / "run.py").is_file()
    assert doctor_violations(ROOT) == []


@pytest.mark.parametrize(
    ("where", "source", "says"),
    [
        ("beam_agents/replay/engine.py", "from beam_agents.doctor import diagnose\n", "the doctor"),
        ("beam_agents/key_step.py", "import beam_agents.doctor.run\n", "the doctor"),
        ("beam_agents/doctor/run.py", "from beam_agents.cli.parsing import PROG\n", "cli"),
        ("beam_agents/doctor/watch.py", "import apache_beam\n", "apache_beam"),
    ],
)
def test_the_doctor_check_fails_on_a_planted_import(
    tmp_path: Path, where: str, source: str, says: str
) -> None:
    planted = _tree(tmp_path, {where: source, "beam_agents/cli/doctor.py": "from beam_agents.doctor import diagnose\n"})
    found = doctor_violations(planted)
    assert len(found) == 1 and says in found[0] and where in found[0], found
