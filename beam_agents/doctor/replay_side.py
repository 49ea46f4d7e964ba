"""The replay side: every sample activation replayed as ``beam-agents-replay`` replays it.

A replay worker runs under one ``Condition`` (its environment, directory and hash
seed are the process's own; a clock shift is applied before anything else). It
imports the agent code once, as the command line does (under replay's guard, no
bytecode), while the pipeline's side may still be running, then reads the run
directory once (the ``load`` message) and forks a child per task: every child starts
with the agent's modules exactly as a fresh import leaves them (module state
included: the worker itself never runs an activation), replays one activation under
replay's guard (the network closed) through ``beam_agents.replay.replay`` from the
bytes the pipeline's side wrote (its snapshot, its lane's trace stream, its envelope),
exactly the command line's path; then it sends back what the result says
(``outcome_of``). Nothing watches a replay: what agent code calls is watched in the
pipeline's run, and what a perturbation changes is read off the verdict. Tasks:

    replay       the activation from the snapshot exported after it
    pre-memory   the same, but with the memory the key had before it (and the caches of
                 after): reproduces where the only difference was memory it overwrote
    trace        the replay again, every line of agent code recorded (``linetrace``)

A child that runs past twice the time limit and 30 s is killed; one that dies says so.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from beam_agents._protos import StateSnapshot
from beam_agents.doctor.linetrace import trace_lines
from beam_agents.doctor.refusal import naming_of, replay_naming
from beam_agents.doctor.watch import AgentFiles
from beam_agents.hitl import HitlPolicy
from beam_agents.replay.engine import replay
from beam_agents.replay.isolation.guard import end_process
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayResult

__all__ = ["outcome_of", "serve_replays"]

BACKSTOP_GRACE = 30.0


def outcome_of(result: ReplayResult) -> dict[str, Any]:
    """What the doctor reads of one replay's result (JSON data)."""
    divergence = result.first_divergence
    miss = result.cache_miss
    tool_miss = result.tool_miss
    return {
        "verdict": result.verdict.value,
        "exit_code": result.exit_code,
        "reason": result.reason,
        "error": result.error,
        "stop": result.stop.value if result.stop is not None else "",
        "divergence": None
        if divergence is None
        else {
            "index": divergence.index,
            "kind": divergence.kind,
            "name": divergence.name,
            "how": str(divergence.how),
            "fields": [f.path for f in divergence.fields],
            # Where the two sides are other events altogether: what the replay has instead.
            # (a name is rendered as a JSON string there: read back to the name itself)
            "replayed": {
                f.path: json.loads(f.replayed) if f.path == "name" else f.replayed
                for f in divergence.fields
                if f.path in ("kind", "name")
            },
        },
        "cache_miss": None
        if miss is None
        else {
            "index": miss.event_index,
            "key": miss.cache_key,
            "traced_key": miss.traced_cache_key,
            "status": miss.status,
            "model": miss.model,
            "differences": list(miss.nearest.differences) if miss.nearest else [],
        },
        "tool_miss": None
        if tool_miss is None
        else {
            "index": tool_miss.event_index,
            "tool": tool_miss.tool,
            "args": tool_miss.args_sha256,
            "traced_args": tool_miss.traced_args_sha256,
            "status": tool_miss.status,
            "differences": list(tool_miss.differences),
        },
        "blocked": list(result.network_attempts),
    }


