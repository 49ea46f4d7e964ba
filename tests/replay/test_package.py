"""The package's face: replay, ReplayOptions, ReplayResult and Verdict, loaded on first access."""

from __future__ import annotations

import subprocess
import sys

import beam_agents.replay as package
from beam_agents.replay.engine import replay
from beam_agents.replay.options import ReplayOptions
from beam_agents.replay.result import ReplayResult, Verdict


def test_the_public_names_are_the_engines() -> None:
    assert sorted(package.__all__) == [
        "CheckReport",
        "CheckRow",
        "ReplayOptions",
        "ReplayResult",
        "Replayer",
        "Verdict",
        "check_bundles",
        "list_activations",
        "load_bundle",
        "make_bundle",
        "replay",
    ]
    assert (package.replay, package.ReplayOptions) == (replay, ReplayOptions)
    assert (package.ReplayResult, package.Verdict) == (ReplayResult, Verdict)
    from beam_agents.replay.incidents import bundle, listing
    from beam_agents.replay.incidents import check as bulk

    assert (package.check_bundles, package.CheckReport) == (bulk.check_bundles, bulk.CheckReport)
    assert (package.make_bundle, package.load_bundle) == (bundle.make_bundle, bundle.load_bundle)
    assert package.list_activations is listing.list_activations
    from beam_agents.replay.replayer import Replayer

    assert package.Replayer is Replayer


def test_importing_the_result_types_does_not_load_the_engine() -> None:
    code = (
        "import sys\n"
        "import beam_agents.replay.result\n"
        "print(sorted(m for m in sys.modules if m.startswith('beam_agents.replay.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['beam_agents.replay.result']"
