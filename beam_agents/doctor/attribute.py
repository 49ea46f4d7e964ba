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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from beam_agents.doctor.conditions import Condition
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

_EXPLAINS: dict[str, set[str] | None] = {
    Kind.CLOCK: None,  # None: a change under any condition
    Kind.RANDOM: None,
    Kind.NETWORK: None,
    Kind.PROCESS: None,
    Kind.FILE_WRITE: None,
    Kind.ENV: {"env"},
    Kind.FILE_READ: {"cwd", "env"},
}


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
        return Change("error", 2, f"the replay process failed: {answer['failed']}")
    outcome = answer["outcome"]
    verdict, code = outcome["verdict"], outcome["exit_code"]
    if verdict in ("reproduced", "what-if"):
        return None
    divergence = outcome["divergence"]
    if verdict == "diverged" and divergence is not None:
        fields = ", ".join(divergence["fields"][:3])
        how = {"missing": " (missing from the re-run)", "extra": " (extra in the re-run)"}.get(
            divergence["how"], f": {fields}" if fields else ""
        )
        return Change(
            verdict,
            code,
            f"diverged at event {divergence['index']} {divergence['kind']} "
            f"'{divergence['name']}'{how}",
            divergence["index"],
        )
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
    return Change(verdict, code, outcome["reason"] or outcome["error"])


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
        self.ident = {(a["key"], a["seq"]): a["id"] for a in diagnosis.activations}
        self.found: dict[tuple[Cause, str, int, str], dict[str, Any]] = {}

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
    ) -> None:
        key = (cause, file, line, api)
        entry = self.found.setdefault(
            key,
            {"what": what, "tool": tool, "evidence": [], "activations": set()},
        )
        for item in evidence:
            if item not in entry["evidence"]:
                entry["evidence"].append(item)
        entry["activations"].update(activations)

    def changed_evidence(self, ids: Iterable[int], conditions: set[str] | None) -> list[Evidence]:
        found = []
        for condition in self.d.conditions:
            if conditions is not None and condition.name not in conditions:
                continue
            for ident in sorted(ids):
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

    def consequence(self, ids: set[int]) -> Consequence:
        for condition in self.d.conditions:  # the control first: what an operator gets
            for ident in sorted(ids):
                change = self.d.changes.get((condition.name, ident))
                if change is not None:
                    activation = self.by_activation[ident]
                    return Consequence(
                        change.verdict,
                        change.exit_code,
                        f"an operator replaying {_who(activation)} {condition.description} "
                        f"gets {change.verdict} (exit {change.exit_code}): it {change.text}",
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
                    consequence=self.consequence(ids),
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
    for (cause, file, line, _), observed in seen.items():
        first = observed[0]
        ids = {findings.ident[(o.entity_key, o.seq)] for o in observed if o.phase == "activation"
               and (o.entity_key, o.seq) in findings.ident}  # fmt: skip
        scope = _EXPLAINS.get(first.kind)
        changed = findings.changed_evidence(ids, scope)
        if first.phase == "import":
            continue  # module state made at import: judged by what it changes (step 2)
        if first.kind == Kind.DURATION and not changed:
            continue  # a duration (latency logging) that reached nothing traced
        for ident in ids:
            for condition in d.conditions:
                if scope is None or condition.name in scope:
                    explained.add((condition.name, ident))
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
            api=_api_text(first) if first.kind not in (Kind.NETWORK, Kind.PROCESS, Kind.FILE_READ,
                                                       Kind.FILE_WRITE) else f"{first.api} {first.detail}",
            tool=first.tool,
            evidence=[Evidence(EvidenceKind.SEEN, f"seen {where}{inside}"), *changed],
            activations=ids,
        )
    needs: dict[str, Any] = {"pre_memory": [], "traces": []}
    # 2. Changes no call explains.
    control = d.conditions[0].name
    for a in d.activations:
        ident = a["id"]
        if d.changes.get((control, ident)) is not None:
            if (control, ident) in explained:
                continue
            if ident not in d.pre_memory and a.get("has_pre_memory"):
                needs["pre_memory"].append(ident)
                continue
            _control_change(d, findings, a)
            for condition in d.conditions:
                explained.add((condition.name, ident))
            continue
        for condition in d.conditions[1:]:
            if d.changes.get((condition.name, ident)) is None or (condition.name, ident) in explained:
                continue
            pair = (condition.name, ident)
            if pair not in d.differences:
                needs["traces"].append(pair)
                continue
            _condition_change(d, findings, a, condition, d.differences[pair])
    return findings.findings(), needs


def _control_change(d: Diagnosis, findings: _Findings, a: dict[str, Any]) -> None:
    ident = a["id"]
    control = d.conditions[0]
    change = d.changes[(control.name, ident)]
    assert change is not None
    shown = findings.changed_evidence([ident], {control.name})
    if a.get("has_pre_memory") and d.pre_memory.get(ident, change) is None:
        # Undone by the memory it started from: it read what it overwrote.
        reads = [o for o in d.observations if o.kind == Kind.MEMORY_READ and o.phase == "activation"
                 and (o.entity_key, o.seq) == (a["key"], a["seq"])]  # fmt: skip
        writes = {o.detail for o in d.observations if o.kind == Kind.MEMORY_WRITE
                  and (o.entity_key, o.seq) == (a["key"], a["seq"])}  # fmt: skip
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
        )
        return
    earlier = [c for c in d.carried if min(c["activations"]) < ident]
    if earlier:
        for carried in earlier:
            for value in carried["values"]:
                first = d.activations[min(carried["activations"])]
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
                            f"{value['name']} changed during {_who(first)} in the pipeline's run",
                            entity_key=first["key"],
                            seq=first["seq"],
                        ),
                        *shown,
                    ],
                    activations=[ident],
                )
        return
    findings.add(
        Cause.UNEXPLAINED,
        what=f"{_who(a)} changed when replayed {control.description}",
        file="",
        line=0,
        api=f"{control.name} {a['key']}:{a['seq']}",
        evidence=shown,
        activations=[ident],
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
    shown = findings.changed_evidence([a["id"]], {condition.name})
    if difference is None and cause is not Cause.UNEXPLAINED:
        # Not traced (past MAX_TRACES for the condition): with the line the traced ones found.
        for (found_cause, file, line, api), entry in findings.found.items():
            if found_cause is cause and api == _condition_api(cause, condition):
                findings.add(found_cause, what=entry["what"], file=file, line=line, api=api,
                             evidence=shown, activations=[a["id"]])  # fmt: skip
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
    )


def _condition_api(cause: Cause, condition: Condition) -> str:
    return "hash-seeded order" if cause is Cause.HASH_ORDER else condition.name