def _import_agent_code(plan: dict[str, Any]) -> dict[str, Any] | None:
    """Import the agent code as the command line does (under the guard, no bytecode), once:
    every child forked after it starts with the agent's modules as a fresh import leaves
    them. What that import did wrong is every replay's answer (None: nothing)."""
    from beam_agents.agent import Agent
    from beam_agents.hitl import HitlPolicy
    from beam_agents.replay.inputs.agent_code import import_object, no_bytecode
    from beam_agents.replay.isolation.guard import block_network
    from beam_agents.replay.naming import Input
    from beam_agents.replay.refusal import ReplayRefused
    from beam_agents.tools import ToolRegistry

    naming = replay_naming(naming_of(plan))
    try:
        with no_bytecode(), block_network() as attempts:
            import_object(plan["agent"], Input.AGENT, Agent, naming)
            import_object(plan["registry"], Input.REGISTRY, ToolRegistry, naming)
            if plan.get("hitl"):
                import_object(plan["hitl"], Input.HITL, HitlPolicy, naming)
    except ReplayRefused as refused:
        return {"outcome": _refused_outcome("error", 2, refused.message)}
    if attempts:
        blocked = [a.describe() for a in attempts]
        return {"outcome": {**_refused_outcome("irreproducible", 3, "agent code tried, at import, "
                                               f"what replay refuses: {blocked[0]}"), "blocked": blocked}}  # fmt: skip
    return None


def _refused_outcome(verdict: str, code: int, reason: str) -> dict[str, Any]:
    return {"verdict": verdict, "exit_code": code, "reason": reason, "error": reason, "stop": "",
            "divergence": None, "cache_miss": None, "tool_miss": None, "blocked": []}  # fmt: skip


def _snapshot_with_memory(snapshot: bytes, memory: bytes) -> bytes:
    message = StateSnapshot.FromString(snapshot)
    message.memory = memory
    return message.SerializeToString(deterministic=True)


class _Run:
    """The pipeline side's run directory, read once (the ``load`` message) before any child
    is forked: every child finds its inputs in memory."""

    def __init__(self, directory: Path, activations: list[dict[str, Any]]) -> None:
        self.activations = {a["id"]: a for a in activations}
        self.files: dict[str, bytes] = {}
        for path in directory.iterdir():
            if path.is_file():
                self.files[path.name] = path.read_bytes()

    def inputs(self, ident: int, op: str) -> tuple[bytes, bytes, bytes | None, int]:
        activation = self.activations[ident]
        snapshot = self.files[f"a{ident}.snapshot"]
        if op == "pre-memory":
            snapshot = _snapshot_with_memory(snapshot, self.files[f"a{ident}.pre-memory"])
        envelope = self.files[f"a{ident}.envelope"] or None
        traces = self.files[activation["traces"]]
        return snapshot, traces, envelope, int(activation["seq"])


def _child(plan: dict[str, Any], run: _Run, files: AgentFiles, task: dict[str, Any]) -> dict[str, Any]:
    snapshot, traces, envelope, seq = run.inputs(task["activation"], task["op"])
    tracing = task["op"] == "trace"
    settings = plan.get("hitl_settings")
    options = ReplayOptions(
        snapshot=snapshot,
        traces=(traces,),
        event=envelope,
        agent=plan["agent"],
        registry=plan["registry"],
        hitl=plan.get("hitl") or None,
        hitl_policy=HitlPolicy(**settings) if settings and not plan.get("hitl") else None,
        hitl_label="the bundles' policy" if settings and not plan.get("hitl") else "",
        seq=seq,
        # A traced re-run runs in this thread (no time-limit thread), where the tracer is.
        time_limit=None if tracing else plan["time_limit"],
        naming=replay_naming(naming_of(plan)),
    )
    if tracing:
        with trace_lines(files) as entries:
            result = replay(options)
        return {"outcome": outcome_of(result), "lines": entries}
    return {"outcome": outcome_of(replay(options))}


