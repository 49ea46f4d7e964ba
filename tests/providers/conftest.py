"""Provider tests: the SDKs are optional extras; `make install` installs both.

Every provider a test builds through ``made`` is closed when the test ends, so no SDK
connection outlives its test and surfaces as a ResourceWarning in another one.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from provider_requests import MADE
from wire_server import WireServer, wire_server


@pytest.fixture(autouse=True)
def _close_providers() -> Iterator[None]:
    yield
    while MADE:
        MADE.pop().close()
    gc.collect()  # anything left unclosed warns here, in the test that made it


@pytest.fixture
def server() -> Iterator[WireServer]:
    with wire_server() as running:
        yield running
