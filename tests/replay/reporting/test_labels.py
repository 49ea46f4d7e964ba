"""One label set: how every surface names a key and a moment."""

from __future__ import annotations

import pytest

from beam_agents.replay.reporting.labels import key_label, key_text, utc_time


@pytest.mark.parametrize(
    ("key", "printable"),
    [
        (b"customer-42", "customer-42"),
        ("café-7".encode(), "café-7"),
        (b"\x00\x01binary", None),
        (b"\xff\xfe", None),
        (b"esc\x1b[2J", None),
        (b"", None),
    ],
)
def test_key_is_shown_as_text_only_when_printable(key: bytes, printable: str | None) -> None:
    assert key_text(key) == printable
    assert key_label(key) == (key.hex() if printable is None else f"{key.hex()} ({printable})")


def test_utc_time_of_the_seed_clock() -> None:
    assert utc_time(1_734_000_000_000) == "2024-12-12 10:40:00.000 UTC"
    assert utc_time(10**20) == "out of range"


