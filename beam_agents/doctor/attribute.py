"""From what was seen and what changed to findings: each cause named at its line.

``Evidence`` of two kinds meets here. The watcher's observations of the pipeline's
run say what agent code called, where. The replays under each condition say what
changed (``change_of``: a divergence, a cache miss whose request differs from the
traced one, a blocked call; a cache miss of the *same* request, a failed
activation's uncommitted response, is no change: replay cannot judge past it).

1. Every direct call of a watched kind during an activation is a finding at its
   line, whatever the replays said (the samples may not have reached the value).
   Calls at import, and durations, are findings only where a replay changed.
2. A change no such call explains is looked into: a change in another process
   (the control) that the pre-image memory undoes is memory the activation
   overwrote (located at the memory read whose key it also wrote); else module
   state the pipeline's run carried (located at the statement writing it); a
   change under one condition only is located by the line trace of the two runs
   (``linetrace.first_difference``), its cause the condition's (another hash seed:
   hash order; the clock; files for another directory; the environment).
3. What still has no line is ``unexplained``, with its evidence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from beam_agents.doctor.conditions import Condition, Role
from beam_agents.doctor.findings import (
    REMEDIES,
    Cause,
    Consequence,
    Evidence,
    EvidenceKind,
    Finding,
)
from beam_agents.doctor.linetrace import Difference
from beam_agents.doctor.watch import Kind, Observation

__all__ = ["Change", "Diagnosis", "attribute", "change_of", "display_path"]

CONDITION_CAUSE = {"clock": Cause.WALL_CLOCK, "cwd": Cause.FILES, "env": Cause.ENVIRONMENT}
"""The cause of a change only one condition makes (``hash-seed-N``: hash order)."""

def _any(condition: Condition) -> bool:
    return True


_EXPLAINS: dict[str, Callable[[Condition], bool]] = {
    # A value that differs in every run (or a call every replay refuses): any replay.
    Kind.RANDOM: _any,
    Kind.DURATION: _any,
    Kind.NETWORK: _any,
    Kind.PROCESS: _any,
    Kind.FILE_WRITE: _any,
    # The wall clock: the replays that move it. The control runs on the same clock, moved by
    # a few seconds only: a control change in an activation that read it is the clock's
    # only when nothing else explains it (``_control_change``).
    Kind.CLOCK: lambda c: bool(c.clock_shift_s),
    Kind.ENV: lambda c: c.other_env,
    Kind.FILE_READ: lambda c: c.other_cwd or c.other_env,
}
"""Which replays a watched call can explain a change of (by what they perturb)."""


def display_path(path: str) -> str:
    """``path`` relative to the working directory when inside it."""
    if not path:
        return path
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def key_label(key_hex: str) -> str:
    try:
        text = bytes.fromhex(key_hex).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return key_hex
    return text if text.isprintable() and text else key_hex


@dataclass(frozen=True)
class Change:
    """How a replay differed from the pipeline's run."""

    verdict: str
    exit_code: int
    text: str
    """E.g. ``diverged at event 2 TOOL_CALL 'lookup' (attributes['beam_agents.args_sha256'])``."""
    event_index: int | None = None


