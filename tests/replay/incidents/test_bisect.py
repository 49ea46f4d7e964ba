"""``bisect``'s search (``cli.bisect.bisect_revisions``) with probes played by the test.

The end-to-end run, on a git repository of 30 commits and the demo's bundle, is in
tests/test_demo.py (it needs the demo's inputs).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from beam_agents.cli.bisect import Probe, bisect_revisions
from beam_agents.cli.parsing import UsageError

GOOD = {("refund.bundle", 1): ("reproduced", "reproduced")}
CHANGED = {("refund.bundle", 1): ("diverged", "event 2 TOOL_CALL lookup_order")}
BROKEN = {("refund.bundle", 1): ("error", "cannot import examples.support_desk.agent")}


def history(
    first_change: int, count: int = 29, broken: frozenset[int] = frozenset()
) -> tuple[list[str], Callable[[str], Probe], list[str]]:
    revisions = [f"c{i:02d}" for i in range(count)]
    probed: list[str] = []

    def probe(commit: str) -> Probe:
        probed.append(commit)
        i = revisions.index(commit)
        if i in broken:
            return Probe(commit, BROKEN)
        return Probe(commit, CHANGED if i >= first_change else GOOD)

    return revisions, probe, probed


@pytest.mark.parametrize("first_change", [0, 1, 13, 15, 27, 28])
def test_it_finds_the_first_revision_whose_verdicts_differ(first_change: int) -> None:
    revisions, probe, probed = history(first_change)
    found = bisect_revisions(revisions, Probe("good", GOOD), probe)
    assert found.first is not None and found.first.commit == revisions[first_change]
    assert len(probed) <= 6  # log2(29) + the bad one, never a linear walk
    assert found.skipped == {}


def test_a_revision_that_cannot_be_probed_is_skipped_and_named() -> None:
    revisions, probe, probed = history(15, broken=frozenset({13}))
    found = bisect_revisions(revisions, Probe("good", GOOD), probe)
    assert found.first is not None and found.first.commit == "c15"
    assert "c13" in probed and "cannot import" in found.skipped["c13"]


def test_skipped_revisions_next_to_the_change_leave_it_ambiguous_naming_each() -> None:
    revisions, probe, _ = history(15, broken=frozenset({13, 14}))
    found = bisect_revisions(revisions, Probe("good", GOOD), probe)
    assert found.first is None
    assert found.candidates == ("c13", "c14", "c15")
    revisions, probe, _ = history(15, broken=frozenset({14}))
    found = bisect_revisions(revisions, Probe("good", GOOD), probe)
    assert found.first is None and found.candidates == ("c14", "c15")  # as git bisect says


def test_no_change_in_the_range_is_said_after_one_probe() -> None:
    revisions, probe, probed = history(first_change=99)
    found = bisect_revisions(revisions, Probe("good", GOOD), probe)
    assert found.first is None and found.candidates == () and probed == ["c28"]


def test_a_bad_revision_that_cannot_be_probed_is_a_usage_error() -> None:
    revisions, probe, _ = history(15, broken=frozenset({28}))
    with pytest.raises(UsageError, match="--bad c28"):
        bisect_revisions(revisions, Probe("good", GOOD), probe)


def test_an_error_the_good_revision_has_too_is_a_verdict_not_a_skip() -> None:
    both = {**GOOD, ("junk.bundle", None): ("error", "not a bundle")}
    revisions = ["c0", "c1", "c2"]

    def probe(commit: str) -> Probe:
        if commit == "c2":
            return Probe(commit, {**CHANGED, ("junk.bundle", None): ("error", "not a bundle")})
        return Probe(commit, both)

    found = bisect_revisions(revisions, Probe("good", both), probe)
    assert found.first is not None and found.first.commit == "c2" and found.skipped == {}
