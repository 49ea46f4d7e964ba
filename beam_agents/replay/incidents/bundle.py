"""Incident bundles: a key's snapshot, trace slice and envelopes as one deterministic file.

``make_bundle`` gathers what the replay of some of a key's activations needs
(the ``IncidentBundle`` message of ``protos/beam_agents/v1/bundle.proto``):
the snapshot bytes as the sink wrote them, the trace events of those
activations and nothing else of the trace, the envelopes that triggered them
(picked out of topic dumps by traced id and sha256), the agent, registry and
HITL policy the pipeline ran, and the package version. Serialized
deterministically, with every repeated part in a fixed order, the same inputs
give the same bytes.

``load_bundle`` refuses (``InputError``, exit 2, naming the file and what is
wrong) anything that is not such a file, a bundle newer than this package, and
a bundle whose parts disagree: a snapshot or envelope of another key, an
envelope whose sha256 is not the traced one, an envelope no activation needs,
an activation without its events. ``bundle_options`` turns a loaded bundle
into the ``ReplayOptions`` of one of its activations: the engine then reads
the bundle's parts exactly as it reads the separate files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from google.protobuf.message import DecodeError

from beam_agents._protos import (
    AgentEnvelope,
    HitlSettings,
    IncidentBundle,
    StateSnapshot,
    TraceEvent,
)
from beam_agents._version import __version__
from beam_agents._wire import frame, message_fields, packed_varints
from beam_agents.activation import envelope_digest
from beam_agents.errors import ConfigError
from beam_agents.hitl import DEFAULT_HITL_POLICY, HitlPolicy
from beam_agents.replay.inputs.agent_code import ancestors, import_object, locate
from beam_agents.replay.inputs.envelopes import load_envelopes, write_envelope_stream
from beam_agents.replay.inputs.sources import (
    describe_source,
    file_kind,
    open_regular,
    read_source,
    size_cap,
    too_large,
)
from beam_agents.replay.inputs.traces import check_complete, seq_ranges, trace_events
from beam_agents.replay.naming import CHECK_BUNDLES, MAKE_BUNDLE, Input, Naming
from beam_agents.replay.options import ReplayOptions, Source, as_sources
from beam_agents.replay.refusal import CannotReproduce, InputError
from beam_agents.trace_events import serialize_trace_event
from beam_agents.trace_view import ActivationStart

if TYPE_CHECKING:
    from beam_agents.key_state import KeyState

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "Bundle",
    "RecordedCodeNotImported",
    "bundle_options",
    "check_consent",
    "is_bundle_file",
    "load_bundle",
    "make_bundle",
    "recorded_code",
]

BUNDLE_FORMAT = "beam-agents/incident-bundle"
"""The ``format`` field of every bundle."""
BUNDLE_VERSION = 1
"""The layout version this package writes and the newest it reads."""

# A serialized bundle starts with its format field: tag 1 (length-delimited), then the text.
_MAGIC = b"\x0a" + bytes([len(BUNDLE_FORMAT)]) + BUNDLE_FORMAT.encode()


@dataclass(frozen=True)
class Bundle:
    """A loaded, checked bundle."""

    name: str
    """How the bundle is named in messages (its path)."""
    message: IncidentBundle
    hitl: HitlPolicy
    loaded_snapshot: tuple[StateSnapshot, KeyState, dict[str, int]] | None = field(
        default=None, repr=False, compare=False
    )
    """The snapshot as ``load_bundle`` loaded it to check it (``load_snapshot_source``):
    ``bundle_options`` hands it to each replay, so it is parsed once per bundle. A replay
    only reads it (the re-run works on a copy of the state)."""
    path: str | None = None
    """The file it was read from (None: given as bytes): its recorded code is looked for
    in that file's folder and the folders above it too."""

    @property
    def code_search(self) -> tuple[str, ...]:
        """Where its recorded agent and registry are looked for beyond the import path."""
        return ancestors(self.path) if self.path is not None else ()

    @property
    def entity_key(self) -> bytes:
        return self.message.entity_key

    @property
    def seqs(self) -> tuple[int, ...]:
        return tuple(self.message.seqs)


