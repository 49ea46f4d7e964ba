"""Every command and code block in README.md and docs/*.md runs, so the docs cannot rot.

How a document is run (the conventions every doc author follows):

- Blocks run in document order, one document at a time, each document in a
  fresh subprocess whose current directory is a fresh temporary directory
  that looks like the repository root (its top-level entries are symlinked
  there, ``.venv`` included), so commands like ``.venv/bin/python
  scripts/demo.py`` work and whatever a block writes stays out of the tree.
- A ```` ```python ```` block is executed in the document's one namespace
  (later blocks see earlier blocks' names). Tracebacks name the document and
  its line.
- A ```` ```console ```` / ```` ```bash ```` / ```` ```sh ```` / ```` ```shell ````
  block holds commands: each line starting with ``$ `` is one (a trailing
  ``\\`` continues it on the next line), run with bash, ``.venv/bin`` first on
  PATH. The lines after a command, up to the next ``$ ``, are its shown output:
  each non-blank shown line must appear in the real output (stdout, then
  stderr), in order, with its spacing (only trailing white space is ignored:
  a reader copies the layout they see); ``...`` in a shown line matches
  anything. A command must exit 0 unless the block is preceded by
  ``<!-- expect-exit: N -->``. A console block with no ``$ `` line is an
  error: prefix the commands, or mark the block not-run.
- ``<!-- not-run: reason -->`` right before a block skips it; the reason is
  required, and every skipped block is reported as a skipped test with its
  reason (see ``-ra`` in the test summary). Keep them rare: e.g. wiring that
  needs a live Kafka broker, or a command that opens the interactive TUI.
- ``<!-- setup ... -->`` (the word ``setup``, a newline, Python lines, then
  ``-->``) is hidden Python run at that point: for names a snippet assumes
  (``now_ms``), never for anything a reader needs to see.
- Other fences (``text``, ``json``, ``proto``, ``toml``, none) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_LANGS = frozenset({"python", "py", "python3"})
CONSOLE_LANGS = frozenset({"console", "bash", "sh", "shell", "shell-session"})
COMMAND_TIMEOUT_S = 300
# Top-level entries not mirrored into a document's working directory.
_NOT_MIRRORED = frozenset(
    {
        ".git",
        "demo-out",
        "bench-out",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        "__pycache__",
        ".peers",
    }
)
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:(?P<reason>.*?)-->$")
_EXPECT_EXIT = re.compile(r"^<!--\s*expect-exit:\s*(?P<code>\d+)\s*-->$")
_SETUP_OPEN = re.compile(r"^<!--\s*setup\s*$")


class DocFormatError(Exception):
    """A document breaks the conventions (e.g. a not-run comment without a reason)."""


@dataclass(frozen=True)
class Block:
    """One runnable piece of a document."""

    doc: str
    """The document's path relative to the repository root."""
    line: int
    """1-based line of the first content line (for a fence: the line after it)."""
    kind: str
    """``python``, ``console`` or ``setup``."""
    text: str
    not_run: str | None = None
    """The reason given by ``<!-- not-run: reason -->``; None when the block runs."""
    expect_exit: int = 0

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def documents() -> list[Path]:
    """README.md and every Markdown file under docs/, sorted."""
    found = [ROOT / "README.md"] if (ROOT / "README.md").exists() else []
    return found + sorted((ROOT / "docs").rglob("*.md"))


