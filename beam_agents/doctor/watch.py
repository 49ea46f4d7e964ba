"""The watcher: what agent code reads and reaches while it runs, with its file and line.

Two hooks, neither of which changes what agent code sees:

- ``sys.setprofile`` (and ``threading.setprofile`` for threads started later) sees
  every call: the wall clock (``time.time``, ``datetime.now``, ``date.today``,
  ``time.localtime()`` without an argument, ...), durations (``time.monotonic``,
  ``perf_counter``), unseeded randomness (the ``random`` module's functions, an
  unseeded ``random.Random()``, ``SystemRandom``, ``uuid4``, ``uuid1``,
  ``os.urandom``, ``secrets``), the environment (``os.environ``, ``os.getenv``) and
  working memory (``ctx.memory`` reads, with the value read, and writes);
- the replay guard's audit hook in its recording mode
  (``isolation.guard.record_operations``) sees network, processes, native code and
  file reads and writes.

A call counts when agent code makes it: the frame calling the watched function is
agent code (``AgentFiles``), or, for files, network and processes, the first frame
outward that is not the standard library or an installed package is agent code
(``urllib`` opening a socket for a tool). A call made by beam-agents itself, by the
model provider while it answers, by the import system, or inside a ``recorded=True``
tool (whose result replay serves) does not. A clock or random call a library makes
on agent code's behalf (``logging`` stamping a record) is kept as *indirect*: it
explains a perturbation's effect, it is not a finding on its own.

``Observation`` is one such call; the watcher keeps them in order.
"""

from __future__ import annotations

import dis
import hashlib
import os
import random
import secrets
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from datetime import date, datetime
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from beam_agents import _running, canonical_json
from beam_agents.memory import JsonMemory
from beam_agents.replay.isolation import guard as _guard
from beam_agents.replay.isolation.guard import Operation, OperationKind, record_operations

__all__ = [
    "IN_PROVIDER",
    "AgentFiles",
    "Kind",
    "Observation",
    "Watcher",
]

IN_PROVIDER: ContextVar[bool] = ContextVar("beam_agents_doctor_in_provider", default=False)
"""True while the model provider answers (its own clock, network and files are its business)."""


class Kind:
    """What an observation is (plain strings: they travel as JSON between processes)."""

    CLOCK = "clock"
    DURATION = "duration"
    RANDOM = "random"
    ENV = "env"
    FILE_READ = "file-read"
    FILE_WRITE = "file-write"
    NETWORK = "network"
    PROCESS = "process"
    MEMORY_READ = "memory-read"
    MEMORY_WRITE = "memory-write"


@dataclass(frozen=True)
class Observation:
    """One watched call made by agent code."""

    kind: str
    api: str
    """What was called, e.g. ``time.time``, ``os.environ``, ``socket.connect``."""
    detail: str
    """The variable, path, address, memory key (empty if none)."""
    file: str
    """The agent file (absolute)."""
    line: int
    function: str
    phase: str
    """``import`` (a module body), ``activation`` or ``outside`` (a thread, a hook)."""
    entity_key: str = ""
    """The activation's key (hex), in the ``activation`` phase."""
    seq: int = 0
    tool: str = ""
    """The read-only tool ``ctx.call`` was running, if any."""
    direct: bool = True
    """Agent code called it itself (False: a library did, on its behalf)."""
    via: str = ""
    """For an indirect call: the library file that made it."""
    value: str = ""
    """For a memory read: the sha256 of the value's canonical JSON (``missing`` if absent)."""
    activation: int = -1
    """The doctor's number of the activation it was made in (-1: none, or not yet known)."""

    def document(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Observation:
        return cls(**doc)


class AgentFiles:
    """Which source files are agent code: the operator's, not Python's, not a package's.

    A file under one of ``roots`` (the packages of ``--agent`` and ``--registry``) is
    agent code wherever it is installed; otherwise beam-agents' own files, the standard
    library, installed packages (``site-packages``, ``dist-packages``) and code with no
    file (``<frozen ...>``, ``<string>``) are not, and everything else is.
    """

    def __init__(self, roots: Sequence[str] = ()) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots if r)
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = sysconfig.get_paths()
        self.outside = tuple(
            {
                os.path.realpath(p)
                for p in (package, paths.get("stdlib"), paths.get("platstdlib"))
                if p
            }
        )
        self._known: dict[str, bool] = {}

    def __contains__(self, filename: object) -> bool:
        if not isinstance(filename, str):
            return False
        known = self._known.get(filename)
        if known is None:
            known = self._known[filename] = self._classify(filename)
        return known

    def _classify(self, filename: str) -> bool:
        if not filename or filename.startswith("<"):
            return False
        path = os.path.realpath(filename)
        if any(path == r or path.startswith(r + os.sep) for r in self.roots):
            return True
        if f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
            return False
        return not any(path.startswith(o + os.sep) for o in self.outside)


