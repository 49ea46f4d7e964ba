"""``make demo`` end to end, headless: the pipeline runs, and each incident gets its verdict.

Runs ``scripts/demo.py`` exactly as the Makefile does (with ``DEMO_HEADLESS=1``),
into a temporary directory, and checks what a newcomer would look at: the three
verdicts with their exit codes (reproduced 0, diverged 1, irreproducible 3),
the files an operator replays from, and that a re-run starts clean.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from beam_agents._protos import AgentEnvelope, StateSnapshot
from beam_agents.trace_stream import trace_stream_files

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scripts" / "demo.py"
EXPECTED = {
    "refund-v1": ("reproduced", 0),
    "refund-v2": ("diverged", 1),
    "carol-typo": ("irreproducible", 3),
    "refund-resume": ("reproduced", 0),
    "alice-tracking": ("reproduced", 0),
}
_VERDICT_LINE = re.compile(
    r"^  (?P<name>\S+)\s+(?P<verdict>\S+)\s+exit (?P<code>\d+)\s+(?P<mark>.+)$"
)


def run_demo(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEMO_HEADLESS": "1"}
    return subprocess.run(
        [sys.executable, str(DEMO), "--out", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("demo") / "demo-out"
    out.mkdir()
    (out / ".beam-agents-demo").write_text("")
    (out / "stale-from-last-run.txt").write_text("must be gone after the demo")
    return out, run_demo(out)


def verdicts(stdout: str) -> dict[str, tuple[str, int, str]]:
    section = stdout.split("\n3. Verdicts\n", 1)[1].split("\n\n", 1)[0]
    found = {}
    for line in section.splitlines():
        match = _VERDICT_LINE.match(line)
        assert match, f"unexpected verdict line {line!r}"
        found[match["name"]] = (match["verdict"], int(match["code"]), match["mark"])
    return found


@pytest.mark.slow
def test_the_demo_succeeds_headless(demo: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, done = demo
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DEMO_HEADLESS is set: not opening the TUI" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("incident", sorted(EXPECTED))
def test_each_incident_gets_its_verdict_and_exit_code(
    demo: tuple[Path, subprocess.CompletedProcess[str]], incident: str
) -> None:
    _, done = demo
    verdict, code = EXPECTED[incident]
    assert verdicts(done.stdout)[incident] == (verdict, code, "ok"), done.stdout


@pytest.mark.slow
def test_the_reports_name_what_happened(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = demo
    reports = done.stdout.split("\n2. The incidents")[1]
    assert "provider calls: 0" in reports
    assert "first divergence: event 2 TOOL_CALL 'lookup_order'" in reports
    assert "cache miss" in reports and "messages[1]" in reports
    for code in (0, 1, 3):
        assert f"exit code {code}\n" in reports
    # The recorded tool read a real HTTP service in the pipeline; its replay served the
    # answer from the snapshot's tool cache with that service stopped.
    assert "tracking service: http://127.0.0.1:" in done.stdout
    assert "now stopped: the replays below cannot reach it" in done.stdout
    alice = reports.split("Alice's status question")[1].split("exit code")[0]
    assert "reproduced" in alice
    assert (
        "1 call(s) served from the tool cache" in alice and "'track_shipment'  cache hit" in alice
    )


@pytest.mark.slow
def test_the_printed_commands_use_the_installed_cli_and_the_example_paths(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = demo
    assert "beam-agents-replay \\\n      --snapshot " in done.stdout
    assert "--agent examples.support_desk.agent_v2:AGENT" in done.stdout
    assert "--registry examples.support_desk.tools:TOOLS" in done.stdout
    assert "beam-agents-replay tui \\" in done.stdout  # the TUI command, for a terminal


@pytest.mark.slow
def test_the_demo_leaves_the_three_inputs_of_every_replay(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    assert not (out / "stale-from-last-run.txt").exists()  # re-running starts clean
    snapshots = sorted(p.name for p in (out / "snapshots").glob("*.pb"))
    assert snapshots == [
        f"{b'customer-alice'.hex()}-3-incident-alice-tracking.pb",
        f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb",
        f"{b'customer-carol'.hex()}-2-incident-carol-typo.pb",
    ]
    for name in snapshots:
        snapshot = StateSnapshot.FromString((out / "snapshots" / name).read_bytes())
        assert snapshot.request_id in name
    assert trace_stream_files(out / "traces")
    event = AgentEnvelope.FromString((out / "events" / "msg-bob-1.pb").read_bytes())
    assert event.event.type == "customer_message" and event.entity_key == b"customer-bob"


@pytest.mark.slow
def test_the_demo_bundles_each_incident_and_checks_them(
    demo: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Step 4: ls, one bundle per incident (from the topic dump), check's table and exit code."""
    out, done = demo
    step = done.stdout.split("\n4. From the topic dump to verdicts", 1)[1]
    assert "msg-bob-1             suspended       2        2  cached" in step  # ls
    bundles = sorted(p.name for p in (out / "bundles").glob("*.bundle"))
    assert bundles == sorted(f"{name}.bundle" for name in EXPECTED)
    assert "1  diverged       (exit 1)  TOOL_CALL 'lookup_order'" in step
    assert "1  irreproducible (exit 3)  cache miss (absent): messages[1]" in step
    assert (
        f"{sum(1 for v, _ in EXPECTED.values() if v == 'reproduced')}  reproduced     (exit 0)"
        in step
    )
    assert "exit code 1 (the worst verdict's)   ok" in step
    assert (out / "check-junit.xml").read_bytes().count(b"<testcase ") == len(EXPECTED)
    # The same inputs give the same bytes: bundle refund-v1 again and compare.
    from beam_agents.replay.incidents.bundle import make_bundle

    snapshot = next((out / "snapshots").glob(f"{b'customer-bob'.hex()}-*.pb"))
    again = make_bundle(
        snapshot=snapshot,
        traces=[out / "traces"],
        events=[out / "topic-dump.pb"],
        agent="examples.support_desk.agent:AGENT",
        registry="examples.support_desk.tools:TOOLS",
        seq=1,
    )
    assert again == (out / "bundles" / "refund-v1.bundle").read_bytes()


