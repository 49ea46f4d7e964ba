"""Where the documentation pages are, for the help texts to point at ones that exist.

``--help`` said ``See docs/replay.md``: a path into the source repository, which an
operator who installed the package does not have. The wheel installs the pages as data
files (``pyproject.toml``: ``share/doc/beam-agents/``, beside the environment's other
shared data); a checkout (an editable install, the test suite) has them in ``docs/``.
``doc_page`` names the one that exists, as a path the operator can open.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

__all__ = ["DOC_DIR_IN_PREFIX", "doc_page"]

DOC_DIR_IN_PREFIX = ("share", "doc", "beam-agents")
"""Where the wheel installs the pages, under the environment's prefix."""


def _candidates(page: str) -> list[Path]:
    checkout = Path(__file__).resolve().parents[2] / "docs" / page
    installed = [
        Path(base, *DOC_DIR_IN_PREFIX, page)
        for base in dict.fromkeys((sysconfig.get_path("data"), sys.prefix))
    ]
    return [checkout, *installed]


def doc_page(page: str) -> str:
    """The path of documentation page ``page`` (``replay.md``) as installed or checked
    out, or, when neither is there, its address beside the package's Documentation URL."""
    for path in _candidates(page):
        if path.is_file():
            return os.fspath(path)
    return _online(page)


def _online(page: str) -> str:
    from importlib import metadata

    try:
        urls = metadata.metadata("beam-agents").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        urls = []
    for entry in urls:
        label, _, url = str(entry).partition(",")
        if label.strip() == "Documentation" and url.strip().endswith("/index.md"):
            return url.strip()[: -len("index.md")] + page
    return f"docs/{page} in the beam-agents source distribution"