_BEAM_AGENTS_DIR = os.sep + "beam_agents" + os.sep
_THIS_FILE = os.path.abspath(__file__)
_OURS = frozenset({__file__, _THIS_FILE, _guard.__file__, os.path.abspath(_guard.__file__)})


# --------------------------------------------------------------------------- what is watched

_WALL_C: dict[Any, str] = {
    time.time: "time.time",
    time.time_ns: "time.time_ns",
    datetime.now: "datetime.now",
    datetime.utcnow: "datetime.utcnow",
    datetime.today: "datetime.today",
    date.today: "date.today",
}
# Read the clock only without their time argument: (api, how many positional args mean "now").
_WALL_WITHOUT_ARG: dict[Any, tuple[str, int]] = {
    time.localtime: ("time.localtime", 0),
    time.gmtime: ("time.gmtime", 0),
    time.ctime: ("time.ctime", 0),
    time.asctime: ("time.asctime", 0),
    time.strftime: ("time.strftime", 1),
}
_DURATION_C: dict[Any, str] = {
    time.monotonic: "time.monotonic",
    time.monotonic_ns: "time.monotonic_ns",
    time.perf_counter: "time.perf_counter",
    time.perf_counter_ns: "time.perf_counter_ns",
}
_RANDOM_C: dict[Any, str] = {os.urandom: "os.urandom"}
_GLOBAL_RANDOM = random._inst  # the module functions' instance

_RANDOM_METHODS = (
    "random",
    "randint",
    "randrange",
    "choice",
    "choices",
    "shuffle",
    "sample",
    "uniform",
    "triangular",
    "gauss",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "betavariate",
    "paretovariate",
    "weibullvariate",
    "getrandbits",
    "randbytes",
    "binomialvariate",
)


def _c_watches() -> dict[Any, tuple[str, str, int | None]]:
    """Every watched C function, looked up once per ``c_call`` (the profile hook's hot path):
    ``(kind, api, positional args that mean "now" or None when any call counts)``."""
    watches: dict[Any, tuple[str, str, int | None]] = {}
    for function, api in _WALL_C.items():
        watches[function] = (Kind.CLOCK, api, None)
    for function, (api, now_args) in _WALL_WITHOUT_ARG.items():
        watches[function] = (Kind.CLOCK, api, now_args)
    for function, api in _DURATION_C.items():
        watches[function] = (Kind.DURATION, api, None)
    for function, api in _RANDOM_C.items():
        watches[function] = (Kind.RANDOM, api, None)
    # The C methods of the module functions' own instance (random.random, getrandbits):
    # a bound method is equal to (and hashes like) every other binding of it to that instance.
    for name in dir(type(_GLOBAL_RANDOM).__mro__[1]):
        if name.startswith("_"):
            continue
        bound = getattr(_GLOBAL_RANDOM, name, None)
        if getattr(bound, "__self__", None) is _GLOBAL_RANDOM and not hasattr(bound, "__func__"):
            watches.setdefault(bound, (Kind.RANDOM, f"random.{name}", None))
    return watches


_C_WATCHES = _c_watches()


def _code(obj: Any) -> CodeType | None:
    code = getattr(getattr(obj, "__func__", obj), "__code__", None)
    return code if isinstance(code, CodeType) else None


