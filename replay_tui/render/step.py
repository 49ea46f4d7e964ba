"""Step mode: the activation as it stood after event N, traced side and replayed side.

A debugger-like walk must not rescan the events on every keypress (an
activation may hold 100,000 of them), so ``StepIndex`` reads each event once,
incrementally and in order, into per-kind position lists with running counts.
Answering "what did the activation look like after row N" is then a binary
search per list plus the last few entries: O(log n + recent), whatever N.

The index only reports what the events say; it judges nothing.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.text import Text

from beam_agents import trace_view as tv
from beam_agents._protos import TraceEvent
from beam_agents.replay.reporting.escape import escape
from beam_agents.replay.result import EventPair
from replay_tui.render.layout import columns, wrap

RECENT = 5
"""How many of the latest model calls, tool calls and intents a picture lists."""


@dataclass(frozen=True, slots=True)
class ModelCall:
    position: int
    model: str
    cache_key: str
    hit: bool | None
    billed: bool | None
    error: str = ""
    forked: bool = False
    """A fork's forked call: answered with the operator's value (neither hit nor miss)."""


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    position: int
    tool: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class IntentRecord:
    position: int
    intent_id: str
    tool: str
    requires_approval: bool = False


@dataclass(frozen=True, slots=True)
class Suspension:
    position: int
    step_index: int | None
    awaiting: tuple[str, ...]
    deadline_ms: int | None


@dataclass(frozen=True, slots=True)
class Ending:
    position: int
    failed: bool
    outcome: str
    """``done``/``suspended``/... for ACTIVATION_END, the error type for ACTIVATION_FAILED."""


@dataclass(slots=True)
class _Side:
    """Everything one side (traced or replayed) did, in row order, with running counts."""

    llm: list[ModelCall] = field(default_factory=list)
    llm_pos: list[int] = field(default_factory=list)
    hits_before: list[int] = field(default_factory=lambda: [0])
    """``hits_before[k]``: cache hits among the first k model calls."""
    misses_before: list[int] = field(default_factory=lambda: [0])
    forked_before: list[int] = field(default_factory=lambda: [0])
    """``forked_before[k]``: a fork's forked calls (the operator's value) among the first k."""
    billed_before: list[int] = field(default_factory=lambda: [0])
    tools: list[ToolCallRecord] = field(default_factory=list)
    tools_pos: list[int] = field(default_factory=list)
    staged: list[IntentRecord] = field(default_factory=list)
    staged_pos: list[int] = field(default_factory=list)
    released: list[IntentRecord] = field(default_factory=list)
    released_pos: list[int] = field(default_factory=list)
    released_at: dict[str, int] = field(default_factory=dict)
    suspensions: list[Suspension] = field(default_factory=list)
    suspensions_pos: list[int] = field(default_factory=list)
    ending: Ending | None = None

    def add(self, position: int, event: TraceEvent) -> None:
        view = tv.decode(event)
        if isinstance(view, tv.LlmCall):
            hit, billed = view.cache_hit, view.billed
            forked = view.fork_answer is True
            self.llm.append(
                ModelCall(
                    position,
                    event.name,
                    view.cache_key or "",
                    hit,
                    billed,
                    view.error_type or "",
                    forked,
                )
            )
            self.llm_pos.append(position)
            self.hits_before.append(self.hits_before[-1] + (hit is True and not forked))
            self.misses_before.append(self.misses_before[-1] + (hit is False and not forked))
            self.forked_before.append(self.forked_before[-1] + forked)
            self.billed_before.append(self.billed_before[-1] + (billed is True))
        elif isinstance(view, tv.ToolCall):
            self.tools.append(ToolCallRecord(position, event.name, view.error_type or ""))
            self.tools_pos.append(position)
        elif isinstance(view, tv.IntentStaged):
            record = IntentRecord(
                position, view.intent_id or "", event.name, view.requires_approval is True
            )
            self.staged.append(record)
            self.staged_pos.append(position)
        elif isinstance(view, tv.IntentReleased):
            record = IntentRecord(position, view.intent_id or "", event.name)
            self.released.append(record)
            self.released_pos.append(position)
            self.released_at.setdefault(record.intent_id, position)
        elif isinstance(view, tv.Suspended):
            self.suspensions.append(
                Suspension(position, view.step_index, view.awaiting or (), view.deadline_ms)
            )
            self.suspensions_pos.append(position)
        elif isinstance(view, tv.ActivationEnd) and self.ending is None:
            self.ending = Ending(position, False, view.outcome or event.name)
        elif isinstance(view, tv.ActivationFailed) and self.ending is None:
            self.ending = Ending(position, True, view.error_type or event.name)


@dataclass(frozen=True, slots=True)
class SidePicture:
    """One side of the activation as it stood after a row."""

    present: bool
    """False when this side has no events at all (e.g. nothing was replayed)."""
    model_calls: int
    hits: int
    misses: int
    billed: int
    forked: int
    """Calls answered with a fork's value (neither a hit nor a miss)."""
    recent_calls: tuple[ModelCall, ...]
    tool_calls: int
    recent_tools: tuple[ToolCallRecord, ...]
    staged: int
    recent_staged: tuple[tuple[IntentRecord, bool], ...]
    """The latest staged intents, each with whether it was released by then."""
    released: int
    recent_released: tuple[IntentRecord, ...]
    suspension: Suspension | None
    ending: Ending | None