def _fork(plan: dict[str, Any], run: _Run, files: AgentFiles, task: dict[str, Any]) -> tuple[int, int]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one replay, its answer, and out
        # No collection in a child that lives for one replay: a collection walks (and so
        # copies, page by page) the objects it shares with the worker.
        gc.disable()
        os.close(read_end)
        code = 0
        try:
            answer: dict[str, Any] = _child(plan, run, files, task)
        except BaseException as exc:  # reported to the parent, never a traceback of ours
            answer = {"failed": f"{type(exc).__name__}: {exc}"}
            code = 1
        try:
            data = json.dumps(answer).encode()
            view = memoryview(data)
            while view:
                written = os.write(write_end, view)
                view = view[written:]
            os.close(write_end)
        finally:
            # The fork's end: no atexit, no parent's buffers. Through the guard: its os._exit
            # refuses while a re-run abandoned at its time limit keeps the blocks in force.
            end_process(code)
    os.close(write_end)
    return pid, read_end


def serve_replays(plan: dict[str, Any], files: AgentFiles, tasks: IO[str], answers: IO[str]) -> None:
    """Answer the tasks read from ``tasks`` (JSON lines) until it ends; one line each.

    The first line after ``ready`` is ``{"op": "load", "activations": [...]}``: the run
    directory is complete then.
    """
    import contextlib
    import importlib

    run: _Run | None = None
    imported = _import_agent_code(plan)
    gc.collect()
    gc.freeze()  # what is imported now stays out of every later collection
    limit = plan["time_limit"]
    backstop = 2 * limit + BACKSTOP_GRACE if limit else None
    children: dict[int, tuple[int, int, float, bytearray]] = {}  # fd -> (task, pid, started, data)

    def send(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    send({"ready": True, "pid": os.getpid()})
    open_input = True
    source = tasks.fileno()  # read raw: a line in the text buffer is invisible to select()
    pending = bytearray()
    while open_input or children:
        readable = [source] if open_input else []
        ready, _, _ = select.select([*readable, *children], [], [], 1.0)
        for fd in ready:
            if fd == source:
                chunk = os.read(source, 1 << 16)
                if not chunk:
                    open_input = False
                pending.extend(chunk)
                while b"\n" in pending:
                    line, _, rest = bytes(pending).partition(b"\n")
                    pending = bytearray(rest)
                    task = json.loads(line)
                    if task.get("op") == "load":
                        run = _Run(Path(plan["run"]), task["activations"])
                        continue
                    if imported is not None:  # every replay under this condition: that
                        send({"id": task["id"], "answer": imported})
                        continue
                    if run is None:
                        raise RuntimeError("a replay task before the run directory was loaded")
                    pid, child = _fork(plan, run, files, task)
                    children[child] = (task["id"], pid, time.monotonic(), bytearray())
                continue
            ident, pid, started, data = children[fd]
            chunk = os.read(fd, 1 << 20)
            if chunk:
                data.extend(chunk)
                continue
            os.close(fd)
            del children[fd]
            _, status = os.waitpid(pid, 0)
            answer = _answer(data, status)
            if "deepdiff" not in sys.modules and _diverged(answer):
                # A divergence's detail is rendered with DeepDiff (a second to import, with
                # numpy): imported here once one replay needed it, every later child has it.
                # A clean agent's replays never do.
                with contextlib.suppress(ImportError):
                    importlib.import_module("deepdiff")
            send({"id": ident, "answer": answer})
        if backstop is not None:
            now = time.monotonic()
            for fd, (ident, pid, started, _) in list(children.items()):
                if now - started > backstop:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    os.close(fd)
                    del children[fd]
                    send({"id": ident, "answer": {"failed": f"killed after {now - started:.0f} s: "
                                                  "agent code held the interpreter past the time limit"}})  # fmt: skip


def _diverged(answer: dict[str, Any]) -> bool:
    outcome = answer.get("outcome")
    return isinstance(outcome, dict) and outcome.get("verdict") == "diverged"


def _answer(data: bytearray, status: int) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = json.loads(bytes(data))
        return answer
    except ValueError:
        if os.WIFSIGNALED(status):
            how = f"killed by signal {os.WTERMSIG(status)}"
        else:
            how = f"exit code {os.WEXITSTATUS(status)}"
        return {"failed": f"the replay process ended without an answer ({how})"}
