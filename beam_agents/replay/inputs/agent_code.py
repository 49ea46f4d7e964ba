"""The only place replay imports the operator's code: ``module:ATTR`` paths, no bytecode written.

Importing a module runs it: the engine does this under the guard and the time limit
(``isolation``), with ``_running.AGENT_IMPORT`` set so the guard refuses the module
body's file writes as it refuses the re-run's. Every failure is an ``InputError``
(exit 2) naming the input and what the import raised; never a traceback.

A path recorded in a bundle is looked for where the operator is (the import path,
with the current directory first, as always) and, when its top-level package is not
there, in the folders the caller names (``search``: a bundle's folder and the folders
above it, so a bundle kept in its project replays from anywhere). ``locate`` says
where a path would be imported from without importing anything, for the consent a
bundle's recorded code needs (``incidents.bundle``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from beam_agents import _running
from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import text_digest

__all__ = [
    "ImportFailed",
    "ancestors",
    "import_object",
    "import_root",
    "imported_already",
    "locate",
    "no_bytecode",
]


class ImportFailed(InputError):
    """A module of agent code raised while it was imported (exit 2; the engine makes it a
    blocked replay, exit 3, when the guard refused something the module body tried)."""

    def __init__(self, head: str, error: BaseException, detail: str) -> None:
        text = _error_text(error)
        super().__init__(f"{head} {type(error).__name__}: {text}", detail)
        self.error_type = type(error).__name__
        # What the exception says is agent code's (it may quote a value): digested for --redact.
        self.redacted = (f"{head} {type(error).__name__}: {text_digest(text)}", detail)


def _error_text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # its __str__ is agent code too
        return f"<{type(error).__name__} whose str() raised>"

T = TypeVar("T")


@contextlib.contextmanager
def no_bytecode() -> Iterator[None]:
    """No ``.pyc`` written while inside: replay writes nothing, not even the agent's bytecode.

    The one place replay turns bytecode writing off (imports of agent code, the whole
    guarded replay); the previous setting is restored on the way out.
    """
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


def ancestors(path: str) -> tuple[str, ...]:
    """The folder of the file ``path`` and every folder above it, nearest first (absolute)."""
    folder = os.path.dirname(os.path.abspath(path))
    found = [folder]
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return tuple(found)
        found.append(parent)
        folder = parent


def _importable_here(top: str) -> bool:
    """Whether the top-level module ``top`` is found on the import path (nothing imported:
    finding a top-level name runs no module)."""
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _found_under(root: str, module_name: str) -> str | None:
    """The file ``module_name`` is under ``root`` (a module or a package), else None."""
    base = os.path.join(root, *module_name.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _search_root(module_name: str, search: Sequence[str]) -> str | None:
    """The first folder of ``search`` that holds ``module_name``'s source, when its top-level
    package is not importable as things are (None: import as usual)."""
    if _importable_here(module_name.split(".")[0]):
        return None
    return next((root for root in search if _found_under(root, module_name)), None)


def import_root(path: str, search: Sequence[str]) -> str | None:
    """The folder of ``search`` that ``import_object(path, ..., search)`` would import
    ``module:ATTR`` from (None: from the import path as it is), found without importing."""
    return _search_root(path.partition(":")[0], search) if search else None


def locate(path: str, search: Sequence[str] = ()) -> str | None:
    """Where importing ``module:ATTR`` would take its module from, without importing it: a
    file, ``an installed module`` for one the import path has whose file cannot be named
    without running its packages, or None when it would not be found."""
    module_name = path.partition(":")[0]
    if not module_name:
        return None
    top = module_name.split(".")[0]
    if _importable_here(top):
        for entry in ["", *sys.path]:
            found = _found_under(os.path.abspath(entry or os.curdir), module_name)
            if found is not None:
                return found
        return "an installed module"
    root = _search_root(module_name, search)
    return _found_under(root, module_name) if root is not None else None


def import_object(
    path: str, what: Input, expected: type[T], naming: Naming, search: Sequence[str] = ()
) -> T:
    """Import ``module:ATTR`` (ATTR may be dotted) and check it is an ``expected``.

    Bytecode caches are not written while importing: replay writes nothing. When the
    module's top-level package is not on the import path, the first folder of ``search``
    holding its source is appended to the path (and stays: the module imports its
    siblings from there).

    Raises:
        InputError: A malformed path, a module that fails to import (for any reason,
            its own exception named), a missing attribute, or a value of another type.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        example = f"myapp.agent:{'AGENT' if what is Input.AGENT else 'TOOLS'}"
        raise InputError(
            f"{naming.given(what, repr(path))} is not of the form module:ATTR",
            f"e.g. {naming.given(what, example)}",
        )
    root = _search_root(module_name, search) if search else None
    if root is not None and root not in sys.path:
        sys.path.append(root)
    token = _running.AGENT_IMPORT.set(True)
    try:
        with no_bytecode():
            module = importlib.import_module(module_name)
    except BaseException as exc:  # the operator's module may raise anything at import
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ImportFailed(
            f"{naming.given(what, path)}: importing module {module_name!r} failed with",
            exc,
            naming.import_advice,
        ) from None
    finally:
        _running.AGENT_IMPORT.reset(token)
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise InputError(
                f"{naming.given(what, path)}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(value, expected):
        article = "an" if expected.__name__[:1] in "AEIOU" else "a"
        found = (
            f"the class {value.__name__}"
            if isinstance(value, type)
            else (f"a {type(value).__name__}")
        )
        raise InputError(
            f"{naming.given(what, path)} is {found}, not {article} {expected.__name__} instance",
            f"point {naming.name(what)} at the {expected.__name__} instance the pipeline was "
            "built with",
        )
    return value


def imported_already(path: str | None) -> bool:
    """Whether the module of ``module:ATTR`` is imported already (None: nothing to import)."""
    return path is None or path.partition(":")[0] in sys.modules
