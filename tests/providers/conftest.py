"""Provider tests: the SDKs are optional extras; `make install` installs both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wire_server import WireServer, wire_server


@pytest.fixture
def server() -> Iterator[WireServer]:
    with wire_server() as running:
        yield running