@dataclass(frozen=True)
class _PyWatch:
    kind: str
    api: str
    self_is: Callable[[Any], bool] | None = None
    """When set, the call counts only if ``self`` passes (``random.choice`` is ``Random.choice``
    on the module's own instance; ``os.environ.get`` is ``Mapping.get`` on os.environ)."""
    detail: str = ""
    """A local of the called frame to report (``key`` of ``os.environ[key]``)."""


def _python_watches() -> dict[CodeType, _PyWatch]:
    watches: dict[CodeType, _PyWatch] = {}

    def add(obj: Any, watch: _PyWatch) -> None:
        code = _code(obj)
        if code is not None:
            watches.setdefault(code, watch)

    def is_global_or_system(instance: Any) -> bool:
        return instance is _GLOBAL_RANDOM or isinstance(instance, random.SystemRandom)

    for name in _RANDOM_METHODS:
        for owner in (random.SystemRandom, random.Random):
            method = owner.__dict__.get(name)
            if method is not None:
                add(method, _PyWatch("random", f"random.{name}", is_global_or_system))

    add(random.Random.__init__, _PyWatch("random-init", "random.Random() without a seed"))
    add(random.Random.seed, _PyWatch("random-seed", "random.seed() without a value"))
    add(uuid.uuid4, _PyWatch("random", "uuid.uuid4"))
    add(uuid.uuid1, _PyWatch("random", "uuid.uuid1"))
    for name in ("token_bytes", "token_hex", "token_urlsafe", "randbelow", "randbits", "choice"):
        add(getattr(secrets, name, None), _PyWatch("random", f"secrets.{name}"))
    environ_class = type(os.environ)

    def is_environ(instance: Any) -> bool:
        return instance is os.environ or instance is getattr(os, "environb", None)

    add(os.getenv, _PyWatch("env", "os.getenv", detail="key"))
    for name in ("__getitem__", "__contains__", "get", "__iter__", "copy", "keys", "items"):
        method = getattr(environ_class, name, None)
        add(method, _PyWatch("env", "os.environ", is_environ, "key"))
    add(JsonMemory.__getitem__, _PyWatch("memory-read", "ctx.memory", detail="key"))
    add(JsonMemory.__setitem__, _PyWatch("memory-write", "ctx.memory", detail="key"))
    add(JsonMemory.__delitem__, _PyWatch("memory-write", "ctx.memory", detail="key"))
    add(JsonMemory.__iter__, _PyWatch("memory-read", "ctx.memory"))
    return watches


# Files a watched Python call passes through on its way from agent code (the Mapping methods
# os.environ and ctx.memory inherit; beam-agents' own memory subclass in replay).
_TRANSPARENT = frozenset(
    {"_collections_abc.py", "<frozen _collections_abc>", "os.py", "<frozen os>", "capture.py",
     "memory.py"}
)  # fmt: skip
# The watched APIs' own modules: a call they make inside a watched call is that call's.
_IMPLEMENTATIONS = frozenset({"random.py", "uuid.py", "secrets.py", *_TRANSPARENT})
# Modules a file, network or process operation may pass through and still be agent code's own.
_FILE_APIS = frozenset({"pathlib.py", "io.py", "codecs.py", "os.py", "shutil.py", "genericpath.py",
                        "glob.py", "fnmatch.py", "posixpath.py", "tempfile.py"})  # fmt: skip


def _digest(value: Any) -> str:
    try:
        return hashlib.sha256(canonical_json.dumps(value)).hexdigest()
    except Exception:  # not JSON (cannot be in memory): its type is what differs
        return f"<{type(value).__name__}>"


