"""Fresh interpreters for the doctor's workers: started with their own environment,
directory and hash seed, spoken to in JSON lines, ended by their own pid.

``Worker`` is one ``python -m beam_agents.doctor.worker`` process. ``Pool`` runs
tasks on several workers at once, at most ``jobs`` in flight in all, and hands each
answer back with its task.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["Pool", "Worker", "WorkerFailed", "ready"]


class WorkerFailed(Exception):
    """A worker ended, or sent something that is not one of its answers."""


class Worker:
    """One worker process (see the module docstring)."""

    def __init__(
        self, name: str, plan: dict[str, Any], *, env: dict[str, str], cwd: str, log: Path
    ) -> None:
        self.name = name
        self.log = log
        self._log_file = open(log, "wb")  # noqa: SIM115  # closed in close()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "beam_agents.doctor.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env=env,
            cwd=cwd,
            text=True,
            encoding="utf-8",
            # A process group of its own: what agent code forks in it is ended with it.
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin: IO[str] = self.process.stdin
        self.stdout: IO[str] = self.process.stdout
        self.fd = self.stdout.fileno()
        # Answers are read from the descriptor, never through the text buffer: a buffered
        # line would be invisible to the selectors that wait on it.
        self._pending = bytearray()
        self.send(plan)

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.stdin.write(json.dumps(message) + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerFailed(self._ended()) from None

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next answer (``timeout`` seconds at most, None: as long as it takes)."""
        while b"\n" not in self._pending:
            if timeout is not None:
                with selectors.DefaultSelector() as selector:
                    selector.register(self.fd, selectors.EVENT_READ)
                    if not selector.select(timeout):
                        raise WorkerFailed(
                            f"the {self.name} worker gave no answer in {timeout:g} s"
                        )
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise WorkerFailed(self._ended())
            self._pending.extend(chunk)
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        try:
            message: dict[str, Any] = json.loads(line)
        except ValueError:
            raise WorkerFailed(f"the {self.name} worker sent {line[:200]!r}") from None
        return message

    @property
    def has_answer(self) -> bool:
        """An answer is read already and waits (the selector would not say so)."""
        return b"\n" in self._pending

    def _ended(self) -> str:
        code = self.process.wait(timeout=30)
        tail = self.log_tail()
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"the {self.name} worker ended ({how})" + (f"; it said: {tail}" if tail else "")

    def log_tail(self, size: int = 600) -> str:
        self._log_file.flush()
        try:
            data = self.log.read_bytes()[-size:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def finish(self) -> None:
        """Close its input (a replay worker ends once its children are done)."""
        with contextlib.suppress(OSError):
            self.stdin.close()

    def close(self, timeout: float = 10.0) -> None:
        """End the worker, and every process left in its group (agent code's forks: the
        pipeline's side runs agent code with nothing refused)."""
        self.finish()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.stdout.close()
        self._log_file.close()


class Pool:
    """Tasks on several workers, at most ``jobs`` in flight in all."""

    def __init__(self, workers: dict[str, Worker], jobs: int) -> None:
        self.workers = workers
        self.jobs = max(1, jobs)
        self._next = 0

    def run(self, tasks: list[tuple[str, dict[str, Any]]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(task, answer)`` for each ``(worker name, task)``, as answers come."""
        waiting = list(reversed(tasks))
        in_flight: dict[tuple[str, int], dict[str, Any]] = {}
        with selectors.DefaultSelector() as selector:
            registered: set[str] = set()
            while waiting or in_flight:
                while waiting and len(in_flight) < self.jobs:
                    name, task = waiting.pop()
                    self._next += 1
                    task = {**task, "id": self._next, "worker": name}
                    worker = self.workers[name]
                    worker.send(task)
                    in_flight[(name, self._next)] = task
                    if name not in registered:
                        selector.register(worker.stdout, selectors.EVENT_READ, name)
                        registered.add(name)
                ready = [n for n in registered if self.workers[n].has_answer] or [
                    key.data for key, _ in selector.select(timeout=5.0)
                ]
                for name in ready:
                    message = self.workers[name].receive()
                    if "id" not in message:
                        raise WorkerFailed(
                            f"the {name} worker: {message.get('refused') or message.get('internal')}"
                        )
                    task = in_flight.pop((name, message["id"]))
                    yield task, message["answer"]
                    break  # refill before reading on (the selector is level-triggered)
            for name in registered:
                selector.unregister(self.workers[name].stdout)


def ready(worker: Worker, *, timeout: float) -> None:
    """Wait for a replay worker to say it is ready.

    Raises:
        WorkerFailed: It said something else, ended, or said nothing in ``timeout`` s.
    """
    message = worker.receive(timeout)
    if not message.get("ready"):
        raise WorkerFailed(
            f"the {worker.name} worker: {message.get('refused') or message.get('internal')}"
        )