def change_of(answer: dict[str, Any]) -> Change | None:
    """What a replay's answer changed (None: it reproduced, or stopped where replay cannot
    judge, at a response the pipeline never committed)."""
    if "failed" in answer:
        return Change("error", 2, f"failed in its replay process: {answer['failed']}")
    outcome = answer["outcome"]
    verdict, code = outcome["verdict"], outcome["exit_code"]
    if verdict in ("reproduced", "what-if"):
        return None
    divergence = outcome["divergence"]
    if verdict == "diverged" and divergence is not None:
        traced = f"{divergence['kind']} '{divergence['name']}'"
        other = divergence.get("replayed") or {}
        if "kind" in other:
            replayed = f"{other['kind']} '{other.get('name', divergence['name'])}'"
            text = (
                f"diverged at event {divergence['index']}: the replay has {replayed} where the "
                f"trace has {traced}"
            )
        else:
            fields = ", ".join(divergence["fields"][:3])
            how = {"missing": " (missing from the re-run)", "extra": " (extra in the re-run)"}.get(
                divergence["how"], f": {fields}" if fields else ""
            )
            text = f"diverged at event {divergence['index']} {traced}{how}"
        return Change(verdict, code, text, divergence["index"])
    miss = outcome["cache_miss"]
    if miss is not None:
        if miss["traced_key"] == miss["key"]:
            return None  # the same request: its response was never committed (a failure)
        differs = ", ".join(miss["differences"][:3])
        return Change(
            verdict,
            code,
            f"missed the cache at event {miss['index']} LLM_CALL '{miss['model']}': the request "
            f"differs from the traced one" + (f" ({differs})" if differs else ""),
            miss["index"],
        )
    tool_miss = outcome["tool_miss"]
    if tool_miss is not None:
        if tool_miss["traced_args"] == tool_miss["args"]:
            return None
        differs = ", ".join(tool_miss["differences"][:3])
        return Change(
            verdict,
            code,
            f"missed the tool cache at event {tool_miss['index']} TOOL_CALL "
            f"'{tool_miss['tool']}': its arguments differ" + (f" ({differs})" if differs else ""),
            tool_miss["index"],
        )
    if outcome["blocked"]:
        return Change(verdict, code, f"was refused by replay's guard: {outcome['blocked'][0]}")
    # A change's text is a verb phrase ("seq 1 of k diverged at ...", "an operator ... gets
    # irreproducible (exit 3): it was ..."); replay's reason is a sentence of its own.
    said = outcome["reason"] or outcome["error"]
    if verdict == "error":
        return Change(verdict, code, f"stopped with a usage error: {said}")
    return Change(verdict, code, f"was {verdict}: {said}")


@dataclass
class Diagnosis:
    """Everything attribution reads."""

    activations: list[dict[str, Any]]
    observations: list[Observation]
    carried: list[dict[str, Any]]
    conditions: list[Condition]
    changes: dict[tuple[str, int], Change | None]
    """``(condition name, activation id)`` -> what changed (None: nothing)."""
    pre_memory: dict[int, Change | None] = field(default_factory=dict)
    """Activation id -> what changed when replayed from its pre-image memory."""
    differences: dict[tuple[str, int], Difference | None] = field(default_factory=dict)
    """``(condition, activation id)`` -> the first line differing from the control's run."""


def _who(activation: dict[str, Any]) -> str:
    return f"seq {activation['seq']} of {key_label(activation['key'])}"


def _api_text(o: Observation) -> str:
    if o.kind == Kind.ENV:
        return f"os.environ[{o.detail!r}]" if o.detail else o.api
    if o.kind == Kind.MEMORY_READ:
        return f"ctx.memory[{o.detail!r}]"
    if o.api.endswith(")") or " " in o.api:
        return o.api
    return f"{o.api}()"


def _cause_of(o: Observation) -> Cause | None:
    if o.kind in (Kind.NETWORK, Kind.PROCESS):
        if o.tool:
            return Cause.UNRECORDED_TOOL
        return Cause.NETWORK if o.kind == Kind.NETWORK else Cause.PROCESS
    return {
        Kind.CLOCK: Cause.WALL_CLOCK,
        Kind.DURATION: Cause.WALL_CLOCK,
        Kind.RANDOM: Cause.RANDOMNESS,
        Kind.ENV: Cause.ENVIRONMENT,
        Kind.FILE_READ: Cause.FILES,
        Kind.FILE_WRITE: Cause.FILES,
    }.get(o.kind)