@dataclass(frozen=True, slots=True)
class StepPicture:
    position: int
    """The row the picture is taken after (0-based)."""
    total: int
    traced: SidePicture
    replayed: SidePicture


def _side_picture(side: _Side, position: int, present: bool, recent: int) -> SidePicture:
    n_llm = bisect_right(side.llm_pos, position)
    n_tools = bisect_right(side.tools_pos, position)
    n_staged = bisect_right(side.staged_pos, position)
    n_released = bisect_right(side.released_pos, position)
    n_susp = bisect_right(side.suspensions_pos, position)
    staged = tuple(
        (rec, side.released_at.get(rec.intent_id, position + 1) <= position)
        for rec in side.staged[max(0, n_staged - recent) : n_staged]
    )
    ending = side.ending if side.ending is not None and side.ending.position <= position else None
    return SidePicture(
        present=present,
        model_calls=n_llm,
        hits=side.hits_before[n_llm],
        misses=side.misses_before[n_llm],
        billed=side.billed_before[n_llm],
        forked=side.forked_before[n_llm],
        recent_calls=tuple(side.llm[max(0, n_llm - recent) : n_llm]),
        tool_calls=n_tools,
        recent_tools=tuple(side.tools[max(0, n_tools - recent) : n_tools]),
        staged=n_staged,
        recent_staged=staged,
        released=n_released,
        recent_released=tuple(side.released[max(0, n_released - recent) : n_released]),
        suspension=side.suspensions[n_susp - 1] if n_susp else None,
        ending=ending,
    )


class StepIndex:
    """Per-side running records over a result's event pairs, built incrementally.

    ``extend_to(p)`` reads pairs up to row ``p`` exactly once, ever; ``picture(p)``
    extends as needed and then answers in O(log n + recent). Safe to extend from
    a worker thread while the UI thread asks for pictures of rows already read.
    """

    def __init__(self, pairs: Sequence[EventPair]) -> None:
        self._pairs = pairs
        self._traced = _Side()
        self._replayed = _Side()
        self._built = 0
        self._lock = threading.Lock()
        self._traced_present = False
        self._replayed_present = False

    def __len__(self) -> int:
        return len(self._pairs)

    @property
    def built(self) -> int:
        """How many rows have been read so far."""
        return self._built

    def extend_to(self, position: int) -> None:
        """Read every row up to and including ``position`` (no-op for rows already read)."""
        with self._lock:
            end = min(position + 1, len(self._pairs))
            for pos in range(self._built, end):
                pair = self._pairs[pos]
                if pair.traced is not None:
                    self._traced_present = True
                    self._traced.add(pos, pair.traced)
                if pair.replayed is not None:
                    self._replayed_present = True
                    self._replayed.add(pos, pair.replayed)
                # Publish progress row by row so a reader never sees a half-read row.
                self._built = pos + 1

    def try_extend_to(self, position: int) -> bool:
        """Extend without waiting: False if another thread is extending right now."""
        if not self._lock.acquire(blocking=False):
            return position < self._built
        self._lock.release()
        self.extend_to(position)
        return True

    def picture(self, position: int, *, recent: int = RECENT) -> StepPicture:
        """The activation as it stood after row ``position`` (clamped to the last row)."""
        if not self._pairs:
            empty = _side_picture(_Side(), -1, False, recent)
            return StepPicture(position=-1, total=0, traced=empty, replayed=empty)
        position = max(0, min(position, len(self._pairs) - 1))
        if position >= self._built:
            self.extend_to(position)
        return StepPicture(
            position=position,
            total=len(self._pairs),
            traced=_side_picture(self._traced, position, self._traced_present, recent),
            replayed=_side_picture(self._replayed, position, self._replayed_present, recent),
        )


# -- rendering --------------------------------------------------------------------------------