class Watcher:
    """Watches agent code in this process; ``observations`` in the order they happened.

    ``start()`` before importing agent code, ``phase`` set to ``import`` around the import;
    ``recorded(tool)`` says whether a tool is ``recorded=True`` (its calls are not agent
    code's business: replay serves their result).
    """

    def __init__(self, files: AgentFiles, *, memory: bool = True) -> None:
        self.files = files
        self.memory = memory
        self.observations: list[Observation] = []
        self.import_phase = False
        self.recorded: Callable[[str], bool] = lambda tool: False
        self._py = _python_watches()
        self._lock = threading.Lock()
        self._inside = threading.local()
        self._pending_reads: dict[int, Observation] = {}
        self._calls: dict[tuple[CodeType, int], int | None] = {}
        self._recording: Any = None
        self.errors: list[BaseException] = []

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        self._recording = record_operations(self._operation)
        self.errors = self._recording.__enter__()
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)
        if self._recording is not None:
            self._recording.__exit__(None, None, None)
            self._recording = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The profile hook off in this thread while the doctor's own code runs (its state
        probe walks every module value: thousands of calls nothing here needs to see)."""
        sys.setprofile(None)
        try:
            yield
        finally:
            sys.setprofile(self._profile)

    @contextmanager
    def importing(self) -> Iterator[None]:
        self.import_phase = True
        try:
            yield
        finally:
            self.import_phase = False

    def take(self) -> list[Observation]:
        """The observations so far, and forget them."""
        with self._lock:
            taken, self.observations = self.observations, []
        return taken

    # -- where -----------------------------------------------------------------------------

    def _context(self) -> tuple[str, str, int, str] | None:
        """``(phase, key hex, seq, tool)``; None when the call is not agent code's concern."""
        if IN_PROVIDER.get():
            return None
        tool = _running.TOOL.get() or ""
        if tool and self.recorded(tool):
            return None
        ctx = _running.ACTIVATION.get()
        if ctx is not None:
            return "activation", ctx.entity_key.hex(), ctx.seq, tool
        return ("import" if self.import_phase else "outside"), "", 0, tool

    def _add(self, observation: Observation) -> None:
        with self._lock:
            self.observations.append(observation)

    def _observe(
        self,
        kind: str,
        api: str,
        caller: FrameType,
        *,
        detail: str = "",
        direct: bool = True,
        via: str = "",
        keep: bool = True,
    ) -> Observation | None:
        where = self._context()
        if where is None:
            return None
        phase, key, seq, tool = where
        code = caller.f_code
        observation = Observation(
            kind=kind,
            api=api,
            detail=detail,
            file=code.co_filename,
            line=caller.f_lineno,
            function=code.co_name,
            phase=phase,
            entity_key=key,
            seq=seq,
            tool=tool,
            direct=direct,
            via=via,
        )
        if keep:
            self._add(observation)
        return observation

    def _agent_outward(self, frame: FrameType | None, allowed: frozenset[str] | None) -> tuple[
        FrameType | None, str
    ]:
        """The first agent frame from ``frame`` outward, and the first library file passed
        (``""``: none, or only ``allowed`` ones). None when beam-agents or the import system
        comes first."""
        via = ""
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename in _OURS:
                frame = frame.f_back
                continue
            if filename in self.files:
                return frame, via
            if _BEAM_AGENTS_DIR in filename or "importlib" in filename:
                return None, via
            base = os.path.basename(filename)
            if not via and (allowed is None or base not in allowed):
                via = filename
            frame = frame.f_back
        return None, via

    # -- the profile hook ------------------------------------------------------------------

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # Called for every call and return in the process: one lookup on the common path.
        if event == "c_call":
            try:
                watch = _C_WATCHES.get(arg)
            except TypeError:  # a builtin bound to an unhashable object
                return
            if watch is not None:
                kind, api, now_args = watch
                if now_args is not None and self._positional_args(frame) != now_args:
                    return  # localtime(t), strftime(fmt, t): a given time, not the clock
                self._called(kind, api, frame)
        elif event == "call":
            py_watch = self._py.get(frame.f_code)
            if py_watch is not None:
                self._py_call(frame, py_watch)
        elif event == "return" and self._pending_reads:
            pending = self._pending_reads.pop(id(frame), None)
            if pending is not None:
                self._add(_with_value(pending, arg))

    def _called(self, kind: str, api: str, caller: FrameType | None, detail: str = "") -> None:
        if caller is None:
            return
        if caller.f_code.co_filename in self.files:
            self._observe(kind, api, caller, detail=detail)
            return
        if kind in (Kind.MEMORY_READ, Kind.MEMORY_WRITE, Kind.ENV):
            return  # a library reading the environment (urllib's proxies) is its own business
        if os.path.basename(caller.f_code.co_filename) in _IMPLEMENTATIONS:
            return  # inside a watched call (uuid4's urandom, choice's getrandbits)
        # A library reading the clock or randomness for agent code: indirect.
        agent, via = self._agent_outward(caller, None)
        if agent is not None:
            self._observe(kind, api, agent, detail=detail, direct=False, via=via)

    def _positional_args(self, frame: FrameType) -> int | None:
        """How many positional arguments the call ``frame`` is making passes (None: unknown)."""
        key = (frame.f_code, frame.f_lasti)
        if key not in self._calls:
            found: int | None = None
            for instruction in dis.get_instructions(frame.f_code):
                if instruction.offset == frame.f_lasti:
                    if instruction.opname in ("CALL", "CALL_FUNCTION", "PRECALL"):
                        found = int(instruction.arg or 0)
                    break
            self._calls[key] = found
        return self._calls[key]

    def _py_call(self, frame: FrameType, watch: _PyWatch) -> None:
        local = frame.f_locals
        if watch.self_is is not None and not watch.self_is(local.get("self")):
            return
        kind = watch.kind
        if kind == "random-init":
            if local.get("x") is not None:
                return
            kind = Kind.RANDOM
        elif kind == "random-seed":
            if local.get("a") is not None:
                return  # seeded with a value: deterministic
            kind = Kind.RANDOM  # reseeded from the operating system's randomness
        elif kind in (Kind.MEMORY_READ, Kind.MEMORY_WRITE) and not self.memory:
            return
        caller = frame.f_back
        if caller is not None:
            parent = self._py.get(caller.f_code)
            if parent is not None and (
                parent.self_is is None or parent.self_is(caller.f_locals.get("self"))
            ):
                return  # inside a watched call (os.environ.get's __getitem__)
        # Through the Mapping methods os.environ and ctx.memory inherit: the caller of those.
        while caller is not None and os.path.basename(caller.f_code.co_filename) in _TRANSPARENT:
            if caller.f_code.co_filename in self.files:
                break
            caller = caller.f_back
        detail = str(local.get(watch.detail, "")) if watch.detail else ""
        if kind == Kind.MEMORY_READ and watch.detail:
            if caller is None or caller.f_code.co_filename not in self.files:
                return
            pending = self._observe(kind, watch.api, caller, detail=detail, keep=False)
            if pending is not None:  # kept with the value read, when the frame returns
                self._pending_reads[id(frame)] = pending
            return
        self._called(kind, watch.api, caller, detail)

    # -- the audit hook's recording mode ----------------------------------------------------

    def _operation(self, operation: Operation) -> None:
        kind = {
            OperationKind.NETWORK: Kind.NETWORK,
            OperationKind.PROCESS: Kind.PROCESS,
            OperationKind.FILE_READ: Kind.FILE_READ,
            OperationKind.FILE_WRITE: Kind.FILE_WRITE,
        }[operation.kind]
        files = kind in (Kind.FILE_READ, Kind.FILE_WRITE)
        agent, via = self._agent_outward(sys._getframe(1), _FILE_APIS if files else None)
        if agent is None:
            return
        if files and via and operation.address.endswith((".py", ".pyc", ".pth")):
            return  # a library loading code (linecache, inspect)
        # Network and processes count through any library (urllib opening the socket); a
        # file only through the file APIs (not linecache reading source for a traceback).
        direct = not via or not files
        self._observe(kind, operation.event, agent, detail=operation.address, direct=direct,
                      via=via)  # fmt: skip


def _with_value(observation: Observation, value: Any) -> Observation:
    from dataclasses import replace

    return replace(observation, value=_digest(value))


def agent_roots(*paths: str) -> list[str]:
    """The directories of the top-level packages of ``module:ATTR`` paths (importable now)."""
    import importlib.util

    roots: list[str] = []
    for path in paths:
        top = path.partition(":")[0].split(".")[0]
        if not top:
            continue
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            roots.extend(spec.submodule_search_locations)
        elif spec.origin:
            roots.append(str(Path(spec.origin)))
    return roots
