"""Optional dependencies: import one, or raise an ``ImportError`` naming the extra that brings it.

The operator's install (``pip install beam-agents``) holds replay, ``ls``, ``bundle``,
``check``, ``convert-bq`` and the TUI; Apache Beam and every sink's client library come
with an extra (pyproject.toml). A module that needs one imports it through
``import_extra``, so a missing package says what to install instead of a bare
``ModuleNotFoundError`` deep inside a sink (as ``beam_agents.providers`` does for the
model SDKs).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "import_extra"]


class MissingExtraError(ImportError):
    """An optional package is not installed; ``extra`` is what to ``pip install``."""

    def __init__(self, what: str, package: str, extra: str) -> None:
        super().__init__(
            f"{what} needs {package}, which is not installed: pip install 'beam-agents[{extra}]'"
        )
        self.extra = extra
        """The extra that brings the package (``pipeline``, ``kafka``, ...)."""
        self.package = package
        """The distribution that is missing."""


def import_extra(module: str, *, extra: str, what: str, package: str | None = None) -> ModuleType:
    """Import ``module``; if it (or its top-level package) is missing, name the extra.

    Args:
        module: The module to import (``"confluent_kafka"``, ``"google.cloud.bigquery"``).
        extra: The beam-agents extra that installs it.
        what: Who needs it, for the message (``"the kafka:// sink"``).
        package: The distribution's name, when it differs from the module's.

    Raises:
        MissingExtraError: The module, or a package on its path, is not installed.
            A module that is installed but fails to import raises its own error.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not (module == missing or module.startswith(missing + ".")):
            raise  # the module exists; something it imports is broken: show that
        raise MissingExtraError(what, package or module.split(".")[0], extra) from exc
