"""``DoctorReport``: what one doctor run established, and its three renderings.

``render()`` is the headless report, ``document()`` the ``--json`` document
(``format: beam-agents/doctor``, ``version``; docs/doctor.md lists every field),
``junit()`` the JUnit XML that gates a deploy: one test case per cause, failed by
its findings. Every text from agent code or inputs (file names, variable names,
addresses) goes through replay's one escaper before it reaches a terminal.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape as xml_escape

from beam_agents._version import __version__
from beam_agents.doctor.findings import CAUSE_TITLES, Cause, Finding
from beam_agents.replay.reporting.escape import escape

__all__ = ["DOCTOR_FORMAT", "DOCTOR_VERSION", "EXIT_CLEAN", "EXIT_FINDINGS", "DoctorReport"]

DOCTOR_FORMAT = "beam-agents/doctor"
DOCTOR_VERSION = 1
"""The ``--json`` document's version: a field is never removed or changes meaning within it."""
EXIT_CLEAN = 0
EXIT_FINDINGS = 1


@dataclass(frozen=True)
class DoctorReport:
    agent: str
    registry: str
    provider: str
    """The model the samples ran on (its name), ``doctor-stand-in`` when none was given."""
    sources: tuple[str, ...]
    keys: int
    activations: tuple[dict[str, Any], ...]
    """Each sample activation: ``key`` (hex), ``seq``, ``kind``, ``trigger``, ``committed``,
    ``error_type``, and ``replays`` ({condition: verdict})."""
    conditions: tuple[dict[str, str], ...]
    """Each condition replays ran under: ``name``, ``description`` and ``role``
    (``control``, ``screen``: every activation; ``single``: where a screen changed one)."""
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    jobs: int = 1
    perturbations: tuple[str, ...] = ()
    """Every perturbation a screen holds, as a single condition describes it."""
    model: dict[str, Any] = field(default_factory=dict)
    """The model calls of the samples: ``model_name`` (the provider name requests were
    keyed under), ``model_calls`` (LLM_CALLs traced), ``cache_hits`` (served from the
    key's cache: a bundle's recorded answers, or a repeated request) and
    ``provider_calls`` (answered by the provider)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0: no finding; 1: findings."""
        return EXIT_FINDINGS if self.findings else EXIT_CLEAN

    @property
    def clean(self) -> bool:
        return not self.findings

    # -- the headless report ---------------------------------------------------------------

    def render(self) -> str:
        failed = sum(1 for a in self.activations if not a["committed"])
        replays = sum(len(a["replays"]) for a in self.activations)
        lines = [
            f"beam-agents-replay doctor {__version__}",
            f"  agent:     {escape(self.agent)}",
            f"  registry:  {escape(self.registry)}",
            f"  model:     {escape(self._model_line())}",
            f"  samples:   {len(self.activations)} activation(s) of {self.keys} key(s)"
            + (f", {failed} failed" if failed else "")
            + f" ({escape('; '.join(self.sources))})",
            *textwrap.wrap(
                f"replayed:  {replays} replays, as beam-agents-replay replays (the network "
                f"closed): {self._replayed()}",
                width=100,
                initial_indent="  ",
                subsequent_indent=" " * 13,
                break_on_hyphens=False,
            ),
        ]
        if not self.findings:
            lines.append("clean: no finding")
        else:
            lines.append(f"{len(self.findings)} finding(s)")
        for number, finding in enumerate(self.findings, start=1):
            lines.append(f"  {number}. {CAUSE_TITLES[finding.cause]}: {escape(finding.what)}")
            for item in finding.evidence:
                lines.append(f"       {item.kind.value + ':':<12} {escape(item.text)}")
            lines.append(f"       {'consequence:':<12} {escape(finding.consequence.text)}")
            lines.append(f"       {'remedy:':<12} {escape(finding.remedy)}")
        for note in self.notes:
            lines.append(f"  note: {escape(note)}")
        lines.append(
            f"exit {self.exit_code}: "
            + ("findings" if self.findings else "clean")
            + f" ({self.seconds:.1f} s, {self.jobs} job(s))"
        )
        return "\n".join(lines) + "\n"

    def _replayed(self) -> str:
        """Which replays ran, in words: the control and the screens for every activation, the
        perturbations alone where a screen changed one."""
        control = [c for c in self.conditions if c.get("role") == "control"]
        screens = [c for c in self.conditions if c.get("role") == "screen"]
        alone = sum(
            1
            for a in self.activations
            for name in a["replays"]
            if any(c["name"] == name and c.get("role") == "single" for c in self.conditions)
        )
        text = "every activation " + "; ".join(c["description"] for c in control)
        if screens:
            seeds = [p.removeprefix("with PYTHONHASHSEED=") for p in self.perturbations
                     if p.startswith("with PYTHONHASHSEED=")]  # fmt: skip
            others = [p.removeprefix("with ").removeprefix("in ") for p in self.perturbations
                      if not p.startswith("with PYTHONHASHSEED=")]  # fmt: skip
            every = "; ".join(([f"PYTHONHASHSEED={', '.join(seeds)}"] if seeds else []) + others)
            times = "once" if len(screens) == 1 else f"{len(screens)} times"
            text += f", and {times} with every perturbation at once ({every})"
            text += (
                f"; {alone} replay(s) with one perturbation alone, where those changed something"
                if alone
                else "; none changed anything"
            )
        return text

    def _model_line(self) -> str:
        name = self.model.get("model_name") or self.provider
        line = self.provider if name == self.provider else f"{self.provider} (as {name})"
        calls = self.model.get("model_calls")
        if calls:
            hits = self.model.get("cache_hits", 0)
            line += f"; {calls} model call(s)"
            if hits:
                line += f", {hits} served from the key's cache (recorded answers, repeats)"
        return line

    # -- --json ----------------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        return {
            "format": DOCTOR_FORMAT,
            "version": DOCTOR_VERSION,
            "beam_agents": __version__,
            "exit_code": self.exit_code,
            "clean": self.clean,
            "agent": self.agent,
            "registry": self.registry,
            "provider": self.provider,
            "model": dict(self.model),
            "sources": list(self.sources),
            "keys": self.keys,
            "conditions": [dict(c) for c in self.conditions],
            "perturbations": list(self.perturbations),
            "activations": [dict(a) for a in self.activations],
            "findings": [f.document() for f in self.findings],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
        }

    # -- JUnit -----------------------------------------------------------------------------

    def junit(self) -> bytes:
        """JUnit XML: one test case per cause, failed by that cause's findings."""
        by_cause: dict[Cause, list[Finding]] = {}
        for finding in self.findings:
            by_cause.setdefault(finding.cause, []).append(finding)
        cases = []
        for cause in Cause:
            if cause is Cause.UNEXPLAINED and cause not in by_cause:
                continue
            name = _xml(f"{cause.value}: {CAUSE_TITLES[cause]}")
            found = by_cause.get(cause, [])
            if not found:
                cases.append(f'  <testcase classname="beam-agents doctor" name="{name}"/>')
                continue
            message = _xml("; ".join(f.what for f in found))
            body = _xml(
                "\n\n".join(
                    "\n".join(
                        [f.what, *(e.text for e in f.evidence), f"consequence: {f.consequence.text}",
                         f"remedy: {f.remedy}"]
                    )
                    for f in found
                ),
                multiline=True,
            )
            cases.append(
                f'  <testcase classname="beam-agents doctor" name="{name}">\n'
                f'    <failure message="{message}">{body}</failure>\n  </testcase>'
            )
        failures = len(by_cause)
        header = (
            f'<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuite name="beam-agents doctor {_xml(self.agent)}" tests="{len(cases)}" '
            f'failures="{failures}" errors="0" time="{self.seconds:.3f}">'
        )
        return ("\n".join([header, *cases, "</testsuite>"]) + "\n").encode("utf-8")


def _xml(text: str, *, multiline: bool = False) -> str:
    shown = escape(text, multiline=multiline)
    # Characters XML 1.0 forbids are written as \uXXXX, as check --junit does.
    shown = "".join(c if c not in "\ufffe\uffff" else f"\\u{ord(c):04x}" for c in shown)
    return xml_escape(shown, {'"': "&quot;"})