def parse_blocks(text: str, doc: str) -> list[Block]:
    """The runnable blocks of a Markdown document, in order.

    Raises:
        DocFormatError: A not-run comment without a reason, a not-run or
            expect-exit comment on a block that does not run anyway, or an
            unterminated fence or setup comment.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    not_run: str | None = None
    expect_exit: int | None = None
    pending_line = 0
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if match := _NOT_RUN.match(stripped):
            reason = match.group("reason").strip()
            if not reason:
                raise DocFormatError(f"{doc}:{i + 1}: <!-- not-run: --> needs a reason")
            not_run, pending_line = reason, i + 1
        elif match := _EXPECT_EXIT.match(stripped):
            expect_exit, pending_line = int(match.group("code")), i + 1
        elif _SETUP_OPEN.match(stripped):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->"), None)
            if end is None:
                raise DocFormatError(f"{doc}:{i + 1}: <!-- setup is never closed by -->")
            blocks.append(Block(doc, i + 2, "setup", "\n".join(lines[i + 1 : end])))
            i = end
        elif fence := _FENCE.match(lines[i]):
            indent, marker = fence.group("indent"), fence.group("fence")
            lang = (fence.group("info").strip().split() or [""])[0].lower()
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(marker) and not lines[j].strip().strip(marker[0])
                ),
                None,
            )
            if end is None:
                raise DocFormatError(f"{doc}:{i + 1}: a ``` fence that is never closed")
            body = "\n".join(
                line[len(indent) :] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1 : end]
            )
            kind = "python" if lang in PYTHON_LANGS else "console" if lang in CONSOLE_LANGS else ""
            if kind:
                blocks.append(Block(doc, i + 2, kind, body, not_run, expect_exit or 0))
            elif not_run is not None or expect_exit is not None:
                raise DocFormatError(
                    f"{doc}:{pending_line}: a not-run/expect-exit comment before a "
                    f"```{lang} block, which is never run anyway"
                )
            not_run, expect_exit = None, None
            i = end
        elif stripped and (not_run is not None or expect_exit is not None):
            raise DocFormatError(
                f"{doc}:{pending_line}: a not-run/expect-exit comment must come right "
                "before the block it is about"
            )
        i += 1
    return blocks


@dataclass(frozen=True)
class Command:
    """One ``$ `` command of a console block and the output shown under it."""

    line: int
    command: str
    shown: tuple[str, ...]


def parse_commands(block: Block) -> list[Command]:
    """The commands of a console block.

    Raises:
        DocFormatError: The block holds no ``$ `` command.
    """
    commands: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            i += 1
            continue
        start = i
        parts = [lines[i][2:]]
        while parts[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            parts.append(lines[i])
        i += 1
        shown: list[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        commands.append(Command(block.line + start, "\n".join(parts), tuple(shown)))
    if not commands:
        raise DocFormatError(
            f"{block.where}: a console block with no `$ ` command; prefix each command with "
            "`$ `, or mark the block <!-- not-run: reason -->"
        )
    return commands


def _line(text: str) -> str:
    """A line as compared: its spacing kept, trailing white space dropped."""
    return text.rstrip()


def shown_output_mismatch(shown: tuple[str, ...], actual: str) -> str | None:
    """Why the real output does not show what the doc shows (None when it does).

    Each non-blank shown line must match a later real line than the previous one
    matched; ``...`` matches any text within a line.
    """
    real = [_line(line) for line in actual.splitlines()]
    position = 0
    for wanted in (_line(line) for line in shown):
        if not wanted:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in wanted.split("...")))
        for index in range(position, len(real)):
            if pattern.fullmatch(real[index]):
                position = index + 1
                break
        else:
            return f"the shown line {wanted!r} is not in the output (in order)"
    return None


# --- running a document (in its own subprocess) ----------------------------------------------


def mirror_root(directory: Path) -> None:
    """Make ``directory`` look like the repository root: a symlink per top-level entry."""
    for entry in sorted(ROOT.iterdir()):
        if entry.name not in _NOT_MIRRORED:
            (directory / entry.name).symlink_to(entry)


def command_env() -> dict[str, str]:
    """The environment commands run in: ``.venv/bin`` first on PATH, no virtualenv prompt games."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(ROOT / ".venv" / "bin"), env.get("PATH", "")])
    env.pop("DEMO_HEADLESS", None)
    env["TERM"] = "dumb"
    return env


def run_command(block: Block, command: Command) -> str | None:
    """Run one command in the current directory; why it failed, or None."""
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command.command],
        capture_output=True,
        text=True,
        env=command_env(),
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    where = f"{block.doc}:{command.line}: $ {command.command}"
    if done.returncode != block.expect_exit:
        return f"{where}\nexited {done.returncode}, the doc expects {block.expect_exit}\n{output}"
    why = shown_output_mismatch(command.shown, output)
    if why is not None:
        return f"{where}\n{why}; the real output was:\n{output}"
    return None


def run_document(doc: str) -> int:
    """Run every block of ``doc`` in order in the current directory; the process exit code."""
    sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory is importable
    namespace: dict[str, Any] = {"__name__": "__doc_block__"}
    for block in parse_blocks((ROOT / doc).read_text("utf-8"), doc):
        if block.not_run is not None:
            continue
        if block.kind in ("python", "setup"):
            # Pad so tracebacks give the line in the Markdown file.
            code = compile("\n" * (block.line - 1) + block.text, str(ROOT / doc), "exec")
            try:
                exec(code, namespace)
            except BaseException:
                print(f"{block.where}: the python block raised:", file=sys.stderr)
                traceback.print_exc()
                return 1
            continue
        for command in parse_commands(block):
            why = run_command(block, command)
            if why is not None:
                print(why, file=sys.stderr)
                return 1
    return 0


