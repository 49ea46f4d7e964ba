"""``diagnose``: the doctor's whole run, from sample inputs to a ``DoctorReport``.

1. The samples are read here (``samples``), and nothing of the agent is imported in
   this process: agent code runs only in workers.
2. The pipeline's side runs in a fresh interpreter (``pipeline_side``), watched.
3. One replay worker per condition (``conditions``), started while the pipeline's side
   runs, each importing the agent once; every replay is a child forked from it, the
   modules as a fresh import leaves them (``replay_side``); at most ``jobs`` replays run
   at once. Every activation is replayed under the control and the screens (every
   perturbation at once); where a screen changed what the control did not, under each
   perturbation the screen holds, alone.
4. What no watched call explains is looked into: pre-image memory replays in the
   control, line traces in the control and the condition that changed it.
5. ``attribute`` names the findings; ``report`` renders them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from beam_agents.doctor.attribute import Change, Diagnosis, attribute, change_of, key_label
from beam_agents.doctor.conditions import (
    CLOCK_SHIFT_S,
    DEFAULT_HASH_SEEDS,
    Condition,
    Role,
    conditions,
    screened,
    worker_environment,
)
from beam_agents.doctor.linetrace import Difference, first_difference
from beam_agents.doctor.processes import Pool, Worker, WorkerFailed, ready
from beam_agents.doctor.refusal import PYTHON, DoctorInput, DoctorNaming, DoctorUsageError
from beam_agents.doctor.report import DoctorReport
from beam_agents.doctor.samples import load_samples
from beam_agents.doctor.watch import Observation, agent_roots

__all__ = ["DEFAULT_TIME_LIMIT", "MAX_TRACES", "diagnose"]

DEFAULT_TIME_LIMIT = 60.0
"""Seconds each replay's agent code may run (as ``beam-agents-replay --time-limit``)."""
MAX_TRACES = 2
"""Line-traced activations per condition (each costs two traced replays)."""


def _module_path(value: str, what: DoctorInput, naming: DoctorNaming) -> str:
    if not isinstance(value, str) or ":" not in value or not all(value.partition(":")[::2]):
        raise DoctorUsageError(
            f"{naming.given(what, repr(value))} is not of the form module:ATTR",
            f"e.g. {naming.given(what, 'myapp.agent:AGENT' if what is DoctorInput.AGENT else 'myapp.agent:TOOLS')}",
        )
    return value


def _sys_path() -> list[str]:
    cwd = os.getcwd()
    paths = [cwd]
    for entry in sys.path:
        path = os.path.abspath(entry) if entry else cwd
        if path not in paths and os.path.isdir(path):
            paths.append(path)
    return paths


