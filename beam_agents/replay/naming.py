"""How the caller named replay's inputs: the words a refusal uses for them.

The replay package never spells a command-line flag or a Python parameter in a
message of its own: the loaders and the engine name each input through the
``Naming`` their caller passed. The command line passes its own
(``beam_agents.cli.parsing.CLI_NAMING``: ``--snapshot FILE``, ``--seq 3``,
``--time-limit SECONDS``); a Python caller gets one that names its parameters
(``snapshot=<7 bytes>``, ``seq=3``, ``Replayer(time_limit=SECONDS)``), which is
every function's default. A caller that knows an input by another name (a
bundle's own snapshot is "its snapshot") replaces that entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

__all__ = [
    "CHECK_BUNDLES",
    "LIST_ACTIVATIONS",
    "MAKE_BUNDLE",
    "REPLAYER",
    "REPLAY_BUNDLES",
    "REPLAY_OPTIONS",
    "Input",
    "Naming",
    "python_naming",
]


class Input(StrEnum):
    """One input of replay (or of ``ls``, ``bundle``, ``check``), as messages name it."""

    SNAPSHOT = "snapshot"
    TRACES = "traces"
    EVENT = "event"
    EVENTS = "events"
    SEQ = "seq"
    ALL = "all"
    KEY = "key"
    WHAT_IF = "what_if"
    TIME_LIMIT = "time_limit"
    AGENT = "agent"
    REGISTRY = "registry"
    HITL = "hitl"
    BUNDLE = "bundle"
    ROWS = "rows"
    IMPORT_RECORDED = "import_recorded"
    """Consent to import the code a bundle names (a switch, as ``WHAT_IF``)."""
    FORK = "fork"
    """The event a fork answers differently (``--fork N``)."""
    FORK_VALUE = "fork_value"
    """What it receives instead (``--set VALUE|@FILE``)."""
    FORK_PROVIDER = "fork_provider"
    """The provider the fork's continuation may call (``--fork-provider module:ATTR``)."""


@dataclass(frozen=True, kw_only=True)
class Naming:
    """How one kind of caller names the inputs in a message.

    ``name(Input.SEQ)`` is the input alone (``--seq``, ``seq=``); ``given(Input.SEQ, 3)``
    is the input with what was given for it (``--seq 3``, ``seq=3``).
    """

    names: Mapping[Input, str]
    """Each input alone, e.g. ``--snapshot`` or ``snapshot=``; a switch as it is turned on
    (``--what-if``, ``what_if=True``)."""
    joiner: str
    """What stands between a name and what was given for it (`` `` for a flag)."""
    given_as: Mapping[Input, str] = field(default_factory=dict)
    """Inputs named otherwise when given: a format with ``{}`` for what was given, or
    words without it (a bundle's snapshot is ``its snapshot`` whatever it holds)."""
    raise_cap: str
    """How to raise a size cap, with ``{env}`` for its environment variable."""
    raise_time_limit: str
    """How to raise the time limit: the end of a sentence beginning "if the activation
    is only slow, "."""
    import_advice: str
    """What to do when a ``module:ATTR`` path's module does not import."""
    without_switch: str
    """How "without the what-if switch" is said."""
    list_keys: str
    """How to list every traced key (the start of a sentence)."""

    def name(self, what: Input) -> str:
        """The input alone: ``--snapshot`` / ``snapshot=``."""
        return self.names[what]

    def about(self, what: Input) -> str:
        """The input heading what is said about it: ``--traces:`` / ``traces:``."""
        return f"{self.names[what].removesuffix('=')}:"

    def given(self, what: Input, shown: object) -> str:
        """The input with what was given for it: ``--seq 3`` / ``seq=3``."""
        template = self.given_as.get(what)
        if template is not None:
            return template.format(shown)
        return f"{self.names[what]}{self.joiner}{shown}"

    def known_as(self, what: Input, words: str, *, then_given: bool = False) -> Naming:
        """This naming with ``what`` named ``words`` however it was given (``then_given``:
        ``words`` followed by what was given, e.g. ``bundle b's recorded agent m:AGENT``)."""
        template = words.replace("{", "{{").replace("}", "}}") + (" {}" if then_given else "")
        return replace(self, given_as={**self.given_as, what: template})


def python_naming(api: str) -> Naming:
    """How a Python caller of ``api`` (``Replayer``, ``ReplayOptions``, ``check_bundles``...)
    names the inputs: by its parameters."""
    names = {what: f"{what.value}=" for what in Input}
    names[Input.WHAT_IF] = "what_if=True"
    names[Input.IMPORT_RECORDED] = "import_recorded=True"
    names[Input.ALL] = "all_seqs=True"
    names[Input.TIME_LIMIT] = f"{api}(time_limit=)"
    names[Input.BUNDLE] = "bundle"
    return Naming(
        names=names,
        joiner="",
        given_as={Input.TIME_LIMIT: f"{api}(time_limit={{}})", Input.BUNDLE: "bundle {}"},
        raise_cap="set {env}=<bytes> in this process's environment",
        raise_time_limit=(f"raise the limit with {api}(time_limit=SECONDS) (0 or None: no limit)"),
        import_advice="make that module importable in this process (its directory on sys.path)",
        without_switch="without what_if=True",
        list_keys="call list_activations without key=",
    )


REPLAYER = python_naming("Replayer")
"""``Replayer``'s naming (``replay(snapshot=, traces=, event=, seq=, what_if=)``)."""
REPLAY_OPTIONS = python_naming("ReplayOptions")
"""The default naming of ``ReplayOptions``: its fields."""
CHECK_BUNDLES = python_naming("check_bundles")
"""The default naming of ``check_bundles``, ``load_bundle`` and ``bundle_options``."""
MAKE_BUNDLE = python_naming("make_bundle")
"""The default naming of ``make_bundle``."""
LIST_ACTIVATIONS = python_naming("list_activations")
"""The default naming of ``list_activations``."""
REPLAY_BUNDLES = python_naming("ReplayBundles")
"""``beam_agents.pipeline.ReplayBundles``'s naming (its rows' messages)."""