# --- the tests ------------------------------------------------------------------------------


def _doc_ids() -> list[str]:
    return [str(path.relative_to(ROOT)) for path in documents()]


def _skipped() -> list[Block]:
    skipped: list[Block] = []
    for doc in _doc_ids():
        try:
            blocks = parse_blocks((ROOT / doc).read_text("utf-8"), doc)
        except DocFormatError:
            continue  # reported by test_document_runs
        skipped.extend(block for block in blocks if block.not_run is not None)
    return skipped


@pytest.mark.slow
@pytest.mark.parametrize("doc", _doc_ids())
def test_document_runs(doc: str, tmp_path: Path) -> None:
    blocks = parse_blocks((ROOT / doc).read_text("utf-8"), doc)
    for block in blocks:
        if block.kind == "console" and block.not_run is None:
            parse_commands(block)  # a block without commands fails here, naming it
    if not any(block.not_run is None for block in blocks):
        pytest.skip(f"{doc}: nothing to run")
    mirror_root(tmp_path)
    done = subprocess.run(
        [sys.executable, __file__, "run", doc],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=command_env(),
        check=False,
        timeout=COMMAND_TIMEOUT_S * 4,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "block", _skipped() or [None], ids=lambda b: b.where if isinstance(b, Block) else "none"
)
def test_not_run_block(block: Block | None) -> None:
    """One skipped test per not-run block, so the summary lists each with its reason."""
    if block is None:
        pytest.skip("no doc block is marked not-run")
    assert block.not_run, f"{block.where}: a not-run block needs a reason"
    pytest.skip(f"{block.where} ({block.kind}) not run: {block.not_run}")


# --- the conventions themselves ---------------------------------------------------------------

_SAMPLE = """\
Intro.

```python
x = 1
```

<!-- not-run: needs a live Kafka broker -->
```python
connect()
```

<!-- expect-exit: 1 -->
```console
$ false \\
    --flag
shown line
$ echo hi
hi
```

```json
{"not": "run"}
```

<!-- setup
now_ms = 5
-->
"""


def test_blocks_are_found_with_their_lines_and_markers() -> None:
    blocks = parse_blocks(_SAMPLE, "sample.md")
    assert [(b.kind, b.line, b.not_run, b.expect_exit) for b in blocks] == [
        ("python", 4, None, 0),
        ("python", 9, "needs a live Kafka broker", 0),
        ("console", 14, None, 1),
        ("setup", 26, None, 0),
    ]
    commands = parse_commands(blocks[2])
    assert [(c.line, c.command, c.shown) for c in commands] == [
        (14, "false \\\n    --flag", ("shown line",)),
        (17, "echo hi", ("hi",)),
    ]


def test_a_not_run_comment_without_a_reason_is_refused() -> None:
    with pytest.raises(DocFormatError, match="needs a reason"):
        parse_blocks("<!-- not-run: -->\n```python\nx = 1\n```\n", "d.md")


def test_a_marker_on_a_block_that_never_runs_is_refused() -> None:
    with pytest.raises(DocFormatError, match="never run anyway"):
        parse_blocks("<!-- not-run: why -->\n```text\nx\n```\n", "d.md")


def test_a_console_block_without_commands_is_refused() -> None:
    (block,) = parse_blocks("```bash\nexport X=1\n```\n", "d.md")
    with pytest.raises(DocFormatError, match="no `\\$ ` command"):
        parse_commands(block)


def test_shown_output_must_appear_in_order_with_ellipses() -> None:
    actual = "beam-agents-replay 1.0.0a1\n  key:   6b  seq: 7\nreproduced\n"
    assert shown_output_mismatch(("beam-agents-replay ...", "reproduced"), actual) is None
    assert shown_output_mismatch(("  key:   6b  seq: ...",), actual) is None
    # The spacing shown is the spacing printed: a doc cannot tidy the real layout.
    assert shown_output_mismatch(("key: 6b seq: ...",), actual) is not None
    assert shown_output_mismatch(("  key: ...  seq: 7   ",), actual) is None
    assert shown_output_mismatch(("reproduced", "key: ..."), actual) is not None
    assert shown_output_mismatch(("diverged",), actual) is not None


if __name__ == "__main__" and sys.argv[1:2] == ["run"]:
    sys.exit(run_document(sys.argv[2]))
