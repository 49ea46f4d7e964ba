"""A command in a pseudo-terminal of a given size, and what it writes there, timestamped.

For the benchmarks that measure the TUI as the console script runs it (replay
included): when a text first reaches the terminal, and how much an idle app
writes (bytes, write bursts, CPU). No terminal emulator: Textual writes each
styled run of text as one piece, so a label such as ``START`` appears in the
byte stream as it appears on the screen.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

BURST_GAP_S = 0.005
"""Writes closer together than this are one burst (one frame, more or less)."""


@dataclass
class Terminal:
    """A running command in a pty: ``read`` collects its output with timestamps."""

    process: subprocess.Popen[bytes]
    master: int
    started: float
    chunks: list[tuple[float, bytes]] = field(default_factory=list)

    @classmethod
    def start(
        cls, argv: Sequence[str], *, size: tuple[int, int], env: dict[str, str] | None = None
    ) -> Terminal:
        master, slave = os.openpty()
        width, height = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
        environment = {**(env or os.environ), "TERM": "xterm-256color", "COLUMNS": str(width)}
        environment["LINES"] = str(height)
        started = time.perf_counter()
        process = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environment,
            start_new_session=True,
        )
        os.close(slave)
        return cls(process, master, started)

    def read(self, seconds: float) -> None:
        """Collect output for ``seconds`` (or until the command ends)."""
        end = time.perf_counter() + seconds
        while (left := end - time.perf_counter()) > 0:
            ready, _, _ = select.select([self.master], [], [], min(left, 0.05))
            if not ready:
                if self.process.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                return
            if not data:
                return
            self.chunks.append((time.perf_counter(), data))

    def wait_for(self, text: bytes, timeout: float) -> float | None:
        """Seconds from the start to when ``text`` first reached the terminal, or None."""
        end = time.perf_counter() + timeout
        seen = b""
        index = 0
        while True:
            for at, data in self.chunks[index:]:
                seen = seen[-len(text) :] + data
                if text in seen:
                    return at - self.started
            index = len(self.chunks)
            if time.perf_counter() > end or self.process.poll() is not None:
                return None
            self.read(0.02)

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def cpu_seconds(self) -> float:
        """User and system CPU time of the command so far (Linux ``/proc``)."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def idle(self, seconds: float) -> tuple[float, float, float]:
        """Over ``seconds`` of no input: (bytes/s, write bursts/s, share of a core)."""
        self.chunks.clear()
        cpu = self.cpu_seconds()
        self.read(seconds)
        used = self.cpu_seconds() - cpu
        total = sum(len(data) for _, data in self.chunks)
        bursts = 0
        last = -1.0
        for at, _ in self.chunks:
            if at - last > BURST_GAP_S:
                bursts += 1
            last = at
        return total / seconds, bursts / seconds, used / seconds

    def stop(self, keys: bytes = b"q", timeout: float = 20) -> int | None:
        """Send ``keys`` (quit), collect output until it exits; its exit code (None: killed)."""
        self.send(keys)
        end = time.perf_counter() + timeout
        while self.process.poll() is None and time.perf_counter() < end:
            self.read(0.1)
        code = self.process.poll()
        if code is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)
        return code
