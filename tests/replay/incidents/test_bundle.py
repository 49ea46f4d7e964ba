"""Incident bundles: deterministic bytes, only the key's data, the engine's verdicts, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import replay_agents as ra
from incident_history import AGENT, OTHER, TOOLS, Incident, ask, dump
from replay_harness import KEY, T0, KeyHistory, options

from beam_agents._protos import AgentEnvelope, IncidentBundle, StateSnapshot
from beam_agents.replay.engine import replay
from beam_agents.replay.incidents import bundle as bd
from beam_agents.replay.refusal import InputError
from beam_agents.replay.result import Verdict


@pytest.fixture(scope="module")
def incident() -> Incident:
    return Incident()


def test_same_inputs_same_bytes_whatever_their_order(incident: Incident) -> None:
    a = incident.make(all_seqs=True)
    b = incident.make(
        all_seqs=True,
        traces=[incident.h.trace_bytes(), incident.other.trace_bytes()],
        events=[dump(list(incident.sent)), dump(incident.sent[:2])],
    )
    assert a == b
    loaded = bd.load_bundle(a)
    assert loaded.seqs == (1, 2, 3, 4)
    assert loaded.message.SerializeToString(deterministic=True) == a  # round-trips byte for byte


def test_only_the_keys_data_and_only_the_named_activation(incident: Incident) -> None:
    one = IncidentBundle.FromString(incident.make(seq=2))
    assert list(one.seqs) == [2] and one.entity_key == KEY
    assert one.snapshot == incident.snapshot
    from beam_agents._protos import TraceEvent

    events = [TraceEvent.FromString(e) for e in one.trace_events]
    assert {(e.entity_key, e.seq) for e in events} == {(KEY, 2)}
    assert [AgentEnvelope.FromString(e).envelope_id for e in one.envelopes] == [
        incident.sent[1].envelope_id
    ]
    everything = IncidentBundle.FromString(incident.make(all_seqs=True))
    assert len(everything.envelopes) == 4
    assert all(AgentEnvelope.FromString(e).entity_key == KEY for e in everything.envelopes)
    default = IncidentBundle.FromString(incident.make())
    assert list(default.seqs) == [4]  # like replay: the key's highest traced activation


def test_each_activation_replays_as_from_the_separate_files(incident: Incident) -> None:
    loaded = bd.load_bundle(incident.make(all_seqs=True))
    for seq, envelope in zip(loaded.seqs, incident.sent, strict=True):
        from_bundle = replay(bd.bundle_options(loaded, seq=seq, import_recorded=True))
        from_files = replay(
            options(incident.snapshot, incident.h.trace_bytes(), event=envelope, seq=seq)
        )
        assert from_bundle.verdict is from_files.verdict is Verdict.REPRODUCED, from_bundle.error
        assert [p.replayed for p in from_bundle.events] == [p.replayed for p in from_files.events]
        assert from_bundle.header.hitl_source == "default"
    changed = replay(bd.bundle_options(loaded, seq=1, agent="replay_agents:AGENT_NEW_PROMPT", import_recorded=True))
    assert changed.verdict is Verdict.IRREPRODUCIBLE  # a changed prompt misses the cache
    with pytest.raises(InputError, match="holds the activation"):
        bd.bundle_options(loaded, seq=9, import_recorded=True)


def test_the_snapshot_is_loaded_once_and_every_replay_reads_that_load(
    incident: Incident, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from beam_agents.replay import engine
    from beam_agents.replay.inputs import snapshot as inputs
    from beam_agents.replay.reporting.json_doc import render_json

    data = incident.make(all_seqs=True)
    loads: list[int] = []
    real_load = inputs.load_snapshot_source

    def counting(source, naming):  # type: ignore[no-untyped-def]
        loads.append(1)
        return real_load(source, naming)

    monkeypatch.setattr(inputs, "load_snapshot_source", counting)  # load_bundle's
    monkeypatch.setattr(engine, "load_snapshot_source", counting)  # a replay's own
    loaded = bd.load_bundle(data)
    assert loaded.loaded_snapshot is not None and len(loads) == 1
    shared = [replay(bd.bundle_options(loaded, seq=seq, import_recorded=True)) for seq in loaded.seqs * 2]
    assert len(loads) == 1  # four activations, each replayed twice: no load of their own
    # The same results as a replay that loads the snapshot itself, activation by activation.
    for seq, result in zip(loaded.seqs * 2, shared, strict=True):
        own = replay(replace(bd.bundle_options(loaded, seq=seq, import_recorded=True), loaded_snapshot=None))
        assert result.verdict is own.verdict is Verdict.REPRODUCED
        assert render_json(result) == render_json(own)
    assert len(loads) == 1 + 2 * len(loaded.seqs)


def test_an_agent_spoiling_what_it_was_handed_leaves_the_next_replay_of_the_load_nothing(
    incident: Incident,
) -> None:
    """A differential check of the shared load (hostile pass): each activation replayed
    from the bundle's one load, in any order and again, gives the --json of a replay that
    loads the snapshot itself, with an agent that spoils every object it can reach."""
    from dataclasses import replace

    from beam_agents.replay.reporting.json_doc import render_json

    loaded = bd.load_bundle(incident.make(all_seqs=True))
    vandal = "replay_agents:AGENT_VANDAL"
    fresh = {
        seq: render_json(
            replay(replace(bd.bundle_options(loaded, seq=seq, agent=vandal, import_recorded=True), loaded_snapshot=None))
        )
        for seq in loaded.seqs
    }
    order = [*loaded.seqs, *reversed(loaded.seqs), *loaded.seqs]
    for seq in order:
        shared = replay(bd.bundle_options(loaded, seq=seq, agent=vandal, import_recorded=True))
        assert shared.verdict is Verdict.REPRODUCED, (seq, shared.error)
        assert render_json(shared) == fresh[seq], seq
    assert render_json(replay(bd.bundle_options(loaded, seq=1, import_recorded=True))) == render_json(
        replay(replace(bd.bundle_options(loaded, seq=1, import_recorded=True), loaded_snapshot=None))
    )


def test_a_recorded_hitl_policy_is_replayed(incident: Incident) -> None:
    h = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider(), hitl=ra.HITL_SHORT)
    refund = ask("refund please", T0, "refund")
    h.send(refund)
    data = bd.make_bundle(
        snapshot=h.export(),
        traces=[h.trace_bytes()],
        event=refund.SerializeToString(),
        agent=AGENT,
        registry=TOOLS,
        hitl="replay_agents:HITL_SHORT",
    )
    loaded = bd.load_bundle(data)
    assert loaded.hitl == ra.HITL_SHORT and loaded.message.hitl_path == "replay_agents:HITL_SHORT"
    result = replay(bd.bundle_options(loaded, import_recorded=True))
    assert result.verdict is Verdict.REPRODUCED
    assert result.header.hitl_source == "replay_agents:HITL_SHORT"
    assert result.header.hitl_policy == ra.HITL_SHORT.describe()
    default = bd.make_bundle(
        snapshot=h.export(),
        traces=[h.trace_bytes()],
        event=refund.SerializeToString(),
        agent=AGENT,
        registry=TOOLS,
    )
    assert replay(bd.bundle_options(bd.load_bundle(default), import_recorded=True)).verdict is Verdict.DIVERGED


def test_making_refuses_a_missing_envelope_or_an_activation_after_the_snapshot(
    incident: Incident,
) -> None:
    with pytest.raises(InputError, match=repr(incident.sent[1].envelope_id)):
        incident.make(seq=2, events=[dump([incident.sent[0]])])
    with pytest.raises(InputError, match="no events= or event="):
        incident.make(seq=2, events=[])
    early = KeyHistory(ra.AGENT, ra.TOOLS, ra.make_provider())
    early.send(incident.sent[0])
    snap = early.export()
    early.send(ask("again", T0 + 5000))
    with pytest.raises(InputError, match="before the activation at seq 2"):
        bd.make_bundle(
            snapshot=snap,
            traces=[early.trace_bytes()],
            events=[incident.events],
            agent=AGENT,
            registry=TOOLS,
        )


def _tamper(data: bytes, change) -> bytes:  # type: ignore[no-untyped-def]
    message = IncidentBundle.FromString(data)
    change(message)
    return message.SerializeToString(deterministic=True)


def _other_snapshot(m: IncidentBundle) -> None:
    snap = StateSnapshot.FromString(m.snapshot)
    snap.entity_key = OTHER
    m.snapshot = snap.SerializeToString(deterministic=True)


def _corrupt_memory(m: IncidentBundle) -> None:
    from beam_agents._protos import VersionedBlob

    snap = StateSnapshot.FromString(m.snapshot)
    blob = VersionedBlob.FromString(snap.memory)
    blob.body = b'{"note":"\\ud800"}'  # a lone surrogate: no pipeline commits it
    snap.memory = blob.SerializeToString(deterministic=True)
    m.snapshot = snap.SerializeToString(deterministic=True)


def _forged_envelope(m: IncidentBundle) -> None:
    env = AgentEnvelope.FromString(m.envelopes[0])
    env.event.payload = b"something else"
    m.envelopes[0] = env.SerializeToString()


def _extra_envelope(m: IncidentBundle) -> None:
    m.envelopes.append(ask("unrelated", T0).SerializeToString())


def _foreign_event(m: IncidentBundle) -> None:
    from beam_agents._protos import TraceEvent

    ev = TraceEvent.FromString(m.trace_events[0])
    ev.entity_key = OTHER
    m.trace_events.append(ev.SerializeToString(deterministic=True))  # canonical, other key


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda m: setattr(m, "bundle_version", 99), "bundle version 99, newer than"),
        (lambda m: setattr(m, "bundle_version", 0), "never existed"),
        (_other_snapshot, "holds a snapshot of key"),
        (
            _corrupt_memory,
            "holds a snapshot that does not load: its snapshot holds a corrupt memory",
        ),
        (_forged_envelope, "other bytes than the traced sha256"),
        (lambda m: m.ClearField("envelopes"), "holds no envelope"),
        (_extra_envelope, "no activation of it needs"),
        (_foreign_event, "trace event of key"),
        (lambda m: m.seqs.append(7), "names seq 7 but holds none"),
        (lambda m: setattr(m, "agent", ""), "has no agent path"),
        (lambda m: setattr(m.hitl, "hitl_timeout_ms", -1), "invalid HITL policy"),
        (
            lambda m: setattr(m, "snapshot", b"\xff\xff"),
            "snapshot that does not load: its snapshot is not a serialized StateSnapshot",
        ),
    ],
)
def test_a_bundle_whose_parts_disagree_is_refused(
    incident: Incident, change, needle: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "incident.bundle"
    path.write_bytes(_tamper(incident.make(all_seqs=True), change))
    with pytest.raises(InputError) as info:
        bd.load_bundle(path)
    assert str(path) in info.value.message and needle in info.value.message, info.value.message


def test_not_a_bundle_truncated_or_not_a_file(incident: Incident, tmp_path: Path) -> None:
    data = incident.make(all_seqs=True)
    cases = {
        "snapshot.pb": (incident.snapshot, "is not an incident bundle"),
        "cut.bundle": (data[: len(data) // 2], "is truncated or corrupt"),
        "empty.bundle": (b"", "is not an incident bundle"),
    }
    for name, (content, needle) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(InputError, match=needle):
            bd.load_bundle(path)
    with pytest.raises(InputError, match="not a regular file"):
        bd.load_bundle(tmp_path)
    assert bd.is_bundle_file(_write(tmp_path / "ok.bundle", data))
    assert not bd.is_bundle_file(tmp_path / "snapshot.pb")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_field_numbers_are_forever() -> None:
    numbers = {f.name: f.number for f in IncidentBundle.DESCRIPTOR.fields}
    assert numbers == {
        "format": 1, "bundle_version": 2, "package_version": 3, "entity_key": 4, "seqs": 5,
        "snapshot": 6, "trace_events": 7, "envelopes": 8, "agent": 9, "registry": 10,
        "hitl_path": 11, "hitl": 12, "hitl_description": 13,
    }  # fmt: skip
    assert IncidentBundle.DESCRIPTOR.full_name == "beam_agents.v1.IncidentBundle"


def test_mutated_bundles_are_refused_or_judged_never_a_crash(incident: Incident) -> None:
    """Random byte flips, cuts and splices: every outcome is a refusal or a verdict, no bug."""
    import random

    from beam_agents.replay.incidents.check_workers import CheckSettings, check_one

    data = incident.make(all_seqs=True)
    rng = random.Random(13)
    seen: set[str] = set()
    for round_ in range(150):
        mutated = bytearray(data)
        how = round_ % 3
        if how == 0:
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        elif how == 1:
            del mutated[rng.randrange(len(mutated)) :]
        else:
            at = rng.randrange(len(mutated))
            mutated[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".bundle") as f:
            f.write(bytes(mutated))
            f.flush()
            for row in check_one(f.name, CheckSettings(import_recorded=True)):
                assert not row.cause.startswith("internal error"), (round_, row.detail)
                seen.add(row.verdict.value)
    assert "error" in seen  # most mutations are refused


def _hide_outputs_digest(m: IncidentBundle) -> None:
    """Corrupt the last ACTIVATION_END as one flipped tag bit does: 0x42 (field 8, the
    attributes map) -> 0x4a (field 9, trace_id). The outputs digest's map entry becomes a
    trace_id the event's real trace_id (later in the bytes) overrides: the event still
    parses, without its outputs digest, and the outputs were then never judged (exit 0)."""
    from beam_agents._protos import TraceEvent
    from beam_agents.trace_events import ATTR_OUTPUTS_SHA256

    at = max(i for i, raw in enumerate(m.trace_events) if TraceEvent.FromString(raw).kind == 7)
    raw = m.trace_events[at]
    entry = raw.index(ATTR_OUTPUTS_SHA256.encode()) - 2  # tag, length, then the key field
    while raw[entry] != 0x42:
        entry -= 1
    corrupted = raw[:entry] + b"\x4a" + raw[entry + 1 :]
    parsed = TraceEvent.FromString(corrupted)
    assert ATTR_OUTPUTS_SHA256 not in parsed.attributes  # still parses, digest gone
    m.trace_events[at] = corrupted


def test_a_trace_event_not_in_its_canonical_bytes_is_refused(
    incident: Incident, tmp_path: Path
) -> None:
    """A bundle writes every trace event deterministically; other bytes are corruption."""
    path = tmp_path / "flipped.bundle"
    message = IncidentBundle.FromString(incident.make(all_seqs=True))
    _hide_outputs_digest(message)
    path.write_bytes(message.SerializeToString(deterministic=True))
    with pytest.raises(InputError) as info:
        bd.load_bundle(path)
    assert str(path) in info.value.message
    assert "trace event" in info.value.message and "not in its canonical" in info.value.message


def test_a_large_file_that_is_no_bundle_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check over a folder of junk *.bundle files reads 29 bytes of each, not 512 MiB."""
    junk = tmp_path / "junk.bundle"
    with open(junk, "wb") as f:
        f.truncate(400 * 1024 * 1024)  # sparse: no disk used

    def whole_read(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the whole file was read")

    monkeypatch.setattr(bd, "read_source", whole_read)
    with pytest.raises(InputError, match="is not an incident bundle"):
        bd.load_bundle(junk)


def test_many_unneeded_envelopes_are_refused_in_one_short_paragraph(incident: Incident) -> None:
    """300k forged envelopes made a 3 MB error message naming every id."""
    message = IncidentBundle.FromString(incident.make(seq=1))
    template = AgentEnvelope.FromString(message.envelopes[0])
    for i in range(2000):
        template.envelope_id = f"forged-{i}-" + "x" * 500
        message.envelopes.append(template.SerializeToString(deterministic=True))
    with pytest.raises(InputError) as info:
        bd.load_bundle(message.SerializeToString(deterministic=True))
    text = info.value.message
    assert "holds 2000 envelope(s) no activation of it needs" in text
    assert "and 1995 more" in text and len(text) < 1200
