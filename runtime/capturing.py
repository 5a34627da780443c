"""Capture of a task's output into size-rotated log files, with secrets masked.

The user's stdout goes to user.pai.stdout, stderr to user.pai.stderr and both, interleaved as they
arrive, to user.pai.all (OpenPAI's file names). Output is passed on in whole lines so a secret is
masked even when a command prints it; a line longer than 1 MiB is cut there, which is the one way
a secret at the cut could escape masking.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from runtime.secrets import Masker

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from typing import IO

STDOUT_LOG = "user.pai.stdout"
STDERR_LOG = "user.pai.stderr"
ALL_LOG = "user.pai.all"
_READ_LINE_MAX = 1024 * 1024
_READ_SIZE = 64 * 1024


class RotatingFile:
    """An append-only file that rolls over to name.1 .. name.N when it would pass max_bytes."""

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        self.path = path
        self._max = max_bytes
        self._backups = backup_count
        self._lock = threading.Lock()
        self._file = open(path, "ab")  # noqa: SIM115 - closed in close(), lives as long as the capture
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        with self._lock:
            while data:
                room = self._max - self._size
                if len(data) <= room:
                    cut = len(data)
                else:
                    # Files end at line ends; only a line longer than a whole file is split.
                    cut = data.rfind(b"\n", 0, room) + 1
                    if cut == 0 and self._size:
                        self._rotate()
                        continue
                    cut = cut or room
                self._file.write(data[:cut])
                self._size += cut
                data = data[cut:]
                if data:
                    self._rotate()
            self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        if self._backups > 0:
            for i in range(self._backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            self._file = open(self.path, "ab")  # noqa: SIM115
        else:
            self._file = open(self.path, "wb")  # noqa: SIM115
        self._size = 0

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Tail:
    """The last ``limit`` bytes written, kept in memory for the result file."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        if self._limit <= 0:
            return
        with self._lock:
            self._buf += data
            if len(self._buf) > self._limit:
                del self._buf[: len(self._buf) - self._limit]

    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", errors="replace")


class LogCapture:
    """The three user logs of one task; ``pump`` copies a child's stream into them."""

    def __init__(
        self, log_dir: Path, max_bytes: int, backup_count: int, masker: Masker, tail_bytes: int
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._masker = masker
        self.stdout = RotatingFile(log_dir / STDOUT_LOG, max_bytes, backup_count)
        self.stderr = RotatingFile(log_dir / STDERR_LOG, max_bytes, backup_count)
        self.all = RotatingFile(log_dir / ALL_LOG, max_bytes, backup_count)
        self.tail = Tail(tail_bytes)

    def write(self, data: bytes, to_stderr: bool) -> None:
        masked = self._masker.data(data)
        (self.stderr if to_stderr else self.stdout).write(masked)
        self.all.write(masked)
        self.tail.add(masked)

    def note(self, text: str) -> None:
        """A line of the platform's in the task's log (stderr and all), not in the tail failure
        rules are matched against."""
        data = self._masker.data(f"[pai] {text}\n".encode())
        self.stderr.write(data)
        self.all.write(data)

    def pump(self, stream: IO[bytes], to_stderr: bool) -> threading.Thread:
        """Start a thread copying ``stream`` line by line until it closes."""

        def run() -> None:
            carry = b""
            with stream:
                # read1 returns what is there now, so output is not held back; only whole lines
                # are passed on so a secret is never split between two writes.
                while chunk := stream.read1(_READ_SIZE):  # type: ignore[attr-defined]
                    data = carry + chunk
                    cut = data.rfind(b"\n") + 1
                    if cut == 0 and len(data) < _READ_LINE_MAX:
                        carry = data
                        continue
                    if cut == 0:
                        cut = len(data)
                    carry = data[cut:]
                    self.write(data[:cut], to_stderr)
                if carry:
                    self.write(carry, to_stderr)

        thread = threading.Thread(target=run, name=f"pump-{'err' if to_stderr else 'out'}", daemon=True)
        # A stop signal delivered to a pump thread would not wake the main thread blocked in
        # waitpid: the thread is created with them blocked (it inherits the mask) so they reach
        # the main thread only.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return thread

    def close(self) -> None:
        for f in (self.stdout, self.stderr, self.all):
            f.close()
