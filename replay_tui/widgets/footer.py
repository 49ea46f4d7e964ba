"""``KeysFooter``: the footer of keys, the ones that matter first, cut to what fits.

Textual's ``Footer`` lists the bindings in the order they are declared and lets the
terminal cut the line: at 80 columns the main screen lost ``q`` and ``?``, and at 160
``[``/``]`` were cut off. This footer orders them by what an operator needs first
(quit, help, the screen's own first keys: on a diverged result ``d`` and ``n``; on a
sub-screen its way back), then the rest in their declared order, and shows only as
many as fit beside the palette key; every key is still in the help (``?``) and the
command palette. It goes compact (one space less per key) when the whole line does
not fit otherwise, and lays itself out again when the terminal is resized.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["KeysFooter", "footer_actions"]

FIRST_ACTIONS = ("quit", "app.quit", "help", "app.help")
"""Always first: the way out and the list of every key."""

_PALETTE_WIDTH = 13
"""The command palette's key on the right (``▏^p palette`` and its padding)."""


def _width(binding: Binding, key_display: str, *, compact: bool) -> int:
    # FooterKey: key padded by 1 on each side (0 when compact), the description followed
    # by one space (preceded by one when compact); compact keys also have a margin of 1.
    if compact:
        return len(key_display) + 1 + len(binding.description) + 1
    return len(key_display) + 2 + len(binding.description) + 1


def _ranked(bindings: list[tuple[Binding, bool, str]], first: tuple[str, ...]) -> list[int]:
    """Indices of ``bindings`` in the order they are offered a place."""
    order = (*FIRST_ACTIONS, *first)

    def rank(i: int) -> tuple[int, int]:
        action = bindings[i][0].action
        return (order.index(action) if action in order else len(order), i)

    return sorted(range(len(bindings)), key=rank)


def footer_actions(
    bindings: list[tuple[Binding, bool, str]],
    displays: list[str],
    width: int,
    first: tuple[str, ...] = (),
) -> tuple[list[int], bool]:
    """Which bindings the footer shows at ``width`` columns, in order, and whether compact.

    Args:
        bindings: ``(binding, enabled, tooltip)`` of the shown bindings, one per action.
        displays: Each binding's key as shown.
        width: The terminal's width.
        first: The screen's own first actions, after quit and help.
    """
    room = max(0, width - _PALETTE_WIDTH)
    order = _ranked(bindings, first)
    compact = sum(_width(bindings[i][0], displays[i], compact=False) for i in order) > room
    chosen: list[int] = []
    used = 0
    for i in order:
        need = _width(bindings[i][0], displays[i], compact=compact)
        if used + need > room:
            continue  # a shorter one further down may still fit
        chosen.append(i)
        used += need
    return chosen, compact


class KeysFooter(Footer):
    """A ``Footer`` whose keys are ordered by need and cut to the width (see the module)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._laid_out_for = 0

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        active = self.screen.active_bindings
        by_action: dict[str, tuple[Binding, bool, str]] = {}
        for _, binding, enabled, tooltip in active.values():
            if not binding.show:
                continue
            known = by_action.get(binding.action)
            # One key per action, the shortest (q, not ^q, where both quit).
            if known is None or len(self.app.get_key_display(binding)) < len(
                self.app.get_key_display(known[0])
            ):
                by_action[binding.action] = (binding, enabled, tooltip)
        bindings = list(by_action.values())
        displays = [self.app.get_key_display(b) for b, _, _ in bindings]
        first = tuple(getattr(self.screen, "FOOTER_FIRST", ()))
        width = self.app.size.width
        self._laid_out_for = width
        chosen, compact = footer_actions(bindings, displays, width, first)
        self.set_class(compact, "-compact")
        self.set_reactive(Footer.compact, compact)
        for i in chosen:
            binding, enabled, tooltip = bindings[i]
            yield FooterKey(
                binding.key,
                displays[i],
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            ).data_bind(compact=Footer.compact)
        yield from self._palette_key(active)

    def _palette_key(self, active: dict[str, Any]) -> Iterator[FooterKey]:
        if not (self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE):
            return
        found = active.get(self.app.COMMAND_PALETTE_BINDING)
        if found is None:
            return
        _node, binding, enabled, _tooltip = found
        yield FooterKey(
            binding.key,
            self.app.get_key_display(binding),
            binding.description,
            binding.action,
            classes="-command-palette",
            disabled=not enabled,
            tooltip=binding.tooltip or binding.description,
        )

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and self.app.size.width != self._laid_out_for:
            self.call_after_refresh(self.recompose)
