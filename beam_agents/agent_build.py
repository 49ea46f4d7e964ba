"""An agent build's identity (``AgentBuild``): what wrote a snapshot, and what replay imports.

The pipeline stamps it on every snapshot it exports; replay computes it for the agent
it is given and names the difference in its header ("build skew"), since replaying
with other code than production ran is a divergence source of its own. It is in no
trace: a trace's bytes, and every digest over them, are the same whatever the build.

The identity is the agent's class (``module:Class``, where it is defined), the
sha256 of that module's source file as the process loaded it, and the author's
``Agent.build_version`` if set. The digest covers that one file only: a change in a
helper module it imports shows only through ``build_version`` (or as a divergence).
"""

from __future__ import annotations

import hashlib
import sys
import threading

from beam_agents._protos import AgentBuild

__all__ = ["agent_build", "build_differences", "describe_build"]

_DIGESTS: dict[str, str] = {}
"""sha256 of each module's source file, read once per process (the code it loaded)."""
_LOCK = threading.Lock()


def _module_digest(module_name: str) -> str:
    with _LOCK:
        known = _DIGESTS.get(module_name)
    if known is not None:
        return known
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    digest = ""
    if isinstance(path, str) and path.endswith(".py"):
        try:
            with open(path, "rb") as source:
                digest = hashlib.sha256(source.read()).hexdigest()
        except OSError:
            digest = ""  # no readable source: the class and the version still say something
    with _LOCK:
        _DIGESTS.setdefault(module_name, digest)
        return _DIGESTS[module_name]


def agent_build(agent: object) -> AgentBuild:
    """The identity of ``agent``'s build: its class, its module's source digest, its version."""
    cls = type(agent)
    version = getattr(agent, "build_version", "")
    return AgentBuild(
        agent_class=f"{cls.__module__}:{cls.__qualname__}",
        code_sha256=_module_digest(cls.__module__),
        version=version if isinstance(version, str) else str(version),
    )


def describe_build(build: AgentBuild, *, code: bool = True) -> str:
    """``examples.support_desk.agent:SupportAgent code sha256=1a2b3c4d5e6f version 1.4.2``
    (``code=False``: without the source digest)."""
    parts = [build.agent_class or "?"]
    if code:
        parts.append(
            f"code sha256={build.code_sha256[:12]}" if build.code_sha256 else "code: no source"
        )
    if build.version:
        parts.append(f"version {build.version}")
    return " ".join(parts)


def build_differences(wrote: AgentBuild, given: AgentBuild) -> tuple[str, ...]:
    """What differs between the build that ``wrote`` a snapshot and the ``given`` one:
    ``class``, ``code``, ``version`` (empty when they agree, or nothing was recorded)."""
    if wrote == AgentBuild():
        return ()  # a snapshot written before builds were recorded: nothing to compare
    found = []
    if wrote.agent_class != given.agent_class:
        found.append("class")
    if wrote.code_sha256 != given.code_sha256:
        found.append("code")
    if wrote.version != given.version:
        found.append("version")
    return tuple(found)
