"""The doctor over 100 sample activations of the demo's support agent, on 2 jobs.

Target (issue 26): at most 30 s for the whole run (the pipeline's step, every
activation replayed under the 7 default conditions, and the closer looks). Printed
beside the number, with the time per replay; the machine is shared, so the run also
prints the load average it ran under.

    .venv/bin/python bench/doctor.py [--activations N]
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
    count = parser.parse_args().activations
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
            agent="examples.support_desk.agent:AGENT",
            registry="examples.support_desk.tools:TOOLS",
            provider="examples.support_desk.model:make_provider",
            script={"steps": steps},
            jobs=2,
        )
        seconds = time.perf_counter() - started
    replays = sum(len(a["replays"]) for a in report.activations)
    load = os.getloadavg()[0]
    print(
        f"doctor: {len(report.activations)} activations, {replays} replays, "
        f"{len(report.findings)} finding(s): {seconds:.1f} s (target <= {TARGET_S:.0f} s; "
        f"{1000 * seconds / max(replays, 1):.0f} ms a replay; load average {load:.1f} on "
        f"{os.cpu_count()} CPUs)"
    )
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
