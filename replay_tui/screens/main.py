"""The incident view: header, verdict, timeline, detail and step panes."""

from __future__ import annotations

import json
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from beam_agents.replay.reporting.json_doc import pair_document, reference_values, value_document
from beam_agents.replay.result import ReplayResult
from replay_tui.messages import EventHighlighted, FilterFinished, SearchFinished
from replay_tui.render.literal import literal_text
from replay_tui.render.search import SearchIndex, search_example
from replay_tui.render.timeline import TimelineModel, filter_positions
from replay_tui.screens.values import ValuesScreen
from replay_tui.widgets.detail import DetailPane
from replay_tui.widgets.footer import KeysFooter
from replay_tui.widgets.header import ReplayHeaderPanel, VerdictBanner
from replay_tui.widgets.step import StepPane
from replay_tui.widgets.timeline import Timeline


class QueryLine(Input):
    """The filter or search line: while it is open, its keys are the footer's (the screen's
    letters type into it)."""

    def __init__(self, *, placeholder: str, submit: str, id: str) -> None:
        super().__init__(placeholder=placeholder, id=id)
        # Input binds enter unseen; these replace it and add escape, both shown.
        keys = self._bindings.key_to_bindings
        keys["enter"] = [Binding("enter", "submit", submit)]
        keys["escape"] = [Binding("escape", "screen.clear", "Close")]


def _events(count: int) -> str:
    """``1 event``, ``2 events`` (a re-run stopped at the time limit may show one)."""
    return f"{count} event" if count == 1 else f"{count} events"


