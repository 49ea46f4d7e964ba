"""Replay fixture registries for ``recorded_agents:TOOLS_PLAIN``, importable as ``replay_fixtures:ATTR``.

``read_order`` there is a plain (not recorded) read-only tool reading an HTTP service,
so replay would re-run it and the network guard would block it. These registries swap
it for an offline fixture, as an operator's ``myapp.replay_fixtures`` module would:

    TOOLS        returns what the service answered in production -> reproduced
    STALE_TOOLS  returns another answer                          -> diverged at that TOOL_CALL
"""

from __future__ import annotations

from typing import Any

import recorded_agents as rec

from beam_agents.testing import fixture_registry

PRODUCTION_ORDERS = {"A1": {"order_id": "A1", "status": "shipped", "items": [1, 2]}}


def read_order_fixture(order_id: str) -> dict[str, Any]:
    return dict(PRODUCTION_ORDERS[order_id])


def read_order_stale(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "pending"}


TOOLS = fixture_registry(rec.TOOLS_PLAIN, read_order=read_order_fixture)
STALE_TOOLS = fixture_registry(rec.TOOLS_PLAIN, read_order=read_order_stale)
