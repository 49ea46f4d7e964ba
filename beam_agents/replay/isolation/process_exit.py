"""What agent code runs at interpreter exit, run before the judgement in a process that ends.

A replay's process is the console script's (or one ``check`` worker's): after the
verdict it exits, and an exiting interpreter runs agent code once more. It waits for
the threads that are not daemons, calls the ``atexit`` callbacks (``atexit.register``,
``weakref.finalize``, ``logging.shutdown`` flushing a ``FileHandler`` opened late) and
finalizes what is left (``__del__``). Code there can do what the re-run must not (write
a file, connect), and it did so after a report had said ``reproduced``; a refused
``atexit`` hook also printed its traceback under the report.

So such a process runs that exit now (``run_exit``), under the guard, before the
judgement: what it tries is refused and counted like the re-run's attempts (exit 3
unless the re-run diverged before), then the process ends with ``os._exit`` (the
console script's ``finish``), so nothing of agent code runs after the report. Errors
the exit code raises are swallowed, as the interpreter's exit swallows them, and
printed nowhere.

The objects finalized are those of classes defined in agent code (the modules the
process imported while it imported and re-ran agent code, ``watch_agent_modules``)
that are still alive: the interpreter would finalize them when it clears those
modules; their ``__del__`` is called once, here. The Python API never runs this: its
caller's process goes on.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from beam_agents.replay.isolation.guard import is_refusal

__all__ = ["drop_exit_callbacks", "remember_finalizable", "run_exit", "watch_agent_modules"]

_AGENT_MODULES: set[str] = set()
"""Modules imported while agent code was imported or re-run in this process (inherited by
a forked ``check`` worker from the template that imported them)."""

_THREADS_BEFORE: set[int] | None = None
"""The threads alive when agent code was first imported or run here (not agent code's)."""

_OURS = ("beam_agents", "replay_tui", "google.protobuf", "_pytest", "pytest")
_STDLIB = tuple(
    os.path.normcase(os.path.realpath(path)) + os.sep
    for path in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def _agents(name: str) -> bool:
    """Whether module ``name`` can hold agent-defined classes (not ours, not the stdlib's)."""
    if name.startswith(_OURS) or name in sys.builtin_module_names:
        return False
    file = getattr(sys.modules.get(name), "__file__", None)
    if not isinstance(file, str):
        return False
    return not os.path.normcase(os.path.realpath(file)).startswith(_STDLIB)


def drop_exit_callbacks() -> None:
    """Forget the ``atexit`` callbacks registered so far: a process that is about to import
    agent code and end after one replay (the console script, a ``check`` worker or
    template) runs only agent code's at its exit (``run_exit``), never its own or, for a
    forked worker, its parent's (a test runner's cleanup, ``multiprocessing``'s)."""
    atexit._clear()


@contextmanager
def watch_agent_modules() -> Iterator[None]:
    """Note the modules imported inside as agent code's (see the module docstring)."""
    global _THREADS_BEFORE
    if _THREADS_BEFORE is None:
        _THREADS_BEFORE = {id(thread) for thread in threading.enumerate()}
    before = set(sys.modules)
    try:
        yield
    finally:
        _AGENT_MODULES.update(name for name in set(sys.modules) - before if _agents(name))


_FINALIZED_BY_AGENT: dict[type, bool] = {}
"""Per type: whether a Python ``__del__`` of an agent-defined class finalizes its objects."""


def _finalized_by_agent(kind: type) -> bool:
    known = _FINALIZED_BY_AGENT.get(kind)
    if known is None:
        known = False
        for klass in getattr(kind, "__mro__", ()):
            method = klass.__dict__.get("__del__")
            if method is not None:
                known = isinstance(method, types.FunctionType) and (
                    klass.__module__ in _AGENT_MODULES
                )
                break
        _FINALIZED_BY_AGENT[kind] = known
    return known


def _finalizable() -> list[Any]:
    """The objects the interpreter's exit would finalize with agent code, alive now."""
    _FINALIZED_BY_AGENT.clear()  # the agent modules may have grown since
    found = {id(o): o for o in (ref() for ref in _REMEMBERED) if o is not None}
    for obj in gc.get_objects():
        if _finalized_by_agent(type(obj)):
            found[id(obj)] = obj
    return list(found.values())


_REMEMBERED: list[weakref.ref[Any]] = []
"""Such objects of a template (``remember_finalizable``), which ``gc.freeze()`` hides from
``gc.get_objects()`` in the workers it forks."""


def remember_finalizable() -> None:
    """Note the objects agent code's exit would finalize, before ``gc.freeze()`` hides them
    (a ``check`` template, after it imported agent code, before it forks workers)."""
    _REMEMBERED.clear()
    for obj in _finalizable():
        with suppress(TypeError):  # a class without weak references: it is in a module
            _REMEMBERED.append(weakref.ref(obj))


def _join_threads() -> None:
    """Wait for agent code's threads that are not daemons, as the interpreter does first at
    exit (for every such thread)."""
    me = threading.current_thread()
    ours = _THREADS_BEFORE or set()
    for thread in threading.enumerate():
        if thread is not me and id(thread) not in ours and not thread.daemon:
            thread.join()


def run_exit() -> None:
    """Run what the interpreter's exit would run of agent code, now (module docstring).

    Call it in a thread the time limit watches, under the guard: non-daemon threads are
    waited for, ``atexit`` callbacks run (and are cleared), garbage is collected and the
    finalizers of agent-defined objects still alive are called. Nothing is printed.
    """
    previous, previous_thread_hook = sys.unraisablehook, threading.excepthook
    previous_excepthook = sys.excepthook
    sys.unraisablehook = _quiet
    # ``weakref.finalize`` runs its callbacks at exit from one atexit callback of its own,
    # and hands what one raised to ``sys.excepthook`` itself (the traceback a refused
    # finalizer printed): quiet too, as the guard recorded what it refused.
    sys.excepthook = _quiet_excepthook

    def quiet_refusals(args: Any) -> None:
        # A thread waited for here that let the guard's refusal through: the attempt is
        # recorded and reported with the verdict, not printed as a traceback.
        if args.exc_value is None or not is_refusal(args.exc_value):
            previous_thread_hook(args)

    threading.excepthook = quiet_refusals
    try:
        _join_threads()
        atexit._run_exitfuncs()
        atexit._clear()
        gc.collect()
        for obj in _finalizable():
            with suppress(BaseException):  # as at exit: an error in a finalizer is ignored
                obj.__del__()
        gc.collect()
    finally:
        sys.unraisablehook, threading.excepthook = previous, previous_thread_hook
        sys.excepthook = previous_excepthook


def _quiet(info: Any) -> None:
    """An exception in an ``atexit`` callback or a finalizer: ignored, as at exit, but not
    printed (the guard recorded anything it refused)."""


def _quiet_excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """What a ``weakref.finalize`` callback raised at exit: ignored, as ``_quiet``."""
