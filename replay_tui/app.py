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
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen

from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayResult, Verdict
from replay_tui.export import export_report
from replay_tui.messages import ReplayCrashed, ReplayLoaded
from replay_tui.screens.error import USAGE_EXIT_CODE, ErrorScreen
from replay_tui.screens.help import HelpScreen
from replay_tui.screens.intents import IntentsScreen
from replay_tui.screens.loading import LoadingScreen
from replay_tui.screens.main import MainScreen
from replay_tui.screens.outputs import OutputsScreen
from replay_tui.screens.state import StateScreen

INTERRUPTED_EXIT_CODE = 130
"""``q`` before the replay finished: there is no verdict, so no verdict's code (as for Ctrl+C)."""

_SUBSCREENS: dict[str, type[StateScreen | IntentsScreen | OutputsScreen]] = {
    "state": StateScreen,
    "intents": IntentsScreen,
    "outputs": OutputsScreen,
}


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
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
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
    ) -> None:
        """Open on ``result``, or run ``engine.replay(options)`` in a thread and open on that.

        Args:
            result: A finished replay.
            options: ``ReplayOptions`` for the engine (used only when ``result`` is None).
            export_dir: Where ``e`` writes the reports (default: the working directory).
            seqs: The key's other activations the same inputs can replay (a bundle's, or
                the traced ones); with two or more, ``[`` and ``]`` switch between them.
        """
        if result is None and options is None:
            raise ValueError("ReplayApp needs a ReplayResult or ReplayOptions to replay")
        super().__init__()
        self.result = result
        self.options = options
        self.export_dir = export_dir if export_dir is not None else Path.cwd()
        self.crash: tuple[str, str] | None = None
        self.exit_code: int | None = None
        """The code ``q`` exited with (None until the operator quits)."""
        self.last_export: tuple[Path, Path] | None = None
        """The Markdown and JSON reports ``e`` wrote last."""
        self.notices: list[tuple[str, str]] = []
        """Every ``(severity, message)`` the app told the operator, in order."""
        self.seqs = tuple(sorted(set(seqs)))
        """The activations ``[`` / ``]`` switch between (needs ``options``)."""

    # -- lifecycle --------------------------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        if self.result is None:
            return LoadingScreen(self.options)
        return self._result_screen(self.result)

    def _result_screen(self, result: ReplayResult) -> Screen[Any]:
        if result.verdict is Verdict.USAGE_ERROR:
            return ErrorScreen(result=result)
        return MainScreen(result)

    def on_mount(self) -> None:
        if self.result is None:
            # A daemon thread, not a thread worker: Textual's workers run on the default
            # executor, which the interpreter joins at exit, so `q` during a replay stuck
            # in agent code would hang the terminal. Results still arrive by message.
            threading.Thread(target=self._replay_in_thread, name="replay", daemon=True).start()

    def _replay_in_thread(self) -> None:
        try:
            # Imported here, in the thread: the engine imports the operator's agent code.
            from beam_agents.replay import engine

            assert self.options is not None
            result = engine.replay(self.options)
        except BaseException as exc:  # shown on the error screen, never lost
            self.post_message(ReplayCrashed(type(exc).__qualname__, str(exc)))
        else:
            self.post_message(ReplayLoaded(result))

    # Pushed over the loading screen (the default screen cannot be switched away).
    def on_replay_loaded(self, message: ReplayLoaded) -> None:
        self.result = message.result
        self.push_screen(self._result_screen(message.result))

    def on_replay_crashed(self, message: ReplayCrashed) -> None:
        self.crash = (message.error_type, message.message)
        self.push_screen(ErrorScreen(crash=self.crash))

    @property
    def verdict_exit_code(self) -> int:
        """The code ``q`` exits with now: the verdict's, 2 after a crash, 130 before a result."""
        if self.result is not None:
            return self.result.exit_code
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
        wanted = _SUBSCREENS[name]
        current = self.screen
        if isinstance(current, HelpScreen):
            self.pop_screen()
            current = self.screen
        if isinstance(current, wanted):
            self.pop_screen()
        elif isinstance(current, tuple(_SUBSCREENS.values())):
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
        self.options = dataclasses.replace(self.options, seq=target)
        self.result = None
        self.crash = None
        # Back to the loading screen (the default one), which the new result is pushed over.
        while len(self.screen_stack) > 1:
            self.pop_screen()
        if isinstance(self.screen, LoadingScreen):
            self.screen.restart(self.options)
        self.notify(f"replaying seq {target}", timeout=3)
        threading.Thread(target=self._replay_in_thread, name="replay", daemon=True).start()

    def action_export(self) -> None:
        if self.result is None:
            return
        try:
            md_path, json_path = export_report(self.result, self.export_dir)
        except OSError as exc:
            self.notify(f"Export failed: {exc}", severity="error", timeout=10)
            return
        self.last_export = (md_path, json_path)
        self.notify(f"Report written:\n{md_path}\n{json_path}", title="exported", timeout=10)

    # -- command palette --------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        main = screen if isinstance(screen, MainScreen) else None
        if main is not None:
            yield SystemCommand(
                "First divergence",
                "Jump to the first diverging event (d)",
                main.action_first_divergence,
            )
            yield SystemCommand(
                "Next difference",
                "Next differing or cache-missed row (n)",
                main.action_next_notable,
            )
            yield SystemCommand(
                "Previous difference",
                "Previous differing or cache-missed row (N)",
                main.action_previous_notable,
            )
            yield SystemCommand(
                "Step forward",
                "Advance one event in step mode (space, →)",
                main.action_step_forward,
            )
            yield SystemCommand(
                "Step back", "Go back one event in step mode (←)", main.action_step_back
            )
            yield SystemCommand(
                "Filter timeline", "Filter rows by text or kind:NAME (/)", main.action_filter
            )
            yield SystemCommand(
                "Copy event",
                "Copy the selected event as JSON via OSC 52 (c)",
                main.action_copy_event,
            )
        if self.result is not None and self.result.verdict is not Verdict.USAGE_ERROR:
            yield SystemCommand(
                "State",
                "Memory, cache, pending intents, continuation, versions (s)",
                lambda: self.action_show("state"),
            )
            yield SystemCommand(
                "Intents ledger",
                "Intents staged/released, traced vs replayed (i)",
                lambda: self.action_show("intents"),
            )
            yield SystemCommand(
                "Outputs",
                "Output sizes, digests and payloads (o)",
                lambda: self.action_show("outputs"),
            )
            yield SystemCommand(
                "Export report", "Write the report as Markdown and JSON (e)", self.action_export
            )
        yield SystemCommand("Help", "Every key (?)", self.action_help)


def run_tui(
    options: ReplayOptions, *, seqs: Sequence[int] = (), export_dir: Path | None = None
) -> int:
    """Replay ``options`` in the TUI; return the verdict's exit code once the operator quits.

    Args:
        options: The ``ReplayOptions`` the CLI parsed from ``beam-agents-replay tui <flags>``.
        seqs: Other activations the same inputs replay (``[`` / ``]`` switch).
        export_dir: Where ``e`` writes the reports (``--export-dir``; default: the
            working directory).

    Returns:
        0 reproduced or what-if, 1 diverged, 2 usage error (or the engine crashed),
        3 irreproducible — as headless — or 130 if quit before the replay finished.
    """
    app = ReplayApp(options=options, seqs=seqs, export_dir=export_dir)
    app.run()
    if app.exit_code is not None:
        return app.exit_code
    # Textual stopped without our quit (it crashed and printed why): never pass that off
    # as a verdict's code, least of all as 0.
    return USAGE_EXIT_CODE