def is_bundle_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file that starts like a bundle (for the CLI's ``FILE``)."""
    try:
        # Non-blocking, regular files only: a FIFO named on the command line cannot hang us.
        with open_regular(os.fspath(path), Input.BUNDLE, MAKE_BUNDLE) as f:
            return f.read(len(_MAGIC)) == _MAGIC
    except (OSError, InputError):
        return False


def _file_varint(f: BinaryIO) -> int | None:
    value = shift = 0
    while shift < 70:
        byte = f.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7
    return None


_CODE_FIELDS = {9: "agent", 10: "registry"}
_MAX_CODE_PATH = 4096


def recorded_code(path: str) -> tuple[str, str] | None:
    """The agent and registry paths a bundle file records, read without loading it.

    It walks the file's top-level fields, seeking over the others (the snapshot, the
    trace slice): ``check`` picks a worker that has imported that code already for it. None
    when the file is no such bundle; nothing here is a verdict (``load_bundle`` checks
    every part where the replay runs).
    """
    found: dict[str, str] = {}
    try:
        with open_regular(path, Input.BUNDLE, CHECK_BUNDLES) as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                return None
            while True:
                key = _file_varint(f)
                if key is None:
                    break
                number, wire_type = key >> 3, key & 7
                if wire_type == 0:
                    if _file_varint(f) is None:
                        return None
                elif wire_type in (1, 5):
                    f.seek(8 if wire_type == 1 else 4, os.SEEK_CUR)
                elif wire_type == 2:
                    length = _file_varint(f)
                    if length is None:
                        return None
                    name = _CODE_FIELDS.get(number)
                    if name is not None and length <= _MAX_CODE_PATH:
                        found[name] = f.read(length).decode("utf-8", "replace")
                    else:
                        f.seek(length, os.SEEK_CUR)
                else:
                    return None
    except (OSError, InputError):
        return None
    if set(found) != set(_CODE_FIELDS.values()):
        return None
    return found["agent"], found["registry"]


# --------------------------------------------------------------------------- writing


def _key_events(
    traces: Sequence[Source], key: bytes, naming: Naming
) -> dict[int, dict[int, bytes]]:
    """The deterministic bytes of every traced event of ``key``, by seq and index."""
    found: dict[int, dict[int, bytes]] = {}
    for _, event, _frame in trace_events(traces, key, naming):
        # Canonical bytes, whatever wrote the stream: the loader refuses any other.
        found.setdefault(event.seq, {})[event.index] = serialize_trace_event(event)
    return found


def _hitl_settings(policy: HitlPolicy) -> HitlSettings:
    return HitlSettings(
        intent_ttl_ms=policy.intent_ttl_ms,
        hitl_timeout_ms=policy.hitl_timeout_ms,
        approval_channel=policy.approval_channel,
        approval_required_tools=sorted(policy.approval_required_tools),
    )


def make_bundle(
    *,
    snapshot: Source,
    traces: Sequence[Source],
    agent: str,
    registry: str,
    events: Sequence[Source] = (),
    event: Source | None = None,
    seq: int | None = None,
    all_seqs: bool = False,
    hitl: str | None = None,
    naming: Naming = MAKE_BUNDLE,
) -> bytes:
    """The bytes of the bundle of one incident (deterministic: same inputs, same bytes).

    Args:
        snapshot: The ``StateSnapshot`` file (its bytes are kept as they are).
        traces: Trace streams or directories; only the snapshot key's events of the
            chosen activations are kept.
        agent: ``module:ATTR`` of the Agent the pipeline ran (recorded, not imported).
        registry: ``module:ATTR`` of its ToolRegistry (recorded, not imported).
        events: Envelope dumps; the triggering envelopes are picked by traced id and sha256.
        event: One envelope file, added to ``events``.
        seq: The activation to bundle; None: the key's highest traced one.
        all_seqs: Every traced activation of the key up to the snapshot's seq.
        hitl: ``module:ATTR`` of the pipeline's HitlPolicy (imported to record it).
        naming: How the caller names these inputs in messages (default: these parameters).

    Raises:
        InputError: Unreadable or disagreeing inputs, an activation the snapshot
            cannot hold, or a triggering envelope missing from the dumps.
        CannotReproduce: The snapshot has a migration gap.
    """
    from beam_agents.replay.inputs.snapshot import load_snapshot_source

    traces, events = as_sources(traces), as_sources(events)
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
        # '1' was looked up as a seq and refused as "no activation at seq 1 (traced seqs: 1-3)"
        raise InputError(
            f"{naming.name(Input.SEQ)} must be an int or None, got {type(seq).__name__}: "
            f"{seq!r:.80}"
        )
    for what, value in ((Input.AGENT, agent), (Input.REGISTRY, registry)):
        if ":" not in value:
            raise InputError(f"{naming.given(what, repr(value))} is not of the form module:ATTR")
    if seq is not None and all_seqs:
        raise InputError(
            f"{naming.name(Input.SEQ)} and {naming.name(Input.ALL)} were both given",
            "bundle one activation, or all",
        )
    raw_snapshot = read_source(snapshot, Input.SNAPSHOT, naming)
    # The loader is given the bytes read: name them as the caller gave them (a path).
    as_given = naming.known_as(Input.SNAPSHOT, naming.given(Input.SNAPSHOT, describe_source(snapshot)))
    snap, _state, _ = load_snapshot_source(raw_snapshot, as_given)
    key = snap.entity_key
    by_seq = _key_events(traces, key, naming)
    if not by_seq:
        raise InputError(
            f"the traces hold no event of key {key.hex()} (the snapshot's key)",
            "pass the trace streams of the pipeline the snapshot came from",
        )
    traced = sorted(by_seq)
    if all_seqs:
        seqs = [s for s in traced if s <= snap.seq]
        if not seqs:
            raise InputError(
                f"every traced activation of key {key.hex()} (seqs {seq_ranges(traced)}) is "
                f"after the snapshot (seq {snap.seq})",
                "export the key after the activations you want to bundle",
            )
    else:
        target = traced[-1] if seq is None else seq
        if target not in by_seq:
            raise InputError(
                f"{naming.given(Input.SEQ, target)}: the traces hold no activation of key "
                f"{key.hex()} at seq "
                f"{target} (traced seqs: {seq_ranges(traced)})",
                "pick a traced seq, or pass the traces that hold it",
            )
        if target > snap.seq:
            raise InputError(
                f"the snapshot was exported at seq {snap.seq}, before the activation at seq "
                f"{target}: it cannot replay it",
                f"export the key again after seq {target}, or bundle "
                f"{naming.given(Input.SEQ, snap.seq)} or lower",
            )
        seqs = [target]
    trace_bytes: list[bytes] = []
    starts: dict[int, ActivationStart] = {}
    for s in seqs:
        events_of = [TraceEvent.FromString(by_seq[s][i]) for i in sorted(by_seq[s])]
        check_complete(events_of, key, s)
        starts[s] = ActivationStart.of(events_of[0])
        trace_bytes.extend(by_seq[s][i] for i in sorted(by_seq[s]))
    needed = [(s, *starts[s].envelope) for s in seqs if not starts[s].is_timeout]
    envelopes: list[bytes] = []
    if needed:
        sources = [*events, *([event] if event is not None else [])]
        if not sources:
            events_name, event_name = naming.name(Input.EVENTS), naming.name(Input.EVENT)
            raise InputError(
                f"the activation(s) at seq {seq_ranges(s for s, _, _ in needed)} were triggered "
                f"by envelopes (first: {needed[0][1]!r}), and no {events_name} or {event_name} "
                "was given",
                f"pass a dump of the events (and results, approvals) topics with {events_name}",
            )
        index = load_envelopes(sources, key, naming)
        for s, envelope_id, sha256 in needed:
            raw = index.find(envelope_id, sha256, seq=s)
            if raw not in envelopes:
                envelopes.append(raw)
    policy = (
        import_object(hitl, Input.HITL, HitlPolicy, naming)
        if hitl is not None
        else DEFAULT_HITL_POLICY
    )
    message = IncidentBundle(
        format=BUNDLE_FORMAT,
        bundle_version=BUNDLE_VERSION,
        package_version=__version__,
        entity_key=key,
        seqs=seqs,
        snapshot=raw_snapshot,
        trace_events=trace_bytes,
        envelopes=envelopes,
        agent=agent,
        registry=registry,
        hitl_path=hitl or "",
        hitl=_hitl_settings(policy),
        hitl_description=policy.describe(),
    )
    return message.SerializeToString(deterministic=True)


# --------------------------------------------------------------------------- reading

_LOAD_ADVICE = "make bundles with beam-agents-replay bundle; never edit one by hand"


def _refuse(name: str, what: str, advice: str = _LOAD_ADVICE) -> InputError:
    return InputError(f"bundle {name} {what}", advice, cause=f"the bundle {what}")


def load_bundle(
    source: Source, *, name: str | None = None, naming: Naming = CHECK_BUNDLES
) -> Bundle:
    """Read and check a bundle (``name``: how to call it in messages, default its path;
    ``naming``: how the caller names the inputs, for how to raise the size cap).

    Raises:
        InputError: Not a bundle, truncated or corrupt, newer than this package, too
            large, or with parts that disagree (the message names the file and the part).
    """
    name = name or describe_source(source)
    if not isinstance(source, bytes):
        path = os.fspath(source)
        try:
            st = os.stat(path)
        except OSError as exc:
            why = exc.strerror or exc
            raise InputError(
                f"cannot read bundle {name}: {why}", cause=f"cannot read the bundle: {why}"
            ) from None
        import stat

        if not stat.S_ISREG(st.st_mode):
            kind = file_kind(st.st_mode)
            raise _refuse(name, f"is {kind}, not a regular file", "pass a bundle file")
        # The one cap of a bundle, as of every input (docs/replay.md, "Input files"): a file
        # merely large is no corrupt one, and the refusal says how to raise it.
        cap = size_cap(Input.BUNDLE, naming)
        if st.st_size > cap:
            raise too_large(Input.BUNDLE, naming, path, cap)
        if not is_bundle_file(path) and os.access(path, os.R_OK):
            data = _MAGIC[:0]  # not a bundle: refused below without reading the whole file
        else:
            data = read_source(source, Input.BUNDLE, naming)
    else:
        data = source
        cap = size_cap(Input.BUNDLE, naming)
        if len(data) > cap:
            raise too_large(Input.BUNDLE, naming, name, cap)
    if not data.startswith(_MAGIC):
        raise _refuse(
            name,
            "is not an incident bundle",
            f"it does not start with the {BUNDLE_FORMAT!r} format field; pass a file "
            "beam-agents-replay bundle wrote",
        )
    over = _over_counts(data)
    if over is not None:
        what, cap = over
        raise _refuse(
            name,
            f"holds more than {cap} {what} (counted before parsing)",
            "a bundle holds the activations of one incident; make one of fewer activations",
        )
    message = IncidentBundle()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise _refuse(
            name,
            "is truncated or corrupt",
            f"its {len(data)} bytes do not parse as an IncidentBundle ({exc}); {_LOAD_ADVICE}",
        ) from None
    if message.bundle_version > BUNDLE_VERSION:
        raise _refuse(
            name,
            f"has bundle version {message.bundle_version}, newer than this beam-agents "
            f"{__version__} reads (up to {BUNDLE_VERSION}); it was written by beam-agents "
            f"{message.package_version or '?'}",
            f"install beam-agents {message.package_version or 'of that version'} or newer "
            "to replay it",
        )
    if message.bundle_version < 1:
        raise _refuse(name, f"has bundle version {message.bundle_version}, which never existed")
    hitl, loaded = _check_parts(name, message)
    given_path = None if isinstance(source, bytes) else os.fspath(source)
    return Bundle(name=name, message=message, hitl=hitl, loaded_snapshot=loaded, path=given_path)


COUNT_CAPS: dict[str, int] = {
    "activations": 100_000,
    "trace events": 2_000_000,
    "envelopes": 100_000,
}
"""The most of each a bundle may hold, counted on the wire before it is parsed: parsing
builds an object of hundreds of bytes per element, however few bytes it takes (an 80 MB
bundle took 2 GB, a 300 MB one crashed the parser). Its snapshot has its own
(``inputs.snapshot.COUNT_CAPS``)."""

_COUNTED = {5: "activations", 7: "trace events", 8: "envelopes"}  # IncidentBundle fields


def _over_counts(data: bytes) -> tuple[str, int] | None:
    """The first of ``COUNT_CAPS`` the bundle's wire exceeds, and that cap (the walk stops
    there, so it is bounded by the caps, not by the elements the wire holds)."""
    counts = dict.fromkeys(COUNT_CAPS, 0)
    with memoryview(data) as view:
        for number, wire_type, start, end in message_fields(view):
            what = _COUNTED.get(number)
            if what is None:
                continue
            # seqs are packed (one field, many varints) or not (one field each).
            counts[what] += packed_varints(view[start:end]) if wire_type == 2 and number == 5 else 1
            if counts[what] > COUNT_CAPS[what]:
                return what, COUNT_CAPS[what]
    return None


_ITS_SNAPSHOT = CHECK_BUNDLES.known_as(Input.SNAPSHOT, "its snapshot")
"""How a bundle's messages name the snapshot it holds (its loader names it by the given bytes)."""


def _check_parts(
    name: str, message: IncidentBundle
) -> tuple[HitlPolicy, tuple[StateSnapshot, KeyState, dict[str, int]]]:
    key = message.entity_key
    for field_name in ("agent", "registry"):
        if ":" not in getattr(message, field_name):
            raise _refuse(name, f"has no {field_name} path (module:ATTR)")
    seqs = list(message.seqs)
    named = set(seqs)
    if not seqs or seqs != sorted(named) or seqs[0] < 0:
        shown = ", ".join(map(str, seqs[:10])) + (", ..." if len(seqs) > 10 else "")
        raise _refuse(name, f"names no activation, or its seqs are not ascending ({shown})")
    from beam_agents.replay.inputs.snapshot import load_snapshot_source

    # Parsed once, here: every blob is checked, so a corrupt one is named by the bundle,
    # not "<N bytes>", and each replay of the bundle gets what was loaded (bundle_options).
    try:
        loaded = load_snapshot_source(message.snapshot, _ITS_SNAPSHOT)
    except InputError as exc:
        raise _refuse(name, f"holds a snapshot that does not load: {exc.reason}") from None
    except CannotReproduce as exc:  # a migration gap: exit 3, named by the bundle too
        raise CannotReproduce(
            f"bundle {name}: {exc.reason}", exc.detail, cause=f"the bundle: {exc.reason}"
        ) from None
    snapshot = loaded[0]
    if snapshot.entity_key != key:
        raise _refuse(
            name,
            f"holds a snapshot of key {snapshot.entity_key.hex()}, but the bundle is of key "
            f"{key.hex()}: its parts disagree",
        )
    # Each activation's events are kept as their bytes and parsed when it is checked: a
    # parsed event costs several times its bytes.
    by_seq: dict[int, list[bytes]] = {}
    positions: set[int] = set()
    for number, data in enumerate(message.trace_events):
        try:
            event = TraceEvent.FromString(data)
        except DecodeError as exc:
            raise _refuse(
                name, f"holds trace event {number}, which does not parse: {exc}"
            ) from None
        if serialize_trace_event(event) != data:
            # The writer keeps each event's deterministic bytes: any other bytes that
            # still parse (a flipped tag turning a digest into an overridden field, an
            # unknown field) would hide what production traced from the judgement.
            raise _refuse(
                name,
                f"holds trace event {number} (seq {event.seq} index {event.index}) not in its "
                "canonical bytes: it is corrupt, or written by a newer beam-agents whose trace "
                "fields this version does not know",
            )
        if event.entity_key != key:
            raise _refuse(
                name,
                f"holds a trace event of key {event.entity_key.hex()} (trace event {number}), "
                f"but the bundle is of key {key.hex()}: its parts disagree",
            )
        if event.seq not in named:
            raise _refuse(
                name,
                f"holds a trace event of seq {event.seq}, an activation it does not name "
                f"(seqs {seq_ranges(seqs)})",
            )
        position = (event.seq << 32) | event.index  # index is a uint32
        if position in positions:
            raise _refuse(name, f"holds two trace events at seq {event.seq} index {event.index}")
        positions.add(position)
        by_seq.setdefault(event.seq, []).append(data)
    envelopes: dict[tuple[str, str], int] = {}
    for number, data in enumerate(message.envelopes):
        envelope = AgentEnvelope()
        try:
            envelope.ParseFromString(data)
        except DecodeError as exc:
            raise _refuse(name, f"holds envelope {number}, which does not parse: {exc}") from None
        if envelope.entity_key != key:
            raise _refuse(
                name,
                f"holds an envelope of key {envelope.entity_key.hex()} (id "
                f"{envelope.envelope_id!r}), but the bundle is of key {key.hex()}: its parts "
                "disagree",
            )
        envelopes[(envelope.envelope_id, envelope_digest(envelope))] = 0
    for seq in seqs:
        events = sorted(map(TraceEvent.FromString, by_seq.pop(seq, [])), key=lambda e: e.index)
        if not events:
            raise _refuse(name, f"names seq {seq} but holds none of its trace events")
        try:
            check_complete(events, key, seq)
        except InputError as exc:
            raise _refuse(name, f"holds an incomplete trace: {exc.reason}") from None
        start = ActivationStart.of(events[0])
        if start.is_timeout:
            continue
        wanted = start.envelope
        if wanted not in envelopes:
            ids = [i for i, _ in envelopes if i == wanted[0]]
            what = (
                f"its envelope {wanted[0]!r} has other bytes than the traced sha256 {wanted[1]}"
                if ids
                else f"it holds no envelope {wanted[0]!r}"
            )
            raise _refuse(name, f"cannot replay seq {seq}: {what}: its parts disagree")
        envelopes[wanted] += 1
    unused = [i for (i, _), uses in envelopes.items() if uses == 0]
    if unused:
        shown = ", ".join(repr(i[:80]) for i in unused[:5])  # one paragraph, however many
        more = f" and {len(unused) - 5} more" if len(unused) > 5 else ""
        raise _refuse(
            name,
            f"holds {len(unused)} envelope(s) no activation of it needs ({shown}{more})",
        )
    settings = message.hitl
    try:
        hitl = HitlPolicy(
            intent_ttl_ms=settings.intent_ttl_ms,
            hitl_timeout_ms=settings.hitl_timeout_ms,
            approval_channel=settings.approval_channel,
            approval_required_tools=frozenset(settings.approval_required_tools),
        )
    except ConfigError as exc:
        raise _refuse(name, f"holds an invalid HITL policy: {exc}") from None
    return hitl, loaded


class RecordedCodeNotImported(InputError):
    """A bundle names the code it was made with, and the caller did not consent to import it.

    Importing a module runs it: a data file must not choose code to run (a bundle naming
    ``venv.__main__:main`` made a virtualenv in the current directory). The message names
    each module and where it would come from, and the two ways on.
    """

    def __init__(self, bundle: Bundle, recorded: Sequence[tuple[Input, str]], naming: Naming):
        def shown(what: Input, path: str) -> str:
            where = locate(path, bundle.code_search)
            return f"{what.value} {path} ({where or 'not found from here'})"

        code = ", ".join(shown(what, path) for what, path in recorded)
        paths = ", ".join(f"{what.value} {path}" for what, path in recorded)
        super().__init__(
            f"bundle {bundle.name} names the code it was made with, and replaying it would "
            f"import that code, which runs it: {code}; nothing a bundle names is imported "
            "without consent",
            f"pass {naming.name(Input.IMPORT_RECORDED)} to import that code, or "
            f"{naming.name(Input.AGENT)} and {naming.name(Input.REGISTRY)} to replay the "
            "bundle with code you name",
            cause=f"not imported without consent: {paths}",
        )


def check_consent(
    bundle: Bundle,
    *,
    agent: str | None = None,
    registry: str | None = None,
    import_recorded: bool = False,
    naming: Naming = CHECK_BUNDLES,
) -> None:
    """Refuse to go on to import a bundle's recorded code the caller did not consent to.

    Raises:
        RecordedCodeNotImported: ``agent`` or ``registry`` is None (the recorded one would be
            imported) and ``import_recorded`` is false.
    """
    recorded = [
        (what, path)
        for what, given, path in (
            (Input.AGENT, agent, bundle.message.agent),
            (Input.REGISTRY, registry, bundle.message.registry),
        )
        if given is None
    ]
    if recorded and not import_recorded:
        raise RecordedCodeNotImported(bundle, recorded, naming)


def bundle_options(
    bundle: Bundle,
    *,
    seq: int | None = None,
    agent: str | None = None,
    registry: str | None = None,
    import_recorded: bool = False,
    naming: Naming = CHECK_BUNDLES,
) -> ReplayOptions:
    """The ``ReplayOptions`` replaying activation ``seq`` of the bundle (default: its last).

    Args:
        bundle: A loaded bundle.
        seq: One of ``bundle.seqs``; None for the highest.
        agent: Replay with this agent instead of the recorded one (e.g. a fix to check).
        registry: Likewise for the tool registry.
        import_recorded: Consent to import the agent and registry the bundle records
            (where ``agent`` or ``registry`` is not given): importing runs that code.
        naming: How the caller names the inputs in messages (the command line: its flags).

    Raises:
        InputError: ``seq`` is not one of the bundle's activations.
        RecordedCodeNotImported: The recorded code would be imported without consent.
    """
    import io

    if seq is not None and seq not in bundle.seqs:
        raise InputError(
            f"{naming.given(Input.SEQ, seq)}: bundle {bundle.name} holds the activation(s) at seq "
            f"{seq_ranges(bundle.seqs)} only",
            "pick one of those",
        )
    check_consent(
        bundle, agent=agent, registry=registry, import_recorded=import_recorded, naming=naming
    )
    message = bundle.message
    # A recorded path is the bundle's, never the caller's --agent: its messages say so.
    for what, given in ((Input.AGENT, agent), (Input.REGISTRY, registry)):
        if given is None:
            naming = naming.known_as(
                what, f"bundle {bundle.name}'s recorded {what.value}", then_given=True
            )
    traces = b"".join(frame(data) for data in message.trace_events)
    envelopes = io.BytesIO()
    write_envelope_stream(envelopes, message.envelopes)
    return ReplayOptions(
        snapshot=message.snapshot,
        traces=(traces,),
        events=(envelopes.getvalue(),) if message.envelopes else (),
        agent=agent or message.agent,
        registry=registry or message.registry,
        seq=seq if seq is not None else bundle.seqs[-1],
        hitl_policy=bundle.hitl,
        hitl_label=message.hitl_path or "default",
        loaded_snapshot=bundle.loaded_snapshot,
        code_search=bundle.code_search,
        naming=naming,
    )

