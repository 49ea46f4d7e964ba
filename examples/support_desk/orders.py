"""The order table the support desk looks orders up in: small, bundled, read-only.

In production ``lookup_order`` would query the order service; here it reads
this table so the example runs offline and every lookup is reproducible (a
read-only tool re-executes for real during replay, so it must answer the same
question the same way).

Order ids have the form ``A-1001``: one letter, a dash, four digits. The table
is keyed by the compact form (``A1001``) so that both spellings find an order.
"""

from __future__ import annotations

import copy
from typing import Any

DAY_MS = 86_400_000
T0_MS = 1_734_000_000_000
"""2024-12-12 10:40 UTC: the clock the bundled stream starts on."""

_ORDERS: dict[str, dict[str, Any]] = {
    "A1001": {
        "order_id": "A-1001",
        "customer": "customer-alice",
        "customer_name": "Alice",
        "customer_tier": "standard",
        "status": "in_transit",
        "carrier": "UPS",
        "tracking": "1Z999AA10123456784",
        "eta": "2024-12-13",
        "delivered_ms": None,
        "items": [{"sku": "KT-220", "name": "Kettle 220", "qty": 1, "price_cents": 4_900}],
        "shipping_cents": 599,
    },
    "A1002": {
        "order_id": "A-1002",
        "customer": "customer-alice",
        "customer_name": "Alice",
        "customer_tier": "standard",
        "status": "processing",
        "carrier": None,
        "tracking": None,
        "eta": "2024-12-18",
        "delivered_ms": None,
        "items": [{"sku": "MG-012", "name": "Mug set (4)", "qty": 2, "price_cents": 1_850}],
        "shipping_cents": 0,
    },
    "B2001": {
        "order_id": "B-2001",
        "customer": "customer-bob",
        "customer_name": "Bob",
        "customer_tier": "gold",
        "status": "delivered",
        "carrier": "DHL",
        "tracking": "JD014600006281230101",
        "eta": "2024-12-09",
        "delivered_ms": T0_MS - 3 * DAY_MS,
        "items": [{"sku": "BL-600", "name": "Blender Pro 600", "qty": 1, "price_cents": 8_900}],
        "shipping_cents": 799,
    },
    "C3001": {
        "order_id": "C-3001",
        "customer": "customer-carol",
        "customer_name": "Carol",
        "customer_tier": "standard",
        "status": "delayed",
        "carrier": "USPS",
        "tracking": "9400111899223197428490",
        "eta": "2024-12-16",
        "delivered_ms": None,
        "items": [{"sku": "LP-14", "name": "Desk lamp", "qty": 1, "price_cents": 3_200}],
        "shipping_cents": 499,
    },
    "D4001": {
        "order_id": "D-4001",
        "customer": "customer-dan",
        "customer_name": "Dan",
        "customer_tier": "standard",
        "status": "delivered",
        "carrier": "FedEx",
        "tracking": "449044304137821",
        "eta": "2024-10-01",
        "delivered_ms": T0_MS - 72 * DAY_MS,
        "items": [{"sku": "HP-90", "name": "Headphones 90", "qty": 1, "price_cents": 12_900}],
        "shipping_cents": 0,
    },
}


def compact_order_id(order_id: str) -> str:
    """``"A-1001"`` and ``"a1001"`` both give ``"A1001"``, the table's key."""
    return order_id.strip().upper().replace("-", "")


def find_order(order_id: str) -> dict[str, Any] | None:
    """A copy of the order with this id (either spelling), or None if there is none."""
    order = _ORDERS.get(compact_order_id(order_id))
    return copy.deepcopy(order) if order is not None else None
