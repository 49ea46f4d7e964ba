"""The only place replay imports the operator's code: ``module:ATTR`` paths, no bytecode written.

Importing a module runs it: the engine does this under the guard and the time limit
(``isolation``). Every failure is an ``InputError`` (exit 2) naming the input and
what the import raised; never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

from beam_agents.replay.naming import Input, Naming
from beam_agents.replay.refusal import InputError

__all__ = ["import_object", "imported_already", "no_bytecode"]

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


def import_object(path: str, what: Input, expected: type[T], naming: Naming) -> T:
    """Import ``module:ATTR`` (ATTR may be dotted) and check it is an ``expected``.

    Bytecode caches are not written while importing: replay writes nothing.

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
    try:
        with no_bytecode():
            module = importlib.import_module(module_name)
    except BaseException as exc:  # the operator's module may raise anything at import
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(
            f"{naming.given(what, path)}: importing module {module_name!r} failed with "
            f"{type(exc).__name__}: {exc}",
            naming.import_advice,
        ) from None
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
