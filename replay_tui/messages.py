"""Messages between the app's parts: results arrive by message, never by shared state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual.message import Message

from beam_agents._protos import TraceEvent
from beam_agents.replay.result import ReplayHeader, ReplayResult

if TYPE_CHECKING:  # the preview's readers load in the replay thread, not at start-up
    from replay_tui.preview import FirstRows


class ReplayLoaded(Message):
    """The replay worker finished: here is the result to show."""

    def __init__(self, result: ReplayResult) -> None:
        super().__init__()
        self.result = result


class ReplayPreviewed(Message):
    """The first traced events of the activation, read before the replay started
    (``preview.read_first_rows``): painted until ``ReplayPlanned`` brings them all."""

    def __init__(self, rows: FirstRows) -> None:
        super().__init__()
        self.rows = rows


class ReplayPlanned(Message):
    """The engine planned the activation: the header so far and the traced events, painted
    while the re-run runs (``engine.replay``'s ``on_planned``)."""

    def __init__(self, header: ReplayHeader, traced: Sequence[TraceEvent]) -> None:
        super().__init__()
        self.header = header
        self.traced = traced


class ReplayCrashed(Message):
    """The replay engine raised instead of returning a result (a bug in the engine or below)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__()
        self.error_type = error_type
        self.message = message


class EventHighlighted(Message):
    """The timeline cursor moved to row ``position``."""

    def __init__(self, position: int) -> None:
        super().__init__()
        self.position = position


class FilterFinished(Message):
    """A timeline filter scan finished: the positions it kept (None: the filter was cleared)."""

    def __init__(self, query: str, positions: list[int] | None) -> None:
        super().__init__()
        self.query = query
        self.positions = positions


class SearchFinished(Message):
    """A ``/`` search finished: the row it found (None: no event's values or name hold it)."""

    def __init__(self, serial: int, query: str, position: int | None) -> None:
        super().__init__()
        self.serial = serial
        self.query = query
        self.position = position


class StepPictureReady(Message):
    """The step index has read far enough to picture row ``position``."""

    def __init__(self, position: int) -> None:
        super().__init__()
        self.position = position
