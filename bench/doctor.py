"""The doctor over 100 sample activations of the demo's support agent, on 2 jobs.

Target (issue 26): at most 30 s for the whole run (the pipeline's step in a watched
worker, every activation replayed under the control and the three screens, each
perturbation alone where a screen changed something, and the closer looks). Run on
v1 (``agent``, clean: what the target is for) and on v3 (``agent_v3``, its two faults:
every changed activation is replayed again under each perturbation alone), each
printed beside the target with the time per replay; the machine is shared, so each
line also prints the load average it ran under.

    .venv/bin/python bench/doctor.py [--activations N] [--agent MODULE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 30.0
MESSAGES = (
    "Hi! Where is my order A-1001? It was supposed to arrive yesterday.",
    "Can you also check on A-1002?",
    "Where is my order C-3001?",
    "Thanks, that's all!",
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--activations", type=int, default=100)
    parser.add_argument("--agent", action="append", help="default: agent and agent_v3")
    args = parser.parse_args()
    count = args.activations
    clean = True
    for module in args.agent or ["examples.support_desk.agent", "examples.support_desk.agent_v3"]:
        clean &= measure(module, count) == (module == "examples.support_desk.agent")
    return 0 if clean else 1


def measure(module: str, count: int) -> bool:
    """One doctor run over ``count`` activations of ``module``; prints it; True if clean."""
    from beam_agents.doctor import diagnose
    from examples.support_desk.tracking import running_tracking_service

    steps = [
        {"key": f"customer-{i // 2:03d}", "event": "customer_message",
         "payload": MESSAGES[i % len(MESSAGES)]}
        for i in range(count)
    ]  # fmt: skip
    os.chdir(ROOT)
    with running_tracking_service():
        started = time.perf_counter()
        report = diagnose(
            agent=f"{module}:AGENT",
            registry="examples.support_desk.tools:TOOLS",
            provider="examples.support_desk.model:make_provider",
            script={"steps": steps},
            jobs=2,
        )
        seconds = time.perf_counter() - started
    replays = sum(len(a["replays"]) for a in report.activations)
    load = os.getloadavg()[0]
    print(
        f"doctor {module.rpartition('.')[2]}: {len(report.activations)} activations, "
        f"{replays} replays, "
        f"{len(report.findings)} finding(s): {seconds:.1f} s (target <= {TARGET_S:.0f} s; "
        f"{1000 * seconds / max(replays, 1):.0f} ms a replay; load average {load:.1f} on "
        f"{os.cpu_count()} CPUs)"
    )
    return report.clean


if __name__ == "__main__":
    sys.exit(main())
