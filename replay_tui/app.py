"""``ReplayApp``: the operator's incident view over one ``ReplayResult``.

``beam-agents-replay tui <flags>`` parses its flags into ``ReplayOptions`` and
calls :func:`run_tui`, which runs the replay in a thread behind a loading
screen, shows the result, and returns the verdict's exit code when the operator
presses ``q`` — the same code the headless CLI would have returned, because
both read the same ``ReplayResult`` (docs/index.md, "How the code is laid out", rule 3).

Tests (and anyone holding a result already) open ``ReplayApp(result)`` directly.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.filter import Monochrome
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen

from beam_agents._protos import TraceEvent
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayHeader, ReplayResult, Verdict
from replay_tui.messages import ReplayCrashed, ReplayLoaded, ReplayPlanned, ReplayPreviewed
from replay_tui.render.monochrome import ReadableMonochrome
from replay_tui.screens.error import USAGE_EXIT_CODE, ErrorScreen
from replay_tui.screens.help import HelpScreen
from replay_tui.screens.loading import LoadingScreen
from replay_tui.terminal_safety import install as install_terminal_safety

INTERRUPTED_EXIT_CODE = 130
"""``q`` before the replay finished: there is no verdict, so no verdict's code (as for Ctrl+C)."""

if TYPE_CHECKING:
    from replay_tui.preview import FirstRows
    from replay_tui.screens.intents import IntentsScreen
    from replay_tui.screens.outputs import OutputsScreen
    from replay_tui.screens.state import StateScreen

# The result's screens (and the report's writer) are imported when first needed, not at
# start-up: the loading screen and the first rows are painted without them (a quarter of
# the app's imports), and the replay thread imports them while the replay runs.
_RESULT_MODULES = (
    "replay_tui.screens.main",
    "replay_tui.screens.state",
    "replay_tui.screens.intents",
    "replay_tui.screens.outputs",
    "replay_tui.export",
)


def _subscreens() -> dict[str, type[StateScreen | IntentsScreen | OutputsScreen]]:
    from replay_tui.screens.intents import IntentsScreen
    from replay_tui.screens.outputs import OutputsScreen
    from replay_tui.screens.state import StateScreen

    return {"state": StateScreen, "intents": IntentsScreen, "outputs": OutputsScreen}