def test_the_demo_refuses_to_delete_a_directory_it_did_not_make(tmp_path: Path) -> None:
    precious = tmp_path / "mine.txt"
    precious.write_text("keep me")
    done = run_demo(tmp_path)
    assert done.returncode != 0
    assert "was not made by the demo" in done.stdout + done.stderr
    assert precious.read_text() == "keep me"


def _replay_refund_v2(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The diverged incident (Bob's refund replayed with agent v2), as the demo prints it."""
    snapshot = out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"
    flags = {
        "--snapshot": str(snapshot),
        "--traces": str(out / "traces"),
        "--event": str(out / "events" / "msg-bob-1.pb"),
        "--agent": "examples.support_desk.agent_v2:AGENT",
        "--registry": "examples.support_desk.tools:TOOLS",
        "--seq": "1",
    }
    argv = [str(Path(sys.executable).parent / "beam-agents-replay")]
    for flag, value in flags.items():
        argv += [flag, value]
    return subprocess.run(
        [*argv, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_diverged_incident_shows_the_replayed_order_id_marked_differing(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    headless = _replay_refund_v2(out)
    assert headless.returncode == 1, headless.stderr
    report = headless.stdout.split("  first divergence: ")[1].split("    detail:")[0]
    assert report.startswith("event 2 TOOL_CALL 'lookup_order'")
    args = next(line for line in report.splitlines() if line.strip().startswith("args: "))
    assert '{"order_id": "B2001"}' in args and "[differs: traced sha256=" in args
    result = next(line for line in report.splitlines() if line.strip().startswith("result: "))
    assert result.endswith("[verified]")  # lookup_order answers both spellings alike

    as_json = _replay_refund_v2(out, "--json")
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    values = {(v["event_index"], v["path"]): v for v in document["values"]}
    assert values[(2, "args")]["value"] == {"order_id": "B2001"}
    assert values[(2, "args")]["mark"] == "differs"
    assert values[(2, "result")]["mark"] == "verified"
    # The steps before the divergence ran exactly as in production: their values are proven.
    before = [v for v in document["values"] if v["event_index"] < 2]
    assert before and {v["mark"] for v in before} == {"verified"}

    redacted = _replay_refund_v2(out, "--redact")
    assert redacted.returncode == 1 and "B2001" not in redacted.stdout


async def test_the_tui_shows_the_replayed_order_id_marked_differing(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    import html

    from beam_agents.replay.engine import replay
    from beam_agents.replay.options import ReplayOptions
    from replay_tui.app import ReplayApp

    out, _ = demo
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # examples.support_desk, as the CLI imports it
    result = replay(
        ReplayOptions(
            snapshot=out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb",
            traces=(out / "traces",),
            event=out / "events" / "msg-bob-1.pb",
            agent="examples.support_desk.agent_v2:AGENT",
            registry="examples.support_desk.tools:TOOLS",
            seq=1,
        )
    )
    assert result.exit_code == 1
    app = ReplayApp(result)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()  # it opens on the first divergence
        screen = html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")
        line = next(row for row in screen.splitlines() if '{"order_id": "B2001"}' in row)
        assert "≠ differs" in line and "args" in line
        assert "✓ verified" in screen and "result" in screen
        assert " live $" in screen  # the traced model call went to the provider


# --------------------------------------------------------------------- the reference run


def _args_line(stdout: str) -> str:
    report = stdout.split("  first divergence: ")[1].split("    detail:")[0]
    return next(line for line in report.splitlines() if line.strip().startswith("args: "))


def test_the_reference_run_shows_productions_order_id_verified_beside_the_replayed_one(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    production = ("--reference", "examples.support_desk.agent:AGENT")
    headless = _replay_refund_v2(out, *production)
    assert headless.returncode == 1, headless.stderr  # the candidate's verdict and exit code
    assert headless.stdout.splitlines()[4] == "diverged"
    args = _args_line(headless.stdout)
    assert (
        args.strip() == 'args: traced {"order_id": "B-2001"} ✓ | replayed {"order_id": "B2001"} ≠'
    )
    assert (
        "  reference: examples.support_desk.agent:AGENT (--reference): reproduced; "
        in headless.stdout
    )

    as_json = _replay_refund_v2(out, "--json", *production)
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert document["verdict"] == "diverged"
    reference = document["reference"]
    assert reference["verdict"] == "reproduced" and reference["source"] == "--reference"
    theirs = {(v["event_index"], v["path"]): v for v in reference["values"]}
    assert theirs[(2, "args")]["value"] == {"order_id": "B-2001"}
    assert theirs[(2, "args")]["mark"] == "verified" and theirs[(2, "args")]["rehashed"]
    mine = {(v["event_index"], v["path"]): v for v in document["values"]}
    # Proved by the very digest the candidate's value is marked against.
    assert theirs[(2, "args")]["traced_digest"] == mine[(2, "args")]["traced_digest"]

    redacted = _replay_refund_v2(out, "--redact", *production)
    assert redacted.returncode == 1
    assert "B-2001" not in redacted.stdout and "B2001" not in redacted.stdout
    assert "traced sha256:" in _args_line(redacted.stdout)
    redacted_json = json.loads(_replay_refund_v2(out, "--json", "--redact", *production).stdout)
    assert all(v["value"] is None for v in redacted_json["reference"]["values"])


def test_a_reference_from_another_checkout_imports_the_same_agent_path_from_there(
    demo: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    import shutil

    out, _ = demo
    # The production checkout, where agent_v2.py still held the code that ran.
    prod = tmp_path / "prod"
    shutil.copytree(
        ROOT / "examples", prod / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(prod / "examples/support_desk/agent.py", prod / "examples/support_desk/agent_v2.py")
    done = _replay_refund_v2(out, "--reference-path", str(prod))
    assert done.returncode == 1, done.stderr
    assert f"(--reference-path {prod}): reproduced" in done.stdout
    assert '"B-2001"} ✓ | replayed {"order_id": "B2001"} ≠' in _args_line(done.stdout)
    assert not list(prod.rglob("__pycache__"))  # the reference wrote nothing there

    # The same path from a checkout holding v2 itself: the reference diverges where v2 does,
    # and shows no value of that event as production's.
    same = tmp_path / "same"
    shutil.copytree(
        ROOT / "examples", same / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    done = _replay_refund_v2(out, "--reference-path", str(same))
    assert done.returncode == 1
    assert "diverged at event 2 itself; only the" in done.stdout
    assert "[differs: traced sha256=" in _args_line(done.stdout)  # the candidate's value only
    assert "B-2001" not in _args_line(done.stdout)


def test_a_bundle_replayed_with_another_agent_takes_its_recorded_agent_as_the_reference(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    cli = str(Path(sys.executable).parent / "beam-agents-replay")
    bundle = str(out / "bundles" / "refund-v1.bundle")
    v2 = ("--agent", "examples.support_desk.agent_v2:AGENT")
    refused = subprocess.run(
        [cli, bundle, *v2], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    # The bundle's recorded code (its registry, its agent as the reference) runs only with consent.
    assert refused.returncode == 2 and "--import-recorded" in refused.stderr, refused.stderr
    run = [cli, bundle, *v2, "--import-recorded"]
    done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert (
        "reference: examples.support_desk.agent:AGENT (the bundle's recorded agent): reproduced"
        in done.stdout
    )
    assert '"B-2001"} ✓ | replayed {"order_id": "B2001"} ≠' in _args_line(done.stdout)
    off = subprocess.run(
        [*run, "--no-reference"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert off.returncode == 1 and "reference:" not in off.stdout


def test_a_reference_that_cannot_run_is_named_and_changes_nothing(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    done = _replay_refund_v2(out, "--reference", "examples.support_desk.no_such_module:AGENT")
    assert done.returncode == 1, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("  reference: "))
    assert "no values shown" in line and "no_such_module" in line
    assert "[differs: traced sha256=" in _args_line(done.stdout)  # only the candidate's value
    stdin = _replay_refund_v2(
        out, "--reference", "examples.support_desk.agent:AGENT", "--traces", "-"
    )
    assert stdin.returncode == 2 and "standard input" in stdin.stderr


async def test_the_tui_shows_productions_value_beside_the_replayed_one(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    import argparse
    import html

    from beam_agents.cli.reference import attach_reference, reference_spec, run_reference
    from beam_agents.replay.engine import replay
    from beam_agents.replay.options import ReplayOptions
    from replay_tui.app import ReplayApp

    out, _ = demo
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # examples.support_desk, as the CLI imports it
    options = ReplayOptions(
        snapshot=str(out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"),
        traces=(str(out / "traces"),),
        event=str(out / "events" / "msg-bob-1.pb"),
        agent="examples.support_desk.agent_v2:AGENT",
        registry="examples.support_desk.tools:TOOLS",
        seq=1,
    )
    ns = argparse.Namespace(reference="examples.support_desk.agent:AGENT", reference_path=None)
    spec = reference_spec(ns, options)
    assert spec is not None
    result = attach_reference(replay(options), run_reference(spec))
    assert result.exit_code == 1
    app = ReplayApp(result)
    async with app.run_test(size=(180, 48)) as pilot:
        await pilot.pause()  # it opens on the first divergence
        screen = html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")
        line = next(row for row in screen.splitlines() if '{"order_id": "B2001"}' in row)
        assert "≠ differs" in line and 'traced {"order_id": "B-2001"} ✓' in line
        assert "reference: examples.support_desk.agent:AGENT" in screen and "reproduced" in screen


def test_the_header_names_build_skew_between_the_snapshot_and_the_given_agent(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    skewed = _replay_refund_v2(out)
    line = next(x for x in skewed.stdout.splitlines() if x.startswith("  build skew: "))
    assert "written by examples.support_desk.agent:SupportAgent code sha256=" in line
    assert "given is examples.support_desk.agent_v2:" in line and "(differs: class, code;" in line
    header = json.loads(_replay_refund_v2(out, "--json").stdout)["header"]
    assert header["build_skew"] == ["class", "code"]
    assert header["snapshot_agent_build"].startswith("examples.support_desk.agent:SupportAgent")
    same = _replay_refund_v2(out, "--agent", "examples.support_desk.agent:AGENT")
    assert same.returncode == 0 and "build skew" not in same.stdout


# --------------------------------------------------------------------------------- bisect


def _agent_history(repo: Path) -> list[str]:
    """A git repository of 30 commits of the support desk: commit 15 imports a module that
    is not there (cannot be probed), 16 drops it, 21 respells the order id (v2's change),
    the rest touch notes. The commit hashes, oldest first."""
    import shutil

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    shutil.copytree(
        ROOT / "examples", repo / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    git("init", "-q")
    git("config", "user.email", "dev@example.com")
    git("config", "user.name", "dev")
    git("add", "-A")
    git("commit", "-qm", "the support desk")
    agent = repo / "examples" / "support_desk" / "agent.py"
    broken = "\nimport examples.support_desk.not_written_yet  # noqa: F401\n"
    for i in range(2, 31):
        if i == 15:
            agent.write_text(agent.read_text() + broken)
            subject = "import a helper module (not committed yet)"
        elif i == 16:
            agent.write_text(agent.read_text().replace(broken, "\n"))
            subject = "drop the import of the missing helper"
        elif i == 21:
            source = agent.read_text()
            respelled = source.replace(
                "        return candidate\n", '        return candidate.replace("-", "")\n', 1
            )
            assert respelled != source
            agent.write_text(respelled)
            subject = "respell order ids in the warehouse's compact form"
        else:
            notes = repo / "NOTES.txt"
            notes.write_text((notes.read_text() if notes.exists() else "") + f"note {i}\n")
            subject = f"note {i}"
        git("add", "-A")
        git("commit", "-qm", subject)
    return git("rev-list", "--reverse", "HEAD").split()


def _bisect(*args: str) -> subprocess.CompletedProcess[str]:
    cli = str(Path(sys.executable).parent / "beam-agents-replay")
    return subprocess.run(
        [cli, "bisect", *args, "--import-recorded"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_bisect_names_the_commit_that_respelled_the_order_id(
    demo: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = demo
    repo = tmp_path / "agent-repo"
    commits = _agent_history(repo)
    assert len(commits) == 30
    status_before = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    bundle = str(out / "bundles" / "refund-v1.bundle")
    done = _bisect(bundle, "--repo", str(repo), "--good", commits[0], "--bad", commits[-1])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"first changed: {commits[20]} respell order ids in the warehouse's compact form\n"
        in done.stdout
    )
    assert "  refund-v1.bundle seq 1: reproduced -> diverged\n" in done.stdout
    assert "TOOL_CALL 'lookup_order'" in done.stdout and "args_sha256" in done.stdout
    # The commit that cannot be imported was probed, and is named as skipped.
    assert f"  skipped {commits[14][:12]} import a helper module" in done.stdout
    assert "not_written_yet" in done.stdout
    # The repository is read, never changed (git archive, no worktree, no checkout).
    after = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
    ).stdout
    assert after == status_before
    worktrees = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True
    ).stdout.splitlines()
    assert len(worktrees) == 1  # its own work tree only

    unchanged = _bisect(bundle, "--repo", str(repo), "--good", commits[0], "--bad", commits[19])
    assert unchanged.returncode == 1, unchanged.stdout + unchanged.stderr
    assert "no change" in unchanged.stdout

    backwards = _bisect(bundle, "--repo", str(repo), "--good", commits[-1], "--bad", commits[0])
    assert backwards.returncode == 2 and "is not an ancestor of --bad" in backwards.stderr
    unknown = _bisect(bundle, "--repo", str(repo), "--good", "nope", "--bad", commits[-1])
    assert unknown.returncode == 2 and "--good nope: no such commit" in unknown.stderr
    not_git = _bisect(bundle, "--repo", str(tmp_path), "--good", "a", "--bad", "b")
    assert not_git.returncode == 2 and "not a git repository" in not_git.stderr
@pytest.mark.slow
def test_the_doctor_names_v3s_two_faults_at_their_lines_and_nothing_in_v1(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = demo
    section = done.stdout.split("\n5. Before the next deploy", 1)[1].split("\ndemo finished", 1)[0]
    v3, v1 = section.split("--agent examples.support_desk.agent:AGENT", 1)
    source = (ROOT / "examples" / "support_desk" / "agent_v3.py").read_text().splitlines()
    marked = {
        number: match[1]
        for number, text in enumerate(source, start=1)
        if (match := re.search(r"#\s*doctor:\s*([a-z-]+)", text))
    }
    assert sorted(marked.values()) == ["module-state", "wall-clock"]
    findings = re.findall(r"^    \|   \d+\. ([^:]+): .* at examples/support_desk/agent_v3\.py:(\d+)",
                          v3, flags=re.MULTILINE)  # fmt: skip
    titles = {"wall-clock": "wall clock", "module-state": "module state carried between activations"}
    assert sorted((int(line), title) for title, line in findings) == sorted(
        (number, titles[cause]) for number, cause in marked.items()
    ), v3
    assert "| 2 finding(s)" in v3 and "exit code 1   ok" in v3
    assert "| clean: no finding" in v1 and "exit code 0   ok" in v1


# --------------------------------------------------------------------------------- the fork

_TRIAGE_OTHER = '{"intent": "other", "order_id": "B-2001"}'
"""A triage answer that is not a refund (the demo's model answers ``"intent": "refund"``)."""
_SCRIPTED_MODEL = ("--fork-provider", "examples.support_desk.model:make_provider")


def _replay_refund_v1(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The refund incident (Bob's refund replayed with agent v1, the one that ran)."""
    snapshot = out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"
    argv = [
        str(Path(sys.executable).parent / "beam-agents-replay"),
        "--snapshot", str(snapshot),
        "--traces", str(out / "traces"),
        "--event", str(out / "events" / "msg-bob-1.pb"),
        "--agent", "examples.support_desk.agent:AGENT",
        "--registry", "examples.support_desk.tools:TOOLS",
        "--seq", "1",
    ]  # fmt: skip
    return subprocess.run(
        [*argv, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def _ledger(stdout: str) -> dict[str, str]:
    section = stdout.split("  intents (the ledger, traced | forked):\n", 1)[1]
    return {line.split()[0]: line for line in section.splitlines() if line.startswith("    in-")}


def test_a_fork_of_the_refund_incident_at_its_model_call_with_deny_drops_the_refund_intent(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from examples.support_desk.stream import BOB_REFUND_INTENT

    out, _ = demo
    # Unforked, the same activation reproduces and stages the refund (the control).
    plain = json.loads(_replay_refund_v1(out, "--json").stdout)
    assert plain["verdict"] == "reproduced"
    refund = {row["intent_id"]: row for row in plain["intents"]}[BOB_REFUND_INTENT]
    assert refund["tool"] == "issue_refund" and refund["replayed_staged"]

    headless = _replay_refund_v1(out, "--fork", "1", "--set", "deny")
    assert headless.returncode == 0, headless.stderr
    lines = headless.stdout.splitlines()
    assert lines[4].startswith("  FORK: a counterfactual, not a reproduction: event 1 (LLM_CALL")
    assert lines[5] == "fork"
    assert "reproduced" not in (lines[5], lines[6]) and "REPRODUCED" not in headless.stdout
    ledger = _ledger(headless.stdout)
    assert "issue_refund  staged: traced yes / forked no" in ledger[BOB_REFUND_INTENT]
    assert ledger[BOB_REFUND_INTENT].endswith("<- differs")
    assert "  fork value: deny" in lines
    assert "  fork outcome: failed: json.decoder.JSONDecodeError" in lines  # v1 parses triage

    document = json.loads(_replay_refund_v1(out, "--json", "--fork", "1", "--set", "deny").stdout)
    assert (document["verdict"], document["exit_code"]) == ("fork", 0)
    fork = document["fork"]
    assert fork["counterfactual"] and fork["event_index"] == 1 and fork["kind"] == "LLM_CALL"
    assert (fork["value"], fork["network"], fork["ended_at"]) == ("deny", "none", None)
    refund = {row["intent_id"]: row for row in document["intents"]}[BOB_REFUND_INTENT]
    assert refund["traced_staged"] and not refund["replayed_staged"]
    forked_response = next(
        v for v in document["values"] if (v["event_index"], v["path"]) == (1, "response.text")
    )
    assert forked_response["value"] == "deny" and forked_response["mark"] == "differs"

    redacted = _replay_refund_v1(out, "--redact", "--fork", "1", "--set", "deny")
    assert redacted.returncode == 0
    assert "deny" not in redacted.stdout and "  fork value: sha256:" in redacted.stdout


def test_a_forks_continuation_ends_at_an_uncached_model_call_unless_a_fork_provider_answers(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from examples.support_desk.stream import BOB_REFUND_INTENT

    out, _ = demo
    ended = _replay_refund_v1(out, "--fork", "1", "--set", _TRIAGE_OTHER)
    assert ended.returncode == 3, ended.stderr
    assert ended.stdout.splitlines()[5] == "irreproducible"
    assert "  reason: the fork ended at event 3: the model call at event 3 (key " in ended.stdout
    assert "give --fork-provider module:ATTR for the continuation" in ended.stdout

    ran = _replay_refund_v1(out, "--fork", "1", "--set", _TRIAGE_OTHER, *_SCRIPTED_MODEL)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[5] == "fork"
    assert (
        "answered by examples.support_desk.model:make_provider (1 call(s)), the only network "
        "this run may open" in ran.stdout
    )
    assert "  fork outcome: done" in ran.stdout
    assert '  forked outputs[0]: {"customer": "customer-bob", "text": "You\'re welcome, Bob!' in (
        ran.stdout
    )
    hidden = _replay_refund_v1(
        out, "--redact", "--fork", "1", "--set", _TRIAGE_OTHER, *_SCRIPTED_MODEL
    )
    assert "You're welcome" not in hidden.stdout and "  forked outputs[0]: sha256=" in hidden.stdout
    assert "staged: traced yes / forked no" in _ledger(ran.stdout)[BOB_REFUND_INTENT]
    document = json.loads(
        _replay_refund_v1(out, "--json", "--fork", "1", "--set", _TRIAGE_OTHER, *_SCRIPTED_MODEL)
        .stdout
    )
    assert document["fork"]["provider_calls"] == 1 and document["fork"]["outcome"] == "done"
    # The traced activation suspended with no output; the fork replied and ended.
    assert len(document["outputs"]) == 1
    reply = json.loads(bytes.fromhex(document["outputs"][0]["hex"]))
    assert reply["text"].startswith("You're welcome, Bob!")
    writes = document["memory_writes"]
    assert writes["mark"] == "differs"
    said = "\n".join(writes["differences"])
    assert "changed: 'turn.000001'" in said and "root['refund_intent']" in said


def test_a_forks_answer_is_marked_as_the_forks_never_as_a_cache_hit(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from beam_agents.cli.parsing import CLI_NAMING
    from beam_agents.replay.engine import replay
    from beam_agents.replay.options import ForkOptions, ReplayOptions
    from replay_tui.render.state import intent_columns
    from replay_tui.render.step import StepIndex, step_lines
    from replay_tui.render.timeline import build_row, render_heading, render_row

    out, _ = demo
    document = json.loads(_replay_refund_v1(out, "--json", "--fork", "1", "--set", "deny").stdout)
    forked = document["events"][1]
    mine = forked["replayed"]["attributes"]
    # main: cache_hit true, billed false ("served like a cached response"): nothing was.
    assert mine["beam_agents.fork_answer"]["value"] is True
    assert (mine["beam_agents.cache_hit"]["value"], mine["beam_agents.billed"]["value"]) == (
        False,
        False,
    )
    traced = forked["traced"]["attributes"]  # production's call, as traced
    assert "beam_agents.fork_answer" not in traced
    assert (traced["beam_agents.cache_hit"]["value"], traced["beam_agents.billed"]["value"]) == (
        False,
        True,
    )
    plain = json.loads(_replay_refund_v1(out, "--json").stdout)  # no fork: no such attribute
    assert not any("beam_agents.fork_answer" in e["replayed"]["attributes"] for e in plain["events"])
    headless = _replay_refund_v1(out, "--fork", "1", "--set", "deny").stdout
    assert "  events: 9 traced, 3 forked, 8 differ" in headless.splitlines()  # main: "replayed"

    # The TUI's timeline row, heading, step pane and ledger say the same (a real fork result).
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # examples.support_desk, as the CLI imports it
    result = replay(
        ReplayOptions(
            snapshot=out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb",
            traces=(out / "traces",),
            event=out / "events" / "msg-bob-1.pb",
            agent="examples.support_desk.agent:AGENT",
            registry="examples.support_desk.tools:TOOLS",
            seq=1,
            fork=ForkOptions(at=1, value=b"deny"),
            naming=CLI_NAMING,
        )
    )
    row = render_row(build_row(result.events[1]), 160).plain
    replayed_side = row.split("│", 1)[1]
    assert " fork " in replayed_side and " hit " not in replayed_side  # main: "hit"
    assert " live $ " in row.split("│", 1)[0]  # the traced side as traced
    assert "forked" in render_heading(160, forked=True).plain
    step = "\n".join(t.plain for t in step_lines(StepIndex(result.events).picture(1), 120, forked=True))
    assert "forked" in step.splitlines()[1] and "forked 1" in step  # main: "1 call hit 1 miss 0"
    assert "hit 0 miss 0" in step
    assert "forked staged" in intent_columns(forked=True)


def test_a_forks_counts_and_ledger_say_what_it_did_and_what_it_did_not_reach(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from examples.support_desk.stream import BOB_REFUND_INTENT

    out, _ = demo
    ended = _replay_refund_v1(out, "--fork", "1", "--set", _TRIAGE_OTHER)
    assert "  fork ended at event 3, short of the activation's end" in ended.stdout
    refund = _ledger(ended.stdout)[BOB_REFUND_INTENT]
    # main: "forked no ... <- differs" for an intent the fork never got the chance to stage.
    assert "staged: traced yes / forked not reached" in refund
    assert "released: traced no / forked not reached" in refund
    assert "forked no " not in ended.stdout and not refund.endswith("<- differs")

    ran = _replay_refund_v1(out, "--fork", "1", "--set", _TRIAGE_OTHER, *_SCRIPTED_MODEL)
    # main: "provider calls: 0" above "(1 call(s))" of the fork provider.
    assert "  provider calls: 1 (1 answered by the fork provider)" in ran.stdout.splitlines()
    assert "staged: traced yes / forked no" in _ledger(ran.stdout)[BOB_REFUND_INTENT]  # ran to end
    document = json.loads(
        _replay_refund_v1(out, "--json", "--fork", "1", "--set", _TRIAGE_OTHER, *_SCRIPTED_MODEL)
        .stdout
    )
    assert document["provider_calls"] == document["fork"]["provider_calls"] == 1


def test_a_fork_at_a_tool_call_hands_the_agent_the_given_result(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    from examples.support_desk.stream import BOB_REFUND_INTENT

    out, _ = demo
    not_found = '{"found": false}'
    done = _replay_refund_v1(out, "--fork", "2", "--set", not_found, *_SCRIPTED_MODEL)
    assert done.returncode == 0, done.stderr
    assert "event 2 (TOOL_CALL 'lookup_order') received the value of --set" in done.stdout
    assert "staged: traced yes / forked no" in _ledger(done.stdout)[BOB_REFUND_INTENT]
    document = json.loads(
        _replay_refund_v1(out, "--json", "--fork", "2", "--set", not_found, *_SCRIPTED_MODEL).stdout
    )
    result = next(v for v in document["values"] if (v["event_index"], v["path"]) == (2, "result"))
    assert result["value"] == {"found": False} and result["mark"] == "differs"
    reply = json.loads(bytes.fromhex(document["outputs"][0]["hex"]))
    assert "I couldn't find an order B-2001" in reply["text"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--fork", "99", "--set", "x"), "--fork 99: seq 1's trace has events 0 to 8; its calls: "),
        (("--fork", "3", "--set", "x"), "--fork 3: event 3 is INTENT_STAGED 'issue_refund', not a"),
        (("--fork", "0", "--set", "x"), "event 0 is ACTIVATION_START"),
        (("--fork", "2", "--set", "not json"), "event 2 is a tool call, whose value is its result"),
        (("--fork", "-1", "--set", "x"), "--fork must be an event index (0 or more"),
        (("--fork", "1"), "--fork 1 needs --set VALUE (or --set @FILE)"),
        (("--set", "x"), "--set belongs to a fork: give --fork N"),
        (("--fork", "1", "--set", "@/dev/zero"), "--set @/dev/zero is a device, not a regular"),
        (("--fork", "1", "--set", "@"), "--set @ names no file"),
        (("--fork", "1", "--set", "@/no/such/answer.txt"),
         "--set @FILE takes a file path, or --set @- for standard input"),  # main: "or -"
        (("--fork", "1", "--set", "@/dev/zero"), "from standard input as --set @-"),
        (("--fork", "1", "--set", "x", "--reference", "examples.support_desk.agent:AGENT"),
         "--fork and --reference do not go together"),
        (("--fork", "1", "--set", "x", "--fork-provider", "examples.support_desk.tools:TOOLS"),
         "is a ToolRegistry, not a model provider"),
    ],
)  # fmt: skip
def test_a_fork_refuses_what_it_cannot_fork_in_one_paragraph(
    demo: tuple[Path, subprocess.CompletedProcess[str]], extra: tuple[str, ...], said: str
) -> None:
    out, _ = demo
    done = _replay_refund_v1(out, *extra)
    assert done.returncode == 2 and done.stdout == ""
    assert said in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1  # one paragraph


def test_a_forks_value_file_is_refused_when_special_huge_or_not_utf8(
    demo: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = demo
    fifo = tmp_path / "answer.fifo"
    os.mkfifo(fifo)
    done = _replay_refund_v1(out, "--fork", "1", "--set", f"@{fifo}")  # would block if opened
    assert done.returncode == 2 and "is a FIFO (named pipe), not a regular file" in done.stderr
    latin1 = tmp_path / "answer.txt"
    latin1.write_bytes(b"caf\xe9")
    done = _replay_refund_v1(out, "--fork", "1", "--set", f"@{latin1}")
    assert done.returncode == 2
    assert f"--set @{latin1}: the value is not UTF-8 text (byte 3 is 0xe9)" in done.stderr
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 64)
    env_done = subprocess.run(
        [sys.executable, "-c", "import sys; from beam_agents.cli import main; sys.exit(main())",
         "--snapshot", str(out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"),
         "--traces", str(out / "traces"), "--event", str(out / "events" / "msg-bob-1.pb"),
         "--agent", "examples.support_desk.agent:AGENT",
         "--registry", "examples.support_desk.tools:TOOLS", "--seq", "1",
         "--fork", "1", "--set", f"@{big}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "BEAM_AGENTS_REPLAY_MAX_FORK_VALUE_BYTES": "16"},
    )  # fmt: skip
    assert env_done.returncode == 2
    assert "is larger than the 16-byte cap for --set inputs" in env_done.stderr
    assert "BEAM_AGENTS_REPLAY_MAX_FORK_VALUE_BYTES" in env_done.stderr
    # Undecodable bytes on the command line itself are named too (argv arrives as bytes).
    raw = subprocess.run(
        [os.fsencode(str(Path(sys.executable).parent / "beam-agents-replay")),
         b"--snapshot", os.fsencode(out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"),
         b"--traces", os.fsencode(out / "traces"), b"--event", os.fsencode(out / "events" / "msg-bob-1.pb"),
         b"--agent", b"examples.support_desk.agent:AGENT",
         b"--registry", b"examples.support_desk.tools:TOOLS", b"--seq", b"1",
         b"--fork", b"1", b"--set", b"caf\xe9"],
        cwd=ROOT, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert raw.returncode == 2
    assert b"--set: the value is not UTF-8 text (byte 3 is 0xe9)" in raw.stderr


def test_a_fork_whose_prefix_does_not_reproduce_is_refused_naming_the_first_difference(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    done = _replay_refund_v2(out, "--fork", "4", "--set", "hello")  # v2 diverges at event 2
    assert done.returncode == 2 and done.stdout == ""
    assert (
        "--fork 4: the re-run does not reproduce the events before the fork: event 2 "
        "(TOOL_CALL 'lookup_order') differs: attributes['beam_agents.args_sha256']" in done.stderr
    )
    # At the divergence itself the call asks something else: no fork of another call either.
    done = _replay_refund_v2(out, "--fork", "2", "--set", "{}")
    assert done.returncode == 2
    assert "is not the call the re-run made there: the re-run called the tool with other" in (
        done.stderr
    )


def test_check_refuses_a_fork_and_a_bundle_forks_with_consent(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    program = str(Path(sys.executable).parent / "beam-agents-replay")
    check = subprocess.run(
        [program, "check", str(out / "bundles"), "--fork", "1", "--set", "deny"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert check.returncode == 2 and "check does not fork (--fork, --set)" in check.stderr
    bundle = [program, str(out / "bundles" / "refund-v1.bundle"), "--seq", "1"]
    fork = ["--fork", "1", "--set", "deny"]
    refused = subprocess.run(
        [*bundle, *fork], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert refused.returncode == 2 and "--import-recorded" in refused.stderr
    ran = subprocess.run(
        [*bundle, *fork, "--import-recorded"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[5] == "fork"
    # With --agent the bundle's recorded agent would be the reference; a fork runs none.
    other = subprocess.run(
        [*bundle, *fork, "--agent", "examples.support_desk.agent:AGENT", "--import-recorded"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert other.returncode == 0 and "reference:" not in other.stdout


async def test_the_tui_opens_a_fork_with_its_verdict_and_the_ledger_traced_beside_forked(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    import html

    from beam_agents.cli.parsing import CLI_NAMING
    from beam_agents.replay.engine import replay
    from beam_agents.replay.options import ForkOptions, ReplayOptions
    from examples.support_desk.stream import BOB_REFUND_INTENT
    from replay_tui.app import ReplayApp

    out, _ = demo
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # examples.support_desk, as the CLI imports it
    options = ReplayOptions(
        snapshot=str(out / "snapshots" / f"{b'customer-bob'.hex()}-3-incident-refund-bob.pb"),
        traces=(str(out / "traces"),),
        event=str(out / "events" / "msg-bob-1.pb"),
        agent="examples.support_desk.agent:AGENT",
        registry="examples.support_desk.tools:TOOLS",
        seq=1,
        fork=ForkOptions(at=1, value=b"deny"),
        naming=CLI_NAMING,
    )
    result = replay(options)
    assert result.exit_code == 0 and result.fork is not None

    def screen_text(app: ReplayApp) -> str:
        svg = app.export_screenshot()
        return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")

    app = ReplayApp(result)
    async with app.run_test(size=(180, 48)) as pilot:
        await pilot.pause()
        screen = screen_text(app)
        assert "FORK (a counterfactual, not a reproduction)" in screen and "REPRODUCED" not in screen
        assert "fork: a counterfactual, not a reproduction" in screen
        await pilot.press("i")
        await pilot.pause()
        row = next(r for r in screen_text(app).splitlines() if BOB_REFUND_INTENT in r)
        assert "≠" in row and re.search(r"issue_refund\s+yes\s+no\s", row)


def test_a_forks_value_reaches_every_surface_escaped(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = demo
    hostile = "\x1b]0;owned\x07deny\nreproduced\r\x1b[2J"
    done = _replay_refund_v1(out, "--fork", "1", "--set", hostile)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\r" not in done.stdout
    assert "reproduced" not in done.stdout.splitlines()  # the value cannot start a verdict line
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("  fork value: ")]
    assert "deny" in line and "reproduced" in line  # all of it, on its one line
    document = json.loads(_replay_refund_v1(out, "--json", "--fork", "1", "--set", hostile).stdout)
    shown = document["fork"]["value"]  # through the one escaper, as every string of --json
    assert "deny" in shown and "\x1b" not in shown and "\n" not in shown


def test_a_forks_value_cannot_start_a_line_or_fill_one_in_the_memory_writes_diff(
    demo: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    # The reply (event 4) is written to memory: the fork's value reaches "memory writes,
    # traced vs forked", whose DeepDiff text printed its line breaks raw (a line of the
    # value read as the report's own verdict) and its whole length on one line.
    out, _ = demo
    forged = "x\nreproduced\nverdict: reproduced\n  fork prefix: FAKE"
    done = _replay_refund_v1(out, "--fork", "4", "--set", forged)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  memory writes, traced vs forked:" in lines
    for line in lines:
        assert line.strip() not in ("reproduced", "verdict: reproduced", "fork prefix: FAKE")
    diff = done.stdout.split("  memory writes, traced vs forked:\n", 1)[1]
    assert "\\nverdict: reproduced\\n" in diff  # the value, escaped, on its one line
    big = tmp_path / "big.txt"
    big.write_text("A" * 200_000)
    done = _replay_refund_v1(out, "--fork", "4", "--set", f"@{big}")
    assert done.returncode == 0, done.stderr
    assert "  memory writes, traced vs forked:" in done.stdout
    longest = max(done.stdout.splitlines(), key=len)
    assert len(longest) < 2_000, longest[:200]  # each value cut, not 200,000 characters
