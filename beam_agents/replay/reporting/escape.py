"""The one escaper for every human-facing surface: headless report, Markdown export, TUI.

Every string that came from an input (a trace, a snapshot, an event, a registry
path, an exception message) is data. Printed raw, some characters turn data into
presentation: ``ESC [2J`` clears the screen, ``ESC ]0;`` retitles the terminal,
U+202E reverses the text after it, U+E0041 (a tag character) is invisible, a
lone surrogate cannot even be encoded. :func:`escape` shows each such character
as a visible escape instead, so what an operator reads is what the input holds:

- ``\\x00``-``\\x1f``, ``\\x7f`` and the C1 controls ``\\x80``-``\\x9f`` (Unicode
  category Cc), with ``\\n``, ``\\r``, ``\\t`` named;
- format characters (Cf): bidi embeddings, overrides and isolates
  (U+202A-E, U+2066-9), marks (U+200E/F, U+061C), zero-width characters,
  the soft hyphen U+00AD, the BOM, tag characters U+E0000-E007F, ...;
- lone surrogates (Cs), private-use characters (Co), the line and paragraph
  separators (Zl, Zp);
- printable-but-invisible characters that hide text: the combining grapheme
  joiner U+034F, the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0) and the
  variation selectors except U+FE0E/U+FE0F (which only pick text or emoji
  presentation of the character before them).

The shape of an escape is Python's: ``\\x1b`` below U+0100, ``\\u202e`` in the
BMP, ``\\U000e0041`` above it. A backslash already in the data is left alone
(escaping it would change every Windows path and regex a key may hold); an
escape is always recognisable by the code point it names.

Unassigned code points (Cn) are left as they are: they cannot drive a terminal,
and a newer Unicode version than this Python's may have assigned them (new
emoji). Textual-free and Rich-free on purpose: the headless CLI imports it.

Every renderer hands its output through this module whole, so a field a renderer
forgets to escape still cannot reach a terminal raw:

- a text report is a list of lines, and ``escape_lines`` writes it: each line
  escaped (a line break inside one is shown as ``\n``, so data can never start a
  line of its own, such as a second verdict);
- a JSON document (``--json``, ``ls --json``, ``check --json``) goes through
  ``escape_strings``: every string in it is the terminal's text, so ``jq -r``
  prints nothing raw, except the values themselves (memory, arguments, a value's
  ``value``), which a renderer wraps in ``Raw``: those are the data, exact, and
  ``jq`` (not ``jq -r``) shows them escaped by JSON;
- Markdown (the incident report) puts every string from the inputs in a code span
  (``md_code``) or a fenced block (``md_fence``) whose backtick fence is longer than
  any run of backticks in the data: data can neither close it nor be read as
  Markdown or HTML (a heading, a link, an ``<img>``);
- the TUI builds Rich ``Text`` from ``escape``-d strings, and a last net at its
  terminal output (``replay_tui.terminal_safety``) replaces anything unsafe left.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

__all__ = [
    "UNSAFE_CATEGORIES",
    "Raw",
    "escape",
    "escape_bytes",
    "escape_lines",
    "escape_strings",
    "is_safe",
    "md_code",
    "md_fence",
    "neutralize",
]

UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""Unicode general categories shown as escapes."""