class ReplayApp(App[int]):
    """The incident view. Give it a finished ``result``, or ``options`` to replay first."""

    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "beam-agents-replay"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        # Ctrl+C / Ctrl+Q quit with the verdict's code, as q does (Textual's own Ctrl+C only
        # told the operator, in markup this app shows literally, to press Ctrl+Q).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        # Shown where q types into a line (filter, search): the footer shows one key per action.
        Binding("ctrl+q", "quit", "Quit", key_display="^q", priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("s", "show('state')", "State"),
        Binding("i", "show('intents')", "Intents"),
        Binding("o", "show('outputs')", "Outputs"),
        Binding("e", "export", "Export"),
        Binding("left_square_bracket", "switch_seq(-1)", "Prev seq", key_display="["),
        Binding("right_square_bracket", "switch_seq(1)", "Next seq", key_display="]"),
    ]

    def __init__(
        self,
        result: ReplayResult | None = None,
        *,
        options: ReplayOptions | None = None,
        export_dir: Path | None = None,
        seqs: Sequence[int] = (),
        complete: Callable[[ReplayResult], ReplayResult] | None = None,
        switch_to: Callable[[int], None] | None = None,
    ) -> None:
        """Open on ``result``, or run ``engine.replay(options)`` in a thread and open on that.

        Args:
            result: A finished replay.
            options: ``ReplayOptions`` for the engine (used only when ``result`` is None).
            export_dir: Where ``e`` writes the reports (default: the working directory).
            seqs: The key's other activations the same inputs can replay (a bundle's, or
                the traced ones); with two or more, ``[`` and ``]`` switch between them.
            complete: Applied to each replay's result before it is shown (the command
                line's: a reference run's proved values put beside it).
            switch_to: Called with the seq ``[`` or ``]`` chose, then the app exits: the
                caller replays it in a fresh process (the console script does, so no
                module state or thread of agent code carries from one activation's verdict
                to the next). None: the app replays it itself, in this interpreter.
        """
        if result is None and options is None:
            raise ValueError("ReplayApp needs a ReplayResult or ReplayOptions to replay")
        install_terminal_safety()  # the last net: nothing from an input reaches the terminal raw
        super().__init__()
        if self.no_color:
            # Textual's monochrome put magenta labels at grey 237 on 234 (render/monochrome.py).
            self._filters = [
                ReadableMonochrome() if isinstance(f, Monochrome) else f for f in self._filters
            ]
        self.result = result
        self.options = options
        self.export_dir = export_dir if export_dir is not None else Path.cwd()
        self.export_dir_given = export_dir is not None
        """False: ``e`` writes into the working directory, and says so each time."""
        self.crash: tuple[str, str] | None = None
        self.exit_code: int | None = None
        """The code ``q`` exited with (None until the operator quits)."""
        self.last_export: tuple[Path, Path] | None = None
        """The Markdown and JSON reports ``e`` wrote last."""
        self.notices: list[tuple[str, str]] = []
        """Every ``(severity, message)`` the app told the operator, in order."""
        self.seqs = tuple(sorted(set(seqs)))
        """The activations ``[`` / ``]`` switch between (needs ``options``)."""
        self.opened: ReplayResult | None = result
        """The result of the activation the app was opened on (the command line's): its
        verdict is the exit code, whichever activation ``[`` / ``]`` show when ``q`` quits."""
        self.complete = complete
        self.switch_to = switch_to
        self.first_rows: FirstRows | None = None
        """The first traced rows, once the replay thread has read them (the loading screen
        paints them as it mounts when they are ready by then)."""
        self._replay_started = False
        self._post_lock = threading.Lock()
        self._running = False
        self._early: list[Message] = []
        """What the replay thread posted before the app ran (``on_mount`` posts it)."""

    # -- lifecycle --------------------------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        if self.result is None:
            return LoadingScreen(self.options)
        return self._result_screen(self.result)

    def _result_screen(self, result: ReplayResult) -> Screen[Any]:
        if result.verdict is Verdict.USAGE_ERROR:
            return ErrorScreen(result=result)
        from replay_tui.screens.main import MainScreen

        return MainScreen(result)

    def start_replay(self) -> None:
        """Start replaying ``options`` in its thread, if it has not started: ``run_tui``
        calls this before Textual starts, so the first rows are read while it starts up
        (and are on the loading screen's first frame when they are ready by then);
        ``on_mount`` calls it otherwise."""
        if self.result is None and not self._replay_started:
            self._replay_started = True
            # A daemon thread, not a thread worker: Textual's workers run on the default
            # executor, which the interpreter joins at exit, so `q` during a replay stuck
            # in agent code would hang the terminal. Results still arrive by message.
            threading.Thread(target=self._replay_in_thread, name="replay", daemon=True).start()

    def on_mount(self) -> None:
        with self._post_lock:
            self._running = True
            early, self._early = self._early, []
            for message in early:  # in order, before any the thread posts from now on
                self.post_message(message)
        self.start_replay()

    def _post(self, message: Message) -> None:
        """``post_message`` from the replay thread; held until the app runs (before, it has
        no event loop to hand a message to safely). Never waits: ``planned`` posts from
        inside the engine's guard, which must not be held open by an app that never ran."""
        with self._post_lock:
            if not self._running:
                self._early.append(message)
                return
        self.post_message(message)

    def _replay_in_thread(self) -> None:
        try:
            assert self.options is not None
            # The first rows before the engine is even imported: it reads the traces whole
            # before it reports them (seconds for a large activation).
            from replay_tui.preview import read_first_rows

            first, options = read_first_rows(self.options)
            self.first_rows = first
            if first is not None:
                self._post(ReplayPreviewed(first))
            for module in _RESULT_MODULES:  # before the engine, outside its guard
                importlib.import_module(module)
            # Imported here, in the thread: the engine imports the operator's agent code.
            from beam_agents.replay import engine

            def planned(header: ReplayHeader, traced: Sequence[TraceEvent]) -> None:
                self._post(ReplayPlanned(header, traced))

            result = engine.replay(options, on_planned=planned)
            if self.complete is not None:
                result = self.complete(result)
        except BaseException as exc:  # shown on the error screen, never lost
            self._post(ReplayCrashed(type(exc).__qualname__, str(exc)))
        else:
            self._post(ReplayLoaded(result))

    # Pushed over the loading screen (the default screen cannot be switched away).
    def on_replay_loaded(self, message: ReplayLoaded) -> None:
        self.result = message.result
        if self.opened is None:
            self.opened = message.result
        self.push_screen(self._result_screen(message.result))

    def on_replay_previewed(self, message: ReplayPreviewed) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_first(message.rows)

    def on_replay_planned(self, message: ReplayPlanned) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_planned(message.header, message.traced)

    def on_replay_crashed(self, message: ReplayCrashed) -> None:
        self.crash = (message.error_type, message.message)
        self.push_screen(ErrorScreen(crash=self.crash))

    @property
    def verdict_exit_code(self) -> int:
        """The code ``q`` exits with now: the verdict of the activation the app was opened on
        (``[`` and ``]`` browse others; they never change it), 2 if its replay crashed, 130
        before its result."""
        if self.opened is not None:
            return self.opened.exit_code
        if self.crash is not None:
            return USAGE_EXIT_CODE
        return INTERRUPTED_EXIT_CODE

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Show a notification; never markup by default (messages quote inputs), and keep it."""
        self.notices.append((severity, message))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # -- actions ----------------------------------------------------------------------------

    async def action_quit(self) -> None:
        self.exit_code = self.verdict_exit_code
        self.exit(self.exit_code, return_code=self.exit_code)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "switch_seq":
            # Only between results (not while one loads), and only with somewhere to go.
            return self.options is not None and len(self.seqs) > 1 and self.result is not None
        if action in ("show", "export"):
            # Nothing to show before the result, and an error screen has only its message.
            return self.result is not None and self.result.verdict is not Verdict.USAGE_ERROR
        return True

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(
                HelpScreen(seq_switching=self.check_action("switch_seq", (1,)) is True)
            )

    def action_show(self, name: str) -> None:
        """Open the state, intents or outputs screen; the same key closes it again."""
        if self.result is None:
            return
        subscreens = _subscreens()
        wanted = subscreens[name]
        current = self.screen
        if isinstance(current, HelpScreen):
            self.pop_screen()
            current = self.screen
        if isinstance(current, wanted):
            self.pop_screen()
        elif isinstance(current, tuple(subscreens.values())):
            self.switch_screen(wanted(self.result))
        else:
            self.push_screen(wanted(self.result))

    def action_switch_seq(self, step: int) -> None:
        """Replay the previous (``[``) or next (``]``) activation of the same inputs."""
        if self.options is None or len(self.seqs) < 2 or self.result is None:
            return
        current = self.result.header.seq if self.result.header.seq is not None else self.options.seq
        position = self.seqs.index(current) if current in self.seqs else -1
        target = self.seqs[(position + step) % len(self.seqs)]
        if self.switch_to is not None:
            # The caller opens ``target`` in a fresh process; this one ends with the code
            # ``q`` would give now (the opened activation's), which the caller keeps.
            self.switch_to(target)
            self.exit_code = self.verdict_exit_code
            self.exit(self.exit_code, return_code=self.exit_code)
            return
        self.options = dataclasses.replace(self.options, seq=target)
        self.result = None
        self.crash = None
        # Back to the loading screen (the default one), which the new result is pushed over.
        while len(self.screen_stack) > 1:
            self.pop_screen()
        if isinstance(self.screen, LoadingScreen):
            self.screen.restart(self.options)
        self.notify(f"replaying seq {target}", timeout=3)
        self.first_rows = None
        threading.Thread(target=self._replay_in_thread, name="replay", daemon=True).start()

    def action_export(self) -> None:
        if self.result is None:
            return
        from replay_tui.export import export_report
        from replay_tui.screens.main import MainScreen

        selected = None
        if isinstance(self.screen, MainScreen) and self.screen.timeline.position is not None:
            selected = self.result.events[self.screen.timeline.position].index
        try:
            md_path, json_path = export_report(self.result, self.export_dir, selected=selected)
        except OSError as exc:
            self.notify(f"Export failed: {exc}", severity="error", timeout=10)
            return
        self.last_export = (md_path, json_path)
        where = (
            ""
            if self.export_dir_given
            else f"\ninto the current directory, {self.export_dir} (--export-dir DIR: elsewhere)"
        )
        self.notify(f"Report written:\n{md_path}\n{json_path}{where}", title="exported", timeout=10)

    # -- command palette --------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, what, key, run in self.palette_commands(screen):
            yield SystemCommand(title, f"{what} ({key})", run)

    def palette_commands(
        self, screen: Screen[Any]
    ) -> list[tuple[str, str, str, Callable[[], Any]]]:
        """The command palette's own commands on ``screen``: ``(title, what it does, its key,
        what it runs)``, one for every key of the screen and of the app that applies there
        (docs/tui.md: the palette holds every action; a test checks it against the keys)."""
        from replay_tui.screens.main import MainScreen

        commands: list[tuple[str, str, str, Callable[[], Any]]] = []
        if isinstance(screen, MainScreen):
            main = screen
            commands += [
                ("First divergence", "Jump to the first diverging event", "d",
                 main.action_first_divergence),
                ("Next difference", "Next differing or cache-missed row", "n",
                 main.action_next_notable),
                ("Previous difference", "Previous differing or cache-missed row", "N",
                 main.action_previous_notable),
                ("Step forward", "Advance one event in step mode", "space, →",
                 main.action_step_forward),
                ("Step back", "Go back one event in step mode", "←", main.action_step_back),
                ("Search values", "Find a text in the values and names, jump to it", "/",
                 main.action_search),
                ("Filter timeline", "Filter rows by text or kind:NAME", "f", main.action_filter),
                ("Values of the event", "The selected event's values, whole", "v",
                 main.action_values),
                ("Copy event", "Copy the selected event and its values as JSON via OSC 52",
                 "c", main.action_copy_event),
                ("Clear", "Close the search or filter line, leave step mode, clear the filter",
                 "escape", main.action_clear),
            ]  # fmt: skip
        if self.result is not None and self.result.verdict is not Verdict.USAGE_ERROR:
            commands += [
                ("State", "Memory, cache, pending intents, continuation, versions, tools", "s",
                 lambda: self.action_show("state")),
                ("Intents ledger", "Intents staged/released, traced vs replayed", "i",
                 lambda: self.action_show("intents")),
                ("Outputs", "Output sizes, digests and payloads", "o",
                 lambda: self.action_show("outputs")),
                ("Export report", "Write the report as Markdown and JSON and say where", "e",
                 self.action_export),
            ]  # fmt: skip
        if self.check_action("switch_seq", (1,)) is True:
            commands += [
                ("Previous activation", "Replay the previous activation of the key", "[",
                 lambda: self.action_switch_seq(-1)),
                ("Next activation", "Replay the next activation of the key", "]",
                 lambda: self.action_switch_seq(1)),
            ]  # fmt: skip
        commands.append(("Help", "Every key", "?", self.action_help))
        return commands


def run_tui(
    options: ReplayOptions,
    *,
    seqs: Sequence[int] = (),
    export_dir: Path | None = None,
    complete: Callable[[ReplayResult], ReplayResult] | None = None,
    switch_to: Callable[[int], None] | None = None,
) -> int:
    """Replay ``options`` in the TUI; return the verdict's exit code once the operator quits.

    Args:
        options: The ``ReplayOptions`` the CLI parsed from ``beam-agents-replay tui <flags>``.
        seqs: Other activations the same inputs replay (``[`` / ``]`` switch).
        export_dir: Where ``e`` writes the reports (``--export-dir``; default: the
            working directory).
        complete: What the command line does to each result before it is shown.
        switch_to: See ``ReplayApp``.

    Returns:
        0 reproduced or what-if, 1 diverged, 2 usage error (or the engine crashed),
        3 irreproducible — as headless — or 130 if quit before the replay finished.
    """
    app = ReplayApp(
        options=options, seqs=seqs, export_dir=export_dir, complete=complete, switch_to=switch_to
    )
    app.start_replay()
    app.run()
    if app.exit_code is not None:
        return app.exit_code
    # Textual stopped without our quit (it crashed and printed why): never pass that off
    # as a verdict's code, least of all as 0.
    return USAGE_EXIT_CODE