class MainScreen(Screen[None]):
    """Everything an operator needs first; state, intents and outputs are one key away."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,right", "step_forward", "Step", key_display="space"),
        Binding("left", "step_back", "Back", show=False),
        Binding("n", "next_notable", "Next ≠"),
        Binding("N", "previous_notable", "Prev ≠", show=False),
        Binding("d", "first_divergence", "1st diverge"),
        Binding("slash", "search", "Search", key_display="/"),
        Binding("f", "filter", "Filter"),
        Binding("v", "values", "Values"),
        Binding("escape", "clear", "Clear", show=False),
        Binding("c", "copy_event", "Copy"),
    ]

    def __init__(self, result: ReplayResult) -> None:
        super().__init__()
        self.result = result
        self.model = TimelineModel(result)
        self.filter_query = ""
        self.filtering = False
        """A filter scan is running in a worker."""
        self.search_query = ""
        self.search_note: tuple[int, str] | None = None
        """The last search's match: shown in the status line while it is selected."""
        self._search_serial = 0
        """Counts searches: only the newest one's result is shown."""
        self._search_index: SearchIndex | None = None
        """Built by the first search (in its worker), then searched by every one."""
        self.FOOTER_FIRST: tuple[str, ...] = (
            ("first_divergence", "next_notable") if self.model.notable else ()
        )
        """The verdict's keys come right after q and ? in the footer (``KeysFooter``)."""

    def compose(self) -> ComposeResult:
        yield ReplayHeaderPanel(self.result, id="header")
        yield VerdictBanner(self.result, id="verdict")
        with Vertical(id="body"):
            timeline = Timeline(self.model, id="timeline", forked=self.result.fork is not None)
            timeline.border_title = f"timeline · {_events(len(self.model))}"
            yield timeline
            with Horizontal(id="panes"):
                yield DetailPane(self.result, id="detail")
                yield StepPane(self.result, id="step")
        yield QueryLine(
            placeholder="filter: text, or kind:LLM   (enter applies, empty clears · esc closes)",
            submit="Apply",
            id="filter",
        )
        example = search_example(self.result)
        yield QueryLine(
            placeholder=(
                f"search values and names{f', e.g. {example}' if example else ''}   "
                "(enter: next match · esc closes)"
            ),
            submit="Next match",
            id="search",
        )
        yield Static(id="status")
        yield KeysFooter()

    def on_mount(self) -> None:
        timeline = self.timeline
        timeline.focus()
        if len(self.model):
            timeline.select_position(self.model.initial_position(), center=True)
        else:
            self._show(None)

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    # -- selection --------------------------------------------------------------------------

    @on(EventHighlighted)
    def _on_highlight(self, message: EventHighlighted) -> None:
        message.stop()
        self._show(message.position)

    def _show(self, position: int | None) -> None:
        self.query_one(DetailPane).show(position)
        self.query_one(StepPane).show(position)
        self._update_status()

    def _update_status(self, note: str = "") -> None:
        timeline = self.timeline
        position = timeline.position
        parts = []
        if position is not None:
            parts.append(
                f"event {self.result.events[position].index} ({position + 1}/{len(self.model)})"
            )
        elif len(self.model):
            parts.append("no row matches the filter")
        # The answer to what was just done comes next: the line is cut at the screen's width,
        # and at 80 columns the standing notes after it left no room for the answer.
        if not note and self.search_note is not None and self.search_note[0] == position:
            note = self.search_note[1]
        if note:
            parts.append(note)
        if self.filter_query and self.filtering:
            parts.append(f"filter {self.filter_query!r}: scanning {len(self.model)} events…")
        elif self.filter_query:
            shown = timeline.shown_count
            parts.append(f"filter {self.filter_query!r}: {shown} row{'' if shown == 1 else 's'}")
        if timeline.step_mode:
            parts.append("step mode (esc leaves)")
        notable = len(self.model.notable)
        if notable:
            parts.append(f"{notable} differing/missed row{'s' if notable > 1 else ''} (n/N)")
        else:
            parts.append("no differing rows")
        # The query came from the operator's keyboard; still shown through a literal Text.
        # One line, fixed height: no screen layout needed.
        self.query_one("#status", Static).update(literal_text("  ·  ".join(parts)), layout=False)

    # -- actions ----------------------------------------------------------------------------

    def action_step_forward(self) -> None:
        self.timeline.set_step_mode(True)
        self.timeline.action_cursor_down()
        self._update_status()

    def action_step_back(self) -> None:
        self.timeline.set_step_mode(True)
        self.timeline.action_cursor_up()
        self._update_status()

    def _jump(self, position: int | None, what: str) -> None:
        if position is None:
            self.notify(f"No {what}.", timeout=3)
            return
        if not self.timeline.select_position(position, center=True):
            # The filter hides it: show everything again rather than refuse the jump.
            self._clear_filter()
            self.timeline.select_position(position, center=True)
        self.timeline.focus()

    def action_next_notable(self) -> None:
        current = self.timeline.position
        self._jump(
            self.model.next_notable(-1 if current is None else current),
            "later differing or missed row",
        )

    def action_previous_notable(self) -> None:
        current = self.timeline.position
        self._jump(
            self.model.previous_notable(len(self.model) if current is None else current),
            "earlier differing or missed row",
        )

    def action_first_divergence(self) -> None:
        index = self.model.first_divergence_index
        if index is None:
            index = self.model.miss_index
            what = "divergence or cache miss in this result"
        else:
            what = "divergence"
        self._jump(None if index is None else self.model.position_of(index), what)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.filter_query
        box.add_class("-visible")
        box.focus()

    # -- search (values, not only names) -------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.value = self.search_query
        box.add_class("-visible")
        box.focus()
        if self._search_index is None:
            # Built while the operator types the query, so enter finds the index ready.
            self._search_index = SearchIndex(self.result, self.query_one(DetailPane).values)
            self._build_search_index(self._search_index)

    @work(thread=True, group="search-index")
    def _build_search_index(self, index: SearchIndex) -> None:
        worker = get_current_worker()
        index.build(stop=lambda: worker.is_cancelled)

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("-visible")
        self.timeline.focus()
        query = event.value.strip()
        self.search_query = query
        if not query:
            return
        current = self.timeline.position
        self._search_serial += 1
        if self._search_index is None:
            self._search_index = SearchIndex(self.result, self.query_one(DetailPane).values)
        self._run_search(
            self._search_serial, query, self._search_index, -1 if current is None else current
        )

    @work(thread=True, exclusive=True, group="search")
    def _run_search(self, serial: int, query: str, index: SearchIndex, after: int) -> None:
        # A worker: the first search builds the index, reading every event's values (the
        # engine derives them when read: about a second for 100,000 events), so the UI
        # keeps answering; later searches read the index.
        found = index.find(query, after)
        self.post_message(SearchFinished(serial, query, found))

    @on(SearchFinished)
    def _search_finished(self, message: SearchFinished) -> None:
        if message.serial != self._search_serial:
            return  # a newer search superseded this one
        query, found = message.query, message.position
        if found is None:
            self._update_status(f"search {query!r}: no event's values or name hold it")
            return
        index = self.result.events[found].index
        self.search_note = (found, f"search {query!r}: event {index} (/ and enter: the next)")
        self._jump(found, "match")
        self._update_status()

    def action_values(self) -> None:
        position = self.timeline.position
        if position is None:
            self.notify("No event selected.", timeout=3)
            return
        index = self.result.events[position].index
        values = self.query_one(DetailPane).values.get(index, [])
        self.app.push_screen(ValuesScreen(self.result, index, values))

    def action_clear(self) -> None:
        search = self.query_one("#search", Input)
        if search.has_class("-visible"):
            search.remove_class("-visible")
            self.timeline.focus()
            return
        box = self.query_one("#filter", Input)
        if box.has_class("-visible"):
            box.remove_class("-visible")
            self.timeline.focus()
        elif self.timeline.step_mode:
            self.timeline.set_step_mode(False)
            self._update_status()
        elif self.filter_query:
            self._clear_filter()

    def _clear_filter(self) -> None:
        self.filter_query = ""
        self.filtering = False
        self.workers.cancel_group(self, "filter")
        self.timeline.set_positions(None)
        self.timeline.border_title = f"timeline · {_events(len(self.model))}"
        self._update_status()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        box = event.input
        box.remove_class("-visible")
        self.timeline.focus()
        query = event.value.strip()
        if not query:
            self._clear_filter()
            return
        self.filter_query = query
        self.filtering = True
        self._update_status()
        self._run_filter(query)

    @work(thread=True, exclusive=True, group="filter")
    def _run_filter(self, query: str) -> None:
        worker = get_current_worker()
        positions = filter_positions(
            self.model, query, progress=lambda _done: not worker.is_cancelled
        )
        if positions is not None:
            self.post_message(FilterFinished(query, positions))

    @on(FilterFinished)
    def _filter_finished(self, message: FilterFinished) -> None:
        if message.query != self.filter_query:
            return  # a newer filter (or a clear) superseded this scan
        self.filtering = False
        positions = message.positions
        self.timeline.set_positions(positions)
        shown = self.timeline.shown_count
        self.timeline.border_title = f"timeline · {shown} of {_events(len(self.model))}"
        if positions is not None and not positions:
            self._show(None)
        self._update_status()

    def action_copy_event(self) -> None:
        position = self.timeline.position
        if position is None:
            self.notify("No event selected.", timeout=3)
            return
        pair = self.result.events[position]
        # The pair as --json encodes it, and the values the detail pane shows for it (a
        # pair alone holds digests: they say where, the values say why).
        values = self.query_one(DetailPane).values.get(pair.index, [])
        document = {**pair_document(pair), "values": [value_document(v) for v in values]}
        if self.result.reference is not None:
            # Production's values at this event, proved by the reference run (traced side).
            document["traced_values"] = reference_values(self.result.reference, pair.index)
        text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)
        self.app.copy_to_clipboard(text)
        self.notify(
            f"Copied event {pair.index} with its {len(values)} value"
            f"{'' if len(values) == 1 else 's'} ({len(text)} characters) to the clipboard "
            "(OSC 52)."
        )