def _what(cause: Cause, o: Observation) -> str:
    at = f"{display_path(o.file)}:{o.line}"
    if cause is Cause.UNRECORDED_TOOL:
        verb = "reaches" if o.kind == Kind.NETWORK else "starts"
        return (
            f"read-only tool {o.tool!r} {verb} {o.detail} ({o.api} at {at}) but is not "
            "recorded=True"
        )
    if cause in (Cause.NETWORK, Cause.PROCESS):
        verb = "reaches" if o.kind == Kind.NETWORK else "starts"
        return f"agent code {verb} {o.detail} ({o.api}) outside any tool at {at}"
    if cause is Cause.FILES:
        verb = "written" if o.kind == Kind.FILE_WRITE else "read"
        return f"file {display_path(o.detail)} {verb} ({o.api}) at {at}"
    verb = "read" if cause in (Cause.WALL_CLOCK, Cause.ENVIRONMENT) else "called"
    where = f" in tool {o.tool!r}" if o.tool else ""
    return f"{_api_text(o)} {verb} at {at}{where}"


class _Findings:
    """Findings by (cause, file, line), merged as evidence arrives."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self.d = diagnosis
        self.by_activation = {a["id"]: a for a in diagnosis.activations}
        self.found: dict[tuple[Cause, str, int, str], dict[str, Any]] = {}
        # Control first (what an operator gets), each perturbation alone, then the screens.
        self.order = sorted(diagnosis.conditions, key=lambda c: c.role is Role.SCREEN)

    def add(
        self,
        cause: Cause,
        *,
        what: str,
        file: str,
        line: int,
        api: str,
        tool: str = "",
        evidence: Iterable[Evidence] = (),
        activations: Iterable[int] = (),
        conditions: Iterable[str] = (),
    ) -> None:
        """Add (or add to) the finding at ``(cause, file, line, api)``; ``conditions``: the
        replays whose changes it explains (its consequence is read off those)."""
        key = (cause, file, line, api)
        entry = self.found.setdefault(
            key,
            {"what": what, "tool": tool, "evidence": [], "activations": set(),
             "conditions": set()},
        )  # fmt: skip
        for item in evidence:
            if item not in entry["evidence"]:
                entry["evidence"].append(item)
        entry["activations"].update(activations)
        entry["conditions"].update(conditions)

    def changed_evidence(self, ids: Iterable[int], conditions: Iterable[str]) -> list[Evidence]:
        """One change per condition of ``conditions``, shown as evidence: the control's and
        each perturbation's alone; the screens' only when none of those changed."""
        names = set(conditions)
        ids = sorted(ids)
        found = self._changes(ids, [c for c in self.order if c.name in names and
                                    c.role is not Role.SCREEN])  # fmt: skip
        return found or self._changes(ids, [c for c in self.order if c.name in names])

    def _changes(self, ids: list[int], conditions: list[Condition]) -> list[Evidence]:
        found = []
        for condition in conditions:
            for ident in ids:
                change = self.d.changes.get((condition.name, ident))
                if change is None:
                    continue
                activation = self.by_activation[ident]
                found.append(
                    Evidence(
                        EvidenceKind.CHANGED,
                        f"replayed {condition.description}, {_who(activation)} {change.text}",
                        condition=condition.name,
                        entity_key=activation["key"],
                        seq=activation["seq"],
                        event_index=change.event_index,
                    )
                )
                break  # one activation per condition is enough to show it
        return found

    def consequence(self, ids: set[int], conditions: set[str]) -> Consequence:
        for condition in self.order:
            if condition.name not in conditions:
                continue
            for ident in sorted(ids):
                change = self.d.changes.get((condition.name, ident))
                if change is not None:
                    activation = self.by_activation[ident]
                    said = change.text.removeprefix(f"was {change.verdict}: ")
                    it = "" if said is not change.text else "it "
                    return Consequence(
                        change.verdict,
                        change.exit_code,
                        f"an operator replaying {_who(activation)} {condition.description} "
                        f"gets {change.verdict} (exit {change.exit_code}): {it}{said}",
                        condition.name,
                    )
        return Consequence(
            "reproduced",
            0,
            "these samples still replayed: the value reached no traced event (a request, a "
            "tool's arguments, an intent, an output, memory); the first input where it does "
            "replays diverged (exit 1) or as a cache miss (exit 3)",
        )

    def findings(self) -> list[Finding]:
        out = []
        for (cause, file, line, api), entry in self.found.items():
            ids: set[int] = entry["activations"]
            evidence: list[Evidence] = entry["evidence"]
            out.append(
                Finding(
                    cause=cause,
                    what=entry["what"],
                    file=display_path(file),
                    line=line,
                    api=api,
                    evidence=tuple(evidence[:6]),
                    consequence=self.consequence(ids, entry["conditions"]),
                    remedy=REMEDIES[cause],
                    tool=entry["tool"],
                    activations=len(ids),
                )
            )
        order = list(Cause)
        out.sort(key=lambda f: (order.index(f.cause), f.file, f.line, f.api))
        return out


def attribute(d: Diagnosis) -> tuple[list[Finding], dict[str, Any]]:
    """The findings, and what is left for the line traces and pre-image replays to settle
    (``needs``: ``pre_memory`` activation ids, ``traces`` (condition, activation id) pairs)."""
    findings = _Findings(d)
    explained: set[tuple[str, int]] = set()
    # 1. What the watcher saw.
    seen: dict[tuple[Cause, str, int, str], list[Observation]] = {}
    for o in d.observations:
        cause = _cause_of(o)
        if cause is None or not o.direct:
            continue
        # One finding per line: a connection is resolved, then connected (three audit events).
        what = o.kind if o.kind in (Kind.NETWORK, Kind.PROCESS) else f"{o.api}:{o.detail}"
        seen.setdefault((cause, o.file, o.line, what), []).append(o)
    clock_read: dict[int, tuple[Cause, str, int, str]] = {}  # activation -> its clock finding
    for (cause, file, line, _), observed in seen.items():
        first = observed[0]
        ids = {o.activation for o in observed if o.phase == "activation" and o.activation >= 0}
        perturbs = _EXPLAINS.get(first.kind, _any)
        names = [c.name for c in d.conditions if perturbs(c)]
        changed = findings.changed_evidence(ids, names)
        if first.phase == "import":
            continue  # module state made at import: judged by what it changes (step 2)
        if first.kind == Kind.DURATION and not changed:
            continue  # a duration (latency logging) that reached nothing traced
        for ident in ids:
            for name in names:
                explained.add((name, ident))
        api = (
            _api_text(first)
            if first.kind not in (Kind.NETWORK, Kind.PROCESS, Kind.FILE_READ, Kind.FILE_WRITE)
            else f"{first.api} {first.detail}"
        )
        if first.kind == Kind.CLOCK:
            for ident in ids:
                clock_read.setdefault(ident, (cause, file, line, api))
        where = (
            f"during {_who(findings.by_activation[min(ids)])}"
            + (f" (and {len(ids) - 1} more activation(s))" if len(ids) > 1 else "")
            if ids
            else ("while the agent's modules were imported" if first.phase == "import"
                  else "outside any activation (a thread or a hook)")
        )  # fmt: skip
        inside = f", inside read-only tool {first.tool!r}" if first.tool else ""
        findings.add(
            cause,
            what=_what(cause, first),
            file=file,
            line=line,
            api=api,
            tool=first.tool,
            evidence=[Evidence(EvidenceKind.SEEN, f"seen {where}{inside}"), *changed],
            activations=ids,
            conditions=names,
        )
    needs: dict[str, Any] = {"pre_memory": [], "traces": []}
    # 2. Changes no call explains.
    control = d.conditions[0].name
    for a in d.activations:
        ident = a["id"]
        if d.changes.get((control, ident)) is not None:
            if (control, ident) in explained:
                continue
            if ident not in d.pre_memory:
                needs["pre_memory"].append(ident)
                continue
            _control_change(d, findings, a, clock_read.get(ident))
            for condition in d.conditions:
                explained.add((condition.name, ident))
            continue
        alone = False  # a single perturbation changed it
        for condition in d.conditions[1:]:
            if condition.role is Role.SCREEN or d.changes.get((condition.name, ident)) is None:
                continue
            alone = True
            if (condition.name, ident) in explained:
                continue
            pair = (condition.name, ident)
            if pair not in d.differences:
                needs["traces"].append(pair)
                continue
            _condition_change(d, findings, a, condition, d.differences[pair])
        if not alone:
            _screen_change(d, findings, a, explained)
    return findings.findings(), needs


def _screen_change(
    d: Diagnosis, findings: _Findings, a: dict[str, Any], explained: set[tuple[str, int]]
) -> None:
    """A screen changed the activation, no single perturbation did, and no watched call
    explains it: the perturbations matter together (or the difference comes and goes)."""
    ident = a["id"]
    screens = [
        c
        for c in d.conditions
        if c.role is Role.SCREEN
        and d.changes.get((c.name, ident)) is not None
        and (c.name, ident) not in explained
    ]
    if not screens:
        return
    findings.add(
        Cause.UNEXPLAINED,
        what=f"{_who(a)} changed when replayed {screens[0].description}, and under no "
        "perturbation alone",
        file="",
        line=0,
        api=f"{screens[0].name} {a['key']}:{a['seq']}",
        evidence=findings.changed_evidence([ident], [c.name for c in screens]),
        activations=[ident],
        conditions=[c.name for c in screens],
    )


def _control_change(
    d: Diagnosis,
    findings: _Findings,
    a: dict[str, Any],
    clock_read: tuple[Cause, str, int, str] | None,
) -> None:
    """A change in another process, nothing perturbed: memory the activation overwrote,
    module state an earlier one left, the wall clock it read (only when neither), or
    unexplained."""
    ident = a["id"]
    control = d.conditions[0]
    change = d.changes[(control.name, ident)]
    assert change is not None
    shown = findings.changed_evidence([ident], [control.name])
    if d.pre_memory.get(ident, change) is None:
        # Undone by the memory it started from: it read what it overwrote.
        reads = [o for o in d.observations if o.kind == Kind.MEMORY_READ and o.phase == "activation"
                 and o.activation == ident]  # fmt: skip
        writes = {o.detail for o in d.observations if o.kind == Kind.MEMORY_WRITE
                  and o.activation == ident}  # fmt: skip
        read = next((o for o in reads if o.detail in writes), reads[0] if reads else None)
        name = read.detail if read else "?"
        at = f"{display_path(read.file)}:{read.line}" if read else "an unknown line"
        findings.add(
            Cause.OWN_MEMORY,
            what=f"ctx.memory[{name!r}] read at {at}, and overwritten by the same activation",
            file=read.file if read else "",
            line=read.line if read else 0,
            api=f"ctx.memory[{name!r}]",
            evidence=[
                *shown,
                Evidence(
                    EvidenceKind.LOCATED,
                    f"replayed from the memory the key had before it (the snapshot's caches kept), "
                    f"{_who(a)} reproduced: a snapshot taken after it holds its own write",
                    entity_key=a["key"],
                    seq=a["seq"],
                ),
            ],
            activations=[ident],
            conditions=[control.name],
        )
        return
    earlier = [c for c in d.carried if min(c["activations"]) < ident]
    if earlier:
        # Each value that changed before this activation, with where it changed first.
        moved: dict[tuple[str, str], tuple[dict[str, Any], list[int]]] = {}
        for carried in earlier:
            for value in carried["values"]:
                held = moved.setdefault((value["module"], value["name"]), (value, []))
                held[1].append(min(carried["activations"]))
        for value, during in moved.values():
            first = d.activations[min(during)]
            more = len(set(during)) - 1
            findings.add(
                Cause.MODULE_STATE,
                what=f"{value['name']} (module {value['module']}) is written at "
                f"{display_path(value['file'])}:{value['line']} and carried to later activations",
                file=value["file"],
                line=value["line"],
                api=f"module state {value['module']}.{value['name']}",
                evidence=[
                    Evidence(
                        EvidenceKind.SEEN,
                        f"{value['name']} changed during {_who(first)}"
                        + (f" (and {more} more input(s))" if more else "")
                        + " in the pipeline's run",
                        entity_key=first["key"],
                        seq=first["seq"],
                    ),
                    *shown,
                ],
                activations=[ident],
                conditions=[control.name],
            )
        return
    if clock_read is not None:
        # It read the wall clock, and nothing else explains the change: the clock moved
        # between the pipeline's run and the replay (a value read to the second, say).
        cause, file, line, api = clock_read
        findings.add(cause, what=findings.found[clock_read]["what"], file=file, line=line,
                     api=api, evidence=shown, activations=[ident],
                     conditions=[control.name])  # fmt: skip
        return
    findings.add(
        Cause.UNEXPLAINED,
        what=f"{_who(a)} changed when replayed {control.description}",
        file="",
        line=0,
        api=f"{control.name} {a['key']}:{a['seq']}",
        evidence=shown,
        activations=[ident],
        conditions=[control.name],
    )


def _condition_change(
    d: Diagnosis,
    findings: _Findings,
    a: dict[str, Any],
    condition: Condition,
    difference: Difference | None,
) -> None:
    cause = (
        Cause.HASH_ORDER
        if condition.name.startswith("hash-seed")
        else CONDITION_CAUSE.get(condition.name, Cause.UNEXPLAINED)
    )
    shown = findings.changed_evidence([a["id"]], [condition.name])
    if difference is None and cause is not Cause.UNEXPLAINED:
        # Not traced (past MAX_TRACES for the condition): with the line the traced ones found.
        for (found_cause, file, line, api), entry in findings.found.items():
            if found_cause is cause and api == _condition_api(cause, condition):
                findings.add(found_cause, what=entry["what"], file=file, line=line, api=api,
                             evidence=shown, activations=[a["id"]],
                             conditions=[condition.name])  # fmt: skip
                return
    if difference is None:
        findings.add(
            Cause.UNEXPLAINED,
            what=f"{_who(a)} changed when replayed {condition.description}",
            file="",
            line=0,
            api=f"{condition.name} {a['key']}:{a['seq']}",
            evidence=shown,
            activations=[a["id"]],
            conditions=[condition.name],
        )
        return
    names = ", ".join(n for n in difference.names if n != "<returned>")
    values = (
        f" ({names} differ{'s' if len(difference.names) == 1 else ''})"
        if names
        else (" (its return value differs)" if difference.names else " (another line runs next)")
    )
    at = f"{display_path(difference.file)}:{difference.line}"
    what = {
        Cause.HASH_ORDER: f"a hash-seeded order (set iteration, hash()) reaches values at {at}",
        Cause.WALL_CLOCK: f"the wall clock reaches values at {at}",
        Cause.FILES: f"the working directory reaches values at {at}",
        Cause.ENVIRONMENT: f"the environment reaches values at {at}",
    }.get(cause, f"values differ at {at}")
    findings.add(
        cause,
        what=what,
        file=difference.file,
        line=difference.line,
        api=_condition_api(cause, condition),
        evidence=[
            *shown,
            Evidence(
                EvidenceKind.LOCATED,
                f"the first line whose values differ between the replay "
                f"{d.conditions[0].description} and the one {condition.description}: {at}{values}",
                condition=condition.name,
                entity_key=a["key"],
                seq=a["seq"],
            ),
        ],
        activations=[a["id"]],
        conditions=[condition.name],
    )


def _condition_api(cause: Cause, condition: Condition) -> str:
    return "hash-seeded order" if cause is Cause.HASH_ORDER else condition.name
