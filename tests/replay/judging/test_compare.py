"""The comparator: exactly two attributes normalized, on LLM_CALL only; everything else as-is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from beam_agents import trace_events as te
from beam_agents._protos import TraceEvent
from beam_agents.replay.judging.compare import (
    NORMALIZED_ATTRIBUTES,
    compare_events,
    describe_divergence,
    field_differences,
    normalize,
)
from beam_agents.trace_events import make_event

KEY = b"customer-42"
T0 = 1_734_000_000_000

ALL_ATTRIBUTES = sorted(
    value for name, value in vars(te).items() if name.startswith("ATTR_") and isinstance(value, str)
)


def llm_call(*, hit: bool, **extra: te.AttrValue) -> TraceEvent:
    attributes: dict[str, te.AttrValue] = {
        te.ATTR_CACHE_KEY: "ab" * 32,
        te.ATTR_PROVIDER: "scripted",
        te.ATTR_REQUEST_MODEL: "m-1",
        te.ATTR_CALL_ORDINAL: 0,
        te.ATTR_CACHE_HIT: hit,
        te.ATTR_BILLED: not hit,
        te.ATTR_RESPONSE_SHA256: "cd" * 32,
        te.ATTR_USAGE_INPUT: 10,
        te.ATTR_USAGE_OUTPUT: 3,
    }
    attributes.update(extra)
    return make_event(
        entity_key=KEY,
        seq=7,
        index=1,
        kind=TraceEvent.LLM_CALL,
        name="m-1",
        now_ms=T0,
        attributes=attributes,
    )


def test_the_normalization_list_is_closed_to_cache_hit_and_billed() -> None:
    # Widening this list lets a real difference pass as "reproduced": it must fail here.
    assert frozenset({"beam_agents.cache_hit", "beam_agents.billed"}) == NORMALIZED_ATTRIBUTES
    assert isinstance(NORMALIZED_ATTRIBUTES, frozenset)


def test_a_cache_hit_matches_the_provider_call_it_replays() -> None:
    traced = llm_call(hit=False)
    replayed = llm_call(hit=True)
    comparison = compare_events([traced], [replayed])
    assert comparison.first_difference is None
    assert field_differences(traced, replayed) == []


@pytest.mark.parametrize("attribute", [a for a in ALL_ATTRIBUTES if a not in NORMALIZED_ATTRIBUTES])
def test_every_other_attribute_of_an_llm_call_is_compared(attribute: str) -> None:
    traced = llm_call(hit=False, **{attribute: "traced-value"})
    replayed = llm_call(hit=True, **{attribute: "replayed-value"})
    comparison = compare_events([traced], [replayed])
    assert comparison.first_difference == 0
    assert comparison.pairs[0].differing_fields == (f"attributes[{attribute!r}]",)


@pytest.mark.parametrize("attribute", sorted(NORMALIZED_ATTRIBUTES))
def test_the_normalized_attributes_are_compared_on_other_kinds(attribute: str) -> None:
    def tool_call(value: bool) -> TraceEvent:
        return make_event(
            entity_key=KEY,
            seq=7,
            index=2,
            kind=TraceEvent.TOOL_CALL,
            name="lookup",
            now_ms=T0,
            attributes={attribute: value},
        )

    comparison = compare_events([tool_call(False)], [tool_call(True)])
    assert comparison.pairs[0].differing_fields == (f"attributes[{attribute!r}]",)


def test_a_normalized_attribute_present_on_one_side_only_differs() -> None:
    traced = llm_call(hit=False)
    replayed = llm_call(hit=True)
    del replayed.attributes[te.ATTR_BILLED]
    rows = field_differences(traced, replayed)
    assert [(r.path, r.traced, r.replayed) for r in rows] == [
        (f"attributes[{te.ATTR_BILLED!r}]", "false", "(absent)")
    ]


def test_normalize_leaves_the_original_event_untouched() -> None:
    traced = llm_call(hit=False)
    normalized = normalize(traced)
    assert normalized.attributes[te.ATTR_CACHE_HIT].bool_value is True
    assert traced.attributes[te.ATTR_CACHE_HIT].bool_value is False


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("entity_key", b"customer-7", "637573746f6d65722d37"),
        ("seq", 8, "8"),
        ("index", 5, "5"),
        ("kind", TraceEvent.TOOL_CALL, "TOOL_CALL"),
        ("name", "m-2", '"m-2"'),
        ("start_ms", T0 + 1, str(T0 + 1)),
        ("end_ms", T0 + 1, str(T0 + 1)),
        ("trace_id", b"\x01" * 16, "01" * 16),
        ("span_id", b"\x02" * 8, "02" * 8),
        ("parent_span_id", b"\x03" * 8, "03" * 8),
    ],
)
def test_every_field_of_an_event_is_compared(field: str, value: object, shown: str) -> None:
    traced = llm_call(hit=False)
    replayed = llm_call(hit=True)
    setattr(replayed, field, value)
    rows = field_differences(traced, replayed)
    assert [r.path for r in rows] == [field]
    assert rows[0].replayed == shown


def test_a_value_of_another_type_differs_even_when_it_prints_alike() -> None:
    traced = llm_call(hit=False, **{te.ATTR_USAGE_INPUT: 10})
    replayed = llm_call(hit=True)
    replayed.attributes[te.ATTR_USAGE_INPUT].string_value = "10"
    rows = field_differences(traced, replayed)
    assert [(r.traced, r.replayed) for r in rows] == [("10", '"10"')]


def test_a_field_this_version_does_not_know_is_still_a_difference() -> None:
    traced = llm_call(hit=False)
    data = te.serialize_trace_event(llm_call(hit=True)) + b"\xf8\x01\x05"  # field 31, varint 5
    replayed = TraceEvent.FromString(data)
    comparison = compare_events([traced], [replayed])
    assert comparison.first_difference == 0
    assert comparison.pairs[0].differing_fields == ("(serialized bytes)",)


def test_a_missing_and_an_extra_event_are_differences() -> None:
    one, two = llm_call(hit=False), llm_call(hit=False)
    two.index = 2
    short = compare_events([one, two], [one])
    assert short.first_difference == 1
    assert describe_divergence(short.pairs[1]).missing
    long = compare_events([one], [one, two])
    assert long.first_difference == 1
    divergence = describe_divergence(long.pairs[1])
    assert divergence.extra and divergence.kind == "LLM_CALL"


def test_the_first_divergence_names_the_event_and_renders_both_values() -> None:
    traced = llm_call(hit=False, **{te.ATTR_RESPONSE_SHA256: "11" * 32})
    replayed = llm_call(hit=True, **{te.ATTR_RESPONSE_SHA256: "22" * 32})
    later = llm_call(hit=False)
    later.index = 2
    comparison = compare_events([traced, later], [replayed, later])
    assert comparison.first_difference == 0
    assert [p.differs for p in comparison.pairs] == [True, False]
    divergence = describe_divergence(comparison.pairs[0])
    assert (divergence.index, divergence.kind, divergence.name) == (0, "LLM_CALL", "m-1")
    assert [f.path for f in divergence.fields] == [f"attributes[{te.ATTR_RESPONSE_SHA256!r}]"]
    assert "11" * 32 in divergence.detail and "22" * 32 in divergence.detail
    assert "cache_hit" not in divergence.detail  # normalized: not shown as a difference


def test_a_divergence_without_its_detail_names_the_same_fields_without_deepdiff() -> None:
    """``detail=False`` (check's workers, whose rows never show the detail): the same
    divergence, its detail the field rows as text, and DeepDiff is not imported."""
    code = (
        "import sys\n"
        "from beam_agents import trace_events as te\n"
        "from beam_agents._protos import TraceEvent\n"
        "from beam_agents.replay.judging.compare import compare_events, describe_divergence\n"
        "from beam_agents.trace_events import make_event\n"
        "def call(digest):\n"
        "    return make_event(entity_key=b'k', seq=1, index=0, kind=TraceEvent.TOOL_CALL, name='t',\n"
        "                      now_ms=1, attributes={te.ATTR_RESULT_SHA256: digest})\n"
        "pair = compare_events([call('11' * 32)], [call('22' * 32)]).pairs[0]\n"
        "plain = describe_divergence(pair, detail=False)\n"
        "print('deepdiff' in sys.modules)\n"
        "rendered = describe_divergence(pair)\n"
        "print(plain.fields == rendered.fields, plain.index == rendered.index)\n"
        "print(plain.detail)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, same, detail = out.stdout.split("\n", 2)
    assert imported == "False" and same == "True True"
    path = f"attributes[{te.ATTR_RESULT_SHA256!r}]"
    assert detail.strip() == f'{path}: traced "{"11" * 32}", replayed "{"22" * 32}"'


def test_comparing_equal_events_does_not_import_deepdiff() -> None:
    code = (
        "import sys\n"
        "from beam_agents.replay.judging.compare import compare_events\n"
        "from beam_agents.trace_events import make_event\n"
        "e = make_event(entity_key=b'k', seq=1, index=0, kind=1, name='start', now_ms=1)\n"
        "assert compare_events([e], [e]).first_difference is None\n"
        "print('deepdiff' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pairs_over_serialized_events_are_the_pairs_over_messages() -> None:
    """The engine compares an ``EventLog`` (bytes) with the re-run: the same pairs as messages."""
    from beam_agents.event_log import EventLog
    from beam_agents.replay.result import EventPairs, differing_positions, pair_counts

    same = llm_call(hit=False)
    normalized_only = llm_call(hit=False)
    normalized_only.index = 2
    changed = llm_call(hit=False, **{te.ATTR_RESPONSE_SHA256: "11" * 32})
    changed.index = 3
    traced = [same, normalized_only, changed]
    replayed_hit = llm_call(hit=True)
    replayed_hit.index = 2
    replayed_changed = llm_call(hit=True, **{te.ATTR_RESPONSE_SHA256: "22" * 32})
    replayed_changed.index = 3
    extra = llm_call(hit=True)
    extra.index = 4
    replayed = [same, replayed_hit, replayed_changed, extra]
    as_messages = compare_events(traced, replayed)
    as_bytes = compare_events(EventLog.of(traced), EventLog.of(replayed))
    assert isinstance(as_bytes.pairs, EventPairs)
    assert list(as_bytes.pairs) == list(as_messages.pairs)
    assert as_bytes.pairs == tuple(as_messages.pairs)  # a lazy sequence equals its items' tuple
    assert as_bytes.first_difference == as_messages.first_difference == 2
    pairs = list(as_bytes.pairs)
    assert [p.differs for p in pairs] == [False, False, True, True]
    assert pairs[1].normalized_fields == (
        f"attributes[{te.ATTR_BILLED!r}]",
        f"attributes[{te.ATTR_CACHE_HIT!r}]",
    )
    assert pairs[2].differing_fields == (f"attributes[{te.ATTR_RESPONSE_SHA256!r}]",)
    assert pairs[3].traced is None and pairs[3].replayed == extra
    assert differing_positions(as_bytes.pairs) == differing_positions(pairs) == [2, 3]
    assert pair_counts(as_bytes.pairs) == pair_counts(pairs) == (3, 4, 2)
    assert as_bytes.pairs[-1] == pairs[-1] and as_bytes.pairs[1:3] == tuple(pairs[1:3])
    marked = as_bytes.pairs.marked(1, ["outputs"])
    assert marked[1].differs and marked[1].differing_fields == ("outputs",)
    assert not as_bytes.pairs[1].differs  # marking makes a copy


def test_an_event_log_reads_back_the_events_it_was_given() -> None:
    from beam_agents.event_log import EventLog

    events = [llm_call(hit=False), llm_call(hit=True)]
    log = EventLog.of(events)
    assert len(log) == 2 and list(log) == events and log == events
    assert log[1] == events[1] and log[-1] == events[1] and list(log[:1]) == events[:1]
    assert log.raw(0) == te.serialize_trace_event(events[0])
    assert log[0] is not log[0]  # parsed on each read: nothing is kept but the bytes
    assert EventLog.of(log) is log and not EventLog()
