"""Import Apache Beam without its import-time warnings about cloud clients we do not use.

Importing ``apache_beam`` logs "Failed to import GCSFileSystem ..." (no
google-cloud-storage) and "apitools not found ..." (no apitools). Neither client is
used by beam-agents, and the second is logged with ``logging.warning``, which, on a
process that configured no logging, also installs a root handler (``basicConfig``)
as a side effect. While ``beam_agents.pipeline`` imports Beam for the first time,
those two records are dropped and a ``NullHandler`` keeps the root logger configured
as the program left it. Every other record passes; a Beam the program imported
earlier has logged already, and nothing is changed then.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

DROPPED_PREFIXES = ("Failed to import GCSFileSystem", "apitools not found")
"""The start of each Beam import-time message that is not printed."""

_LOGGERS = ("", "apache_beam.io.filesystems")


def _keep(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(DROPPED_PREFIXES)


@contextmanager
def quiet_beam_import() -> Iterator[None]:
    """Within the block, Beam's two import-time client warnings are dropped (see module doc)."""
    if "apache_beam" in sys.modules:
        yield
        return
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    root = logging.getLogger()
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)  # so logging.warning() does not call basicConfig()
    for logger in loggers:
        logger.addFilter(_keep)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(_keep)
        if placeholder is not None:
            root.removeHandler(placeholder)