def _calls_text(side: SidePicture, *, traced: bool = False) -> Text:
    """The model calls of one side. A traced call the cache did not serve went to the
    provider ("live"); only on the replayed side is it a miss."""
    text = Text()
    text.append(f"{side.model_calls} call{'' if side.model_calls == 1 else 's'}", style="bold")
    text.append(f" hit {side.hits}", style="green")
    if traced:
        text.append(f" live {side.misses}")
    else:
        text.append(f" miss {side.misses}", style="bold yellow" if side.misses else "")
    if side.forked:
        text.append(f" forked {side.forked}", style="bold magenta")
    text.append(f" ${side.billed}", style="yellow" if side.billed else "")
    for call in side.recent_calls:
        text.append(f"\n#{call.position} ", style="dim")
        text.append(escape(call.model))
        missed = "live" if traced else "MISS"
        cache = "hit" if call.hit is True else missed if call.hit is False else "?"
        style = "green" if call.hit else "" if cache == "live" else "bold yellow"
        if call.forked:  # the fork's value: nothing came from the cache or the provider
            cache, style = "forked", "bold magenta"
        text.append(f" {cache}", style=style)
        if call.billed:
            text.append(" $", style="yellow")
        text.append(f" {escape(call.cache_key[:KEY_CHARS])}", style="dim")
        if call.error:
            text.append(f" {escape(call.error)}", style="red")
    return text


def _tools_text(side: SidePicture) -> Text:
    text = Text(f"{side.tool_calls} call{'' if side.tool_calls == 1 else 's'}", style="bold")
    for call in side.recent_tools:
        text.append(f"\n#{call.position} ", style="dim")
        text.append(escape(call.tool))
        text.append(
            f" {escape(call.error)}" if call.error else " ok", style="red" if call.error else "dim"
        )
    return text


def _intents_text(side: SidePicture) -> Text:
    text = Text()
    text.append(f"staged {side.staged}", style="bold")
    text.append(f" released {side.released}", style="bold")
    for record, released in side.recent_staged:
        text.append(f"\n#{record.position} ", style="dim")
        text.append(escape(record.intent_id))
        text.append(f" {escape(record.tool)}")
        if record.requires_approval:
            text.append(" approval", style="magenta")
        text.append(" released" if released else " staged", style="green" if released else "yellow")
    staged_ids = {record.intent_id for record, _ in side.recent_staged}
    for record in side.recent_released:
        if record.intent_id not in staged_ids:
            text.append(f"\n#{record.position} ", style="dim")
            text.append(escape(record.intent_id))
            text.append(f" {escape(record.tool)} released", style="green")
    return text


def _state_text(side: SidePicture) -> Text:
    text = Text()
    if side.suspension is not None:
        susp = side.suspension
        text.append("suspended", style="bold yellow")
        if susp.step_index is not None:
            text.append(f" step {susp.step_index}")
        text.append(f" at #{susp.position}", style="dim")
        text.append("\nawaits ")
        text.append(", ".join(escape(a) for a in susp.awaiting) or "nothing")
        if susp.deadline_ms is not None:
            text.append(f"\ndeadline {susp.deadline_ms}", style="dim")
    if side.ending is not None:
        if text:
            text.append("\n")
        style = "bold red" if side.ending.failed else "bold green"
        text.append("failed: " if side.ending.failed else "ended: ", style=style)
        text.append(escape(side.ending.outcome))
        text.append(f" at #{side.ending.position}", style="dim")
    if not text:
        text.append("running", style="dim")
    return text


KEY_CHARS = 12


LABEL_WIDTH = 8


def step_lines(picture: StepPicture, width: int, *, forked: bool = False) -> list[Text]:
    """The step pane in ``width`` cells: the activation after row ``picture.position``
    (``forked``: the right side is a fork's counterfactual)."""
    title = Text("after event ", style="bold")
    title.append(f"{picture.position}", style="bold underline")
    title.append(f" of {picture.total}", style="bold")
    title.append("   space/→ step  ← back", style="dim")
    side_w = max(8, (width - LABEL_WIDTH - 2) // 2)
    widths = (LABEL_WIDTH, side_w, side_w)
    lines = wrap(title, width)
    lines += columns(
        [Text(""), Text("traced", style="bold"), Text("forked" if forked else "replayed", style="bold")],
        widths,
    )
    sides = (picture.traced, picture.replayed)
    absent = Text("(no events)", style="dim")
    rows: list[tuple[str, Callable[[SidePicture], Text]]] = [
        ("model", _calls_text),
        ("tools", _tools_text),
        ("intents", _intents_text),
        ("state", _state_text),
    ]
    for label, render in rows:
        cells = [
            (_calls_text(side, traced=True) if render is _calls_text and i == 0 else render(side))
            if side.present
            else absent.copy()
            for i, side in enumerate(sides)
        ]
        lines += columns([Text(label, style="bold"), *cells], widths, words=True)
    return lines