# Printable (per str.isprintable) yet invisible characters that can hide text, and the
# whole tag block (U+E0000 and U+E0002-1F are unassigned, yet terminals hide them too).
_INVISIBLE = re.compile(
    "[\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0d\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
# Any run of characters that is not printable ASCII: the only places escaping can happen.
_NOT_ASCII_PRINTABLE = re.compile(r"[^\x20-\x7e]+")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _code(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in UNSAFE_CATEGORIES or _INVISIBLE.match(char) is not None


def _fix_run(run: str, multiline: bool) -> str:
    if run.isprintable() and _INVISIBLE.search(run) is None:
        return run
    out = []
    for char in run:
        if char == "\n" and multiline:
            out.append(char)
        elif char in _NAMED:
            out.append(_NAMED[char])
        elif _unsafe(char):
            out.append(_code(char))
        else:
            out.append(char)
    return "".join(out)


def escape(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, format, invisible or surrogate character shown visibly.

    Args:
        text: Any string that came from the inputs.
        multiline: Keep line feeds as line breaks (payloads, messages); otherwise
            they are shown as ``\\n`` too, so one value stays on one line.

    Returns:
        A string that cannot move the cursor, clear, retitle or restyle the
        terminal, reorder the text around it, or hide characters; it always
        encodes as UTF-8.
    """
    if text.isascii() and text.isprintable():
        return text
    return _NOT_ASCII_PRINTABLE.sub(lambda m: _fix_run(m.group(), multiline), text)


def neutralize(text: str, replacement: str = "\ufffd") -> str:
    """``text`` with each character ``escape`` would escape replaced by ``replacement``
    (one cell wide): for a last net where an escape's width would break a layout."""
    if text.isascii() and text.isprintable():
        return text

    def fix(match: re.Match[str]) -> str:
        run = match.group()
        return "".join(
            replacement if char in _NAMED or _unsafe(char) else char for char in run
        )

    return _NOT_ASCII_PRINTABLE.sub(fix, text)


def escape_bytes(data: bytes, *, multiline: bool = False) -> str:
    """Bytes decoded as UTF-8 (invalid bytes shown as ``\\xNN``), then :func:`escape`-d."""
    return escape(data.decode("utf-8", errors="backslashreplace"), multiline=multiline)


def is_safe(text: str) -> bool:
    """True when :func:`escape` would leave ``text`` unchanged (nothing to show as an escape)."""
    return escape(text) == text


def escape_lines(lines: Iterable[str]) -> str:
    """A text report: each of ``lines`` escaped on one line (an embedded line break shown as
    ``\\n``), each ended by a line feed. The one way a text renderer returns its text."""
    return "".join(f"{escape(line)}\n" for line in lines)


class Raw:
    """A value of a JSON document that is data, exact (``escape_strings`` leaves it whole)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def escape_strings(document: Any) -> Any:
    """``document`` (JSON data) with every string, keys included, ``escape``-d, except inside
    ``Raw`` values, which are unwrapped as they are. The one way a JSON renderer returns
    its document."""
    if isinstance(document, str):
        return escape(document)
    if isinstance(document, Raw):
        return document.value
    if isinstance(document, dict):
        return {escape_strings(k): escape_strings(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [escape_strings(v) for v in document]
    return document


_BACKTICKS = re.compile("`+")


def _fence_for(text: str, shortest: int) -> str:
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    return "`" * max(shortest, longest + 1)


def md_code(text: str, *, in_table: bool = False) -> str:
    """``text`` as a Markdown code span its data cannot close (nor be read as Markdown or
    HTML in): escaped, fenced by more backticks than it holds in a row. In a table cell,
    ``|`` is escaped too (GitHub splits cells at a bare ``|`` even in a code span). Empty
    text is an empty string."""
    shown = escape(text)
    if not shown:
        return ""
    fence = _fence_for(shown, 1)
    # A span that starts or ends with a backtick (or a space) is padded by one space on
    # each side, which CommonMark strips.
    padded = shown[0] in "` " or shown[-1] in "` "
    span = f"{fence} {shown} {fence}" if padded else f"{fence}{shown}{fence}"
    return span.replace("|", "\\|") if in_table else span


def md_fence(text: str, info: str = "text") -> list[str]:
    """``text`` as the lines of a fenced code block its data cannot close: escaped (line
    breaks kept), fenced by more backticks than any run in it (at least three)."""
    shown = escape(text, multiline=True)
    fence = _fence_for(shown, 3)
    return [f"{fence}{info}", *shown.split("\n"), fence]
