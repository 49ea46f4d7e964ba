"""Example tests: make the repository root importable, as it is for ``beam-agents-replay``.

``examples`` is not an installed package; the demo and the replay CLI import it
from the repository root (the current directory), so these tests do the same
whatever directory pytest was started from.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


import pytest  # noqa: E402

from examples.support_desk.tracking import TrackingService, running_tracking_service  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tracking_service() -> Iterator[TrackingService]:
    """The carriers' tracking service the support desk's recorded tool reads, on 127.0.0.1."""
    with running_tracking_service() as service:
        yield service