def diagnose(
    *,
    agent: str,
    registry: str,
    events: Sequence[str | os.PathLike[str]] = (),
    bundles: Sequence[str | os.PathLike[str]] = (),
    script: str | os.PathLike[str] | dict[str, Any] | list[Any] | None = None,
    envelopes: Iterable[Any] = (),
    provider: str | None = None,
    hitl: str | None = None,
    jobs: int | None = None,
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    hash_seeds: Sequence[int] = DEFAULT_HASH_SEEDS,
    clock_shift_s: float = CLOCK_SHIFT_S,
    naming: DoctorNaming = PYTHON,
) -> DoctorReport:
    """Run sample activations through the pipeline's per-key step, replay each under the
    perturbations that must not matter, and name what makes the agent irreproducible.

    Args:
        agent: ``module:ATTR`` of the ``Agent``.
        registry: ``module:ATTR`` of its ``ToolRegistry``.
        events: Topic dumps (envelope streams, envelope files, or directories of ``*.pb``).
        bundles: Incident bundles (or directories of ``*.bundle``).
        script: A script of envelopes: a JSON file, or the document itself.
        envelopes: ``AgentEnvelope`` messages (or their bytes), in order.
        provider: ``module:ATTR`` of the model the samples run on: a provider, or a
            function returning one (``AgentConfig.provider_factory``); None: a stand-in
            that answers every request with a line naming its cache key.
        hitl: ``module:ATTR`` of the pipeline's ``HitlPolicy`` (default: ``HitlPolicy()``).
        jobs: Replays at once (default: the number of CPUs).
        time_limit: Seconds each replay's agent code may run (0 or None: no limit).
        hash_seeds: The other PYTHONHASHSEEDs replays run under (the pipeline's is 0).
        clock_shift_s: How far the ``clock`` condition moves the wall clock (0: not run).
        naming: How refusals name these inputs (the command line passes its flags).

    Returns:
        The report: ``exit_code`` 0 (clean) or 1 (findings), ``findings``, ``render()``,
        ``document()`` (``--json``), ``junit()``.

    Raises:
        DoctorUsageError: Inputs that are missing or wrong, agent code that does not
            import, or samples none of which ran (exit 2, one paragraph).
    """
    started = time.monotonic()
    agent = _module_path(agent, DoctorInput.AGENT, naming)
    registry = _module_path(registry, DoctorInput.REGISTRY, naming)
    for what, value in ((DoctorInput.PROVIDER, provider), (DoctorInput.HITL, hitl)):
        if value is not None:
            _module_path(value, what, naming)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise DoctorUsageError(f"{naming.given(DoctorInput.JOBS, jobs)}: must be 1 or more")
    if time_limit is not None and (not isinstance(time_limit, (int, float)) or time_limit < 0):
        raise DoctorUsageError(
            f"{naming.given(DoctorInput.TIME_LIMIT, time_limit)}: must be 0 or more seconds"
        )
    seeds = tuple(hash_seeds)
    if not all(isinstance(s, int) and 0 <= s <= 4_294_967_295 for s in seeds):
        raise DoctorUsageError(
            f"{naming.given(DoctorInput.HASH_SEEDS, list(seeds))}: each must be an integer "
            "from 0 to 4294967295 (PYTHONHASHSEED)"
        )
    if clock_shift_s:
        _require_time_machine()
    samples = load_samples(
        events=[os.fspath(e) for e in _listed(events)],
        bundles=[os.fspath(b) for b in _listed(bundles)],
        script=script,
        envelopes=envelopes,
        naming=naming,
    )
    limit = float(time_limit or 0)
    base_plan: dict[str, Any] = {
        "agent": agent,
        "registry": registry,
        "hitl": hitl,
        "sys_path": _sys_path(),
        "roots": agent_roots(agent, registry),
        "time_limit": limit,
        "naming": "cli" if naming.joiner == " " else "python",
    }
    work = Path(tempfile.mkdtemp(prefix="beam-agents-doctor-"))
    try:
        return _run(base_plan, samples, work, provider, seeds, clock_shift_s, jobs, limit, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _require_time_machine() -> None:
    """The shifted clock is time-machine's, which the ``doctor`` extra installs: said before
    anything runs (not as every clock-shifted worker's failure)."""
    import importlib.util

    from beam_agents._extras import MissingExtraError

    if importlib.util.find_spec("time_machine") is None:
        missing = MissingExtraError("the doctor's shifted wall clock", "time-machine", "doctor")
        raise DoctorUsageError(str(missing))


def _listed(value: Any) -> list[Any]:
    return [value] if isinstance(value, (str, os.PathLike)) else list(value)


def _run(
    base_plan: dict[str, Any],
    samples: Any,
    work: Path,
    provider: str | None,
    seeds: tuple[int, ...],
    clock_shift_s: float,
    jobs: int,
    limit: float,
    started: float,
) -> DoctorReport:
    run_dir = work / "run"
    run_dir.mkdir()
    environ = dict(os.environ)
    home = work / "home"
    home.mkdir()
    if samples.hitl is not None and not base_plan["hitl"]:
        base_plan = {**base_plan, "hitl_settings": samples.hitl}
    every = conditions(seeds, clock_shift_s)
    replay_plan = {**base_plan, "role": "replay", "run": str(run_dir)}
    workers: dict[str, Worker] = {}

    def start(condition: Condition) -> Worker:
        cwd = work / f"cwd-{condition.name}"
        cwd.mkdir()
        worker = workers[condition.name] = Worker(
            condition.name,
            {**replay_plan, "condition": condition.document()},
            env=worker_environment(condition, environ, str(home)),
            cwd=str(cwd) if condition.other_cwd else os.getcwd(),
            log=work / f"{condition.name}.log",
        )
        return worker

    try:
        pipeline = Worker(
            "pipeline",
            {
                **base_plan,
                "role": "pipeline",
                "provider": provider,
                "samples": samples.document(),
                "run": str(run_dir),
            },
            env=worker_environment(None, environ, str(home)),
            cwd=os.getcwd(),
            log=work / "pipeline.log",
        )
        # The control and the screens import the agent while the pipeline's side runs.
        first = [c for c in every if c.role is not Role.SINGLE]
        for condition in first:
            start(condition)
        try:
            answer = _pipeline_answer(pipeline, limit)
        finally:
            pipeline.close()
        record = _pipeline_record(answer)
        return _replay_all(
            record, samples, every, workers, start, jobs, base_plan, started
        )
    except WorkerFailed as failed:
        raise DoctorUsageError(
            f"a replay worker failed: {failed}", "this is a bug in beam-agents; please report it"
        ) from None
    finally:
        for worker in workers.values():
            worker.close()


def _pipeline_answer(pipeline: Worker, limit: float) -> dict[str, Any]:
    """The pipeline side's last answer; before it, the input each answer says is running.

    Each input may run for the time limit and a minute (an activation, its export and the
    doctor's bookkeeping); the import, for two minutes.

    Raises:
        DoctorUsageError: The worker ended, or an input ran past its time, naming the input.
    """
    running = ""
    while True:
        try:
            answer = pipeline.receive(
                None if not limit else limit + 60.0 if running else max(limit, 120.0)
            )
        except WorkerFailed as failed:
            if not running:
                raise DoctorUsageError(
                    f"the agent code did not import in the pipeline's worker: {failed}",
                    "import it yourself (python -c 'import MODULE') to see why",
                ) from None
            timed_out = "gave no answer" in str(failed)
            raise DoctorUsageError(
                f"agent code {'ran past the time limit' if timed_out else 'ended the process'}"
                f" in the pipeline's step while it ran {running}: {failed}",
                f"a pipeline's {'key would wait' if timed_out else 'worker would end'} there "
                "too, and the doctor cannot judge the samples past it: fix the agent, or leave "
                "that input out",
            ) from None
        if "running" not in answer:
            return answer
        running = answer["running"]


def _pipeline_record(answer: dict[str, Any]) -> dict[str, Any]:
    """The pipeline side's run record, or the refusal its answer makes."""
    if "refused" in answer:
        raise DoctorUsageError(answer["refused"])
    if "internal" in answer:
        raise DoctorUsageError(
            f"the pipeline's step failed: {answer['internal']}",
            "this is a bug in beam-agents or agent code that ended its process; "
            + (answer.get("traceback", "").strip().splitlines() or [""])[-1],
        )
    record: dict[str, Any] = answer["record"]
    activations = record["activations"]
    if not activations:
        raise DoctorUsageError(
            "no sample input ran an activation ("
            + "; ".join(record["notes"][:3] or ["nothing ran"])
            + ")",
            "pass inputs that start activations (events), with their answers after them",
        )
    if not any(a["committed"] for a in activations):
        first = activations[0]
        raise DoctorUsageError(
            f"every sample activation failed in the pipeline's step (the first, seq "
            f"{first['seq']} of {key_label(first['key'])}, with {first['error_type']}), so "
            "nothing could be checked",
            "pass --provider with the model your agent can parse (AgentConfig's "
            "provider_factory), or samples it can handle",
        )
    return record


def _replay_all(
    record: dict[str, Any],
    samples: Any,
    every: list[Condition],
    workers: dict[str, Worker],
    start: Any,
    jobs: int,
    base_plan: dict[str, Any],
    started: float,
) -> DoctorReport:
    """Every activation under the control and the screens, the single perturbations where a
    screen changed something, the closer looks, and the report."""
    activations: list[dict[str, Any]] = record["activations"]
    notes: list[str] = list(record["notes"])
    load = {"op": "load", "activations": activations}
    for worker in workers.values():
        worker.send(load)
    for worker in workers.values():
        ready(worker, timeout=120.0)
    pool = Pool(workers, jobs)
    changes: dict[tuple[str, int], Change | None] = {}
    replays: dict[int, dict[str, str]] = {a["id"]: {} for a in activations}

    def replay_each(tasks: list[tuple[str, dict[str, Any]]]) -> None:
        for task, answer in pool.run(tasks):
            name = task["worker"]
            changes[(name, task["activation"])] = change_of(answer)
            replays[task["activation"]][name] = (
                answer["outcome"]["verdict"] if "outcome" in answer else "error"
            )

    first = [c for c in every if c.role is not Role.SINGLE]
    replay_each([(c.name, {"op": "replay", "activation": a["id"]}) for a in activations
                 for c in first])  # fmt: skip
    # Where a screen changed a replay the control did not, each perturbation alone says which.
    control = first[0]
    singles = [c for c in every if c.role is Role.SINGLE]
    wanted: dict[str, list[int]] = {}
    for a in activations:
        if changes.get((control.name, a["id"])) is not None:
            continue
        for screen in first[1:]:
            if changes.get((screen.name, a["id"])) is not None:
                for single in screened(screen, singles):
                    ids = wanted.setdefault(single.name, [])
                    if a["id"] not in ids:
                        ids.append(a["id"])
    ran = [c for c in singles if c.name in wanted]
    for condition in ran:
        start(condition).send(load)
    for condition in ran:
        ready(workers[condition.name], timeout=120.0)
    replay_each([(c.name, {"op": "replay", "activation": ident}) for c in ran
                 for ident in wanted[c.name]])  # fmt: skip
    judged = [*first, *ran]
    diagnosis = Diagnosis(
        activations=activations,
        observations=[Observation.from_document(o) for o in record["observations"]],
        carried=record["carried"],
        conditions=judged,
        changes=changes,
    )
    findings, needs = attribute(diagnosis)
    if needs["pre_memory"] or needs["traces"]:
        _look_closer(diagnosis, needs, pool, judged)
        findings, _ = attribute(diagnosis)
    for note in _not_judged(activations, changes, control.name):
        notes.append(note)
    notes.extend(f"the watcher failed: {e}" for e in record["watch_errors"])
    return DoctorReport(
        agent=base_plan["agent"],
        registry=base_plan["registry"],
        provider=record["provider"],
        sources=samples.sources,
        keys=len({a["key"] for a in activations}),
        activations=tuple(
            {**{k: a[k] for k in ("key", "seq", "kind", "trigger", "committed", "error_type")},
             "replays": replays[a["id"]]}
            for a in activations
        ),
        conditions=tuple(
            {"name": c.name, "description": c.description, "role": c.role.value}
            for c in judged
        ),
        findings=tuple(findings),
        notes=tuple(notes),
        seconds=time.monotonic() - started,
        jobs=jobs,
        perturbations=tuple(c.description for c in every if c.role is Role.SINGLE),
        model={k: record[k] for k in ("model_name", "model_calls", "cache_hits", "provider_calls")},
    )


def _look_closer(
    diagnosis: Diagnosis, needs: dict[str, Any], pool: Pool, cond: list[Condition]
) -> None:
    control = cond[0].name
    tasks: list[tuple[str, dict[str, Any]]] = [
        (control, {"op": "pre-memory", "activation": ident}) for ident in needs["pre_memory"]
    ]
    per_condition: dict[str, int] = {}
    traced: list[tuple[str, int]] = []
    for name, ident in needs["traces"]:
        if per_condition.get(name, 0) >= MAX_TRACES:
            diagnosis.differences[(name, ident)] = None
            continue
        per_condition[name] = per_condition.get(name, 0) + 1
        traced.append((name, ident))
    wanted = {ident for _, ident in traced}
    for ident in sorted(wanted):
        tasks.append((control, {"op": "trace", "activation": ident}))
    for name, ident in traced:
        tasks.append((name, {"op": "trace", "activation": ident}))
    lines: dict[tuple[str, int], list[Any]] = {}
    for task, answer in pool.run(tasks):
        name, ident = task["worker"], task["activation"]
        if task["op"] == "pre-memory":
            diagnosis.pre_memory[ident] = change_of(answer)
        else:
            lines[(name, ident)] = answer.get("lines") or []
    for name, ident in sorted(traced, key=lambda pair: pair[1]):
        found: Difference | None = first_difference(
            lines.get((control, ident), []), lines.get((name, ident), [])
        )
        diagnosis.differences[(name, ident)] = found


def _not_judged(
    activations: list[dict[str, Any]], changes: dict[tuple[str, int], Change | None], control: str
) -> list[str]:
    failed = [a for a in activations if not a["committed"]]
    if not failed:
        return []
    shown = ", ".join(f"seq {a['seq']} of {key_label(a['key'])} ({a['error_type']})" for a in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return [
        f"{len(failed)} sample activation(s) failed in the pipeline's step: {shown}{more}; a "
        "failed activation commits nothing, so its replay is judged only up to its first "
        "model call"
    ]
