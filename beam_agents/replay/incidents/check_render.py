"""``check``'s output: the table it prints, ``--json``, and JUnit XML (``--junit``).

Every name and text from the inputs goes through the one escaper, so no file or
tool name can drive the terminal or break the XML. The rows and their causes are
``check_rows``'s; nothing here decides anything.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

from beam_agents.replay.incidents.check_rows import CheckReport
from beam_agents.replay.reporting.escape import escape, escape_lines, escape_strings
from beam_agents.replay.reporting.json_lines import write_document
from beam_agents.replay.result import Verdict

__all__ = ["CHECK_JSON_SCHEMA", "check_json", "render_check", "render_junit", "write_check_json"]


def render_check(report: CheckReport, *, limit: int = 20) -> str:
    """The ``check`` table: groups worst first, each group's files (up to ``limit``)."""
    # An error row (a file that is not a bundle, a folder without one) is no activation.
    replayed = sum(1 for row in report.rows if row.seq is not None)
    lines = [
        f"beam-agents-replay check: {replayed} activation(s) in {report.bundles} "
        f"file(s), {report.jobs} job(s), {report.seconds:.1f} s"
    ]
    for group in report.groups:
        lines.append(
            f"{len(group.rows):>6}  {group.verdict.value:<14} (exit {group.verdict.exit_code})  "
            f"{escape(group.cause)}"
        )
        if group.verdict in (Verdict.REPRODUCED, Verdict.WHAT_IF):
            continue
        for row in group.rows[:limit]:
            lines.append(f"          {escape(row.label)}")
        if len(group.rows) > limit:
            lines.append(f"          … and {len(group.rows) - limit} more (--json lists all)")
    counts = ", ".join(f"{n} {word}" for word, n in sorted(report.counts().items()))
    lines.append(
        f"worst: {report.worst.value} (exit {report.exit_code})" + (f"; {counts}" if counts else "")
    )
    return escape_lines(lines)


CHECK_JSON_SCHEMA = "beam-agents-replay-check/1"
"""The ``schema`` field of ``check --json`` (docs/incidents.md lists its fields)."""


def check_json(report: CheckReport) -> dict[str, object]:
    """The ``check --json`` document (each row is ``CheckRow.document``), its strings escaped."""
    document: dict[str, object] = escape_strings({
        "schema": CHECK_JSON_SCHEMA,
        "exit_code": report.exit_code,
        "worst": report.worst.value,
        "files": report.bundles,
        "activations": sum(1 for row in report.rows if row.seq is not None),
        "counts": report.counts(),
        "groups": [
            {
                "verdict": g.verdict.value,
                "exit_code": g.verdict.exit_code,
                "cause": g.cause,
                "count": len(g.rows),
                "rows": [r.document() for r in g.rows],
            }
            for g in report.groups
        ],
    })
    return document


# What XML 1.0 forbids in a document (besides what ``escape`` already escapes): the
# noncharacters U+FFFE and U+FFFF, which a file name or a tool name can hold.
_XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(text: str) -> str:
    """``escape``-d text that is also a well-formed XML 1.0 character sequence."""
    return _XML_FORBIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", escape(text))


def write_check_json(report: CheckReport, out: TextIO) -> None:
    """Write ``check_json(report)`` in the layout of every ``--json`` document (a group per
    line)."""
    write_document(out, check_json(report), streamed=("groups",))


def render_junit(report: CheckReport, *, suite: str = "beam-agents-replay check") -> bytes:
    """JUnit XML: one test case per activation (diverged: failure; error, irreproducible: error).

    Every name and text goes through the escaper and then loses what XML 1.0 forbids,
    so the document parses whatever the file names, tool names or causes hold.
    """
    import xml.etree.ElementTree as ET

    failures = sum(1 for r in report.rows if r.verdict is Verdict.DIVERGED)
    errors = sum(
        1 for r in report.rows if r.verdict in (Verdict.USAGE_ERROR, Verdict.IRREPRODUCIBLE)
    )
    attrs = {
        "name": suite,
        "tests": str(len(report.rows)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": "0",
        "time": f"{report.seconds:.3f}",
    }
    root = ET.Element("testsuites", attrs)
    testsuite = ET.SubElement(root, "testsuite", attrs)
    for row in report.rows:
        case = ET.SubElement(
            testsuite,
            "testcase",
            {
                "classname": _xml_safe(Path(row.path).stem),
                "name": _xml_safe(row.label),
                "time": f"{row.seconds:.3f}",
            },
        )
        if row.verdict is Verdict.DIVERGED:
            tag = "failure"
        elif row.verdict in (Verdict.USAGE_ERROR, Verdict.IRREPRODUCIBLE):
            tag = "error"
        else:
            if row.verdict is Verdict.WHAT_IF:
                ET.SubElement(case, "system-out").text = _xml_safe(row.detail)
            continue
        node = ET.SubElement(
            case, tag, {"type": row.verdict.value, "message": _xml_safe(row.cause)}
        )
        node.text = _xml_safe(row.detail)
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
