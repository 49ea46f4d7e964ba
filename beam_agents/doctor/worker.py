"""``python -m beam_agents.doctor.worker``: a doctor worker process (the pipeline's side, or
the replays under one condition).

It reads its plan (one JSON line) from standard input, then, for a replay worker,
its tasks (one JSON line each); it answers in JSON lines on the standard output it
was started with. Agent code's own prints go to standard error instead (the
descriptor is moved before any agent code runs), so they cannot garble an answer.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, read unbuffered: the tasks after it stay in the pipe for select()."""
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line.extend(chunk)
    return bytes(line)


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # print() from agent code: standard error
    plan: dict[str, Any] = json.loads(_read_line(0))
    sys.path[0:0] = [p for p in plan["sys_path"] if p not in sys.path]

    def send(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    from beam_agents.doctor.conditions import Condition, shift_clock
    from beam_agents.doctor.refusal import DoctorUsageError
    from beam_agents.doctor.watch import AgentFiles, Watcher

    condition = Condition.from_document(plan["condition"]) if plan.get("condition") else None
    if condition is not None and condition.clock_shift_s:
        shift_clock(condition.clock_shift_s)
    files = AgentFiles(plan["roots"])
    watcher = Watcher(files) if plan["role"] == "pipeline" else None
    if watcher is not None:
        watcher.start()  # before agent code is imported
    try:
        if watcher is not None:
            from beam_agents.doctor.pipeline_side import run_pipeline_side

            record = run_pipeline_side(
                plan, watcher, Path(plan["run"]), lambda what: send({"running": what})
            )
            send({"record": record})
        else:
            from beam_agents.doctor.replay_side import serve_replays

            serve_replays(plan, files, sys.stdin, answers)
    except DoctorUsageError as refused:
        send({"refused": refused.message})
    except BaseException as exc:  # a bug of ours, or agent code ending the process
        send({"internal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    finally:
        if watcher is not None:
            watcher.stop()
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
