"""`pai up` as a user runs it: a real process, its output, its children, signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from pai.embedded.platform import free_port

REPO = Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-c", "from pai.cli.main import main; main()")


class UpProcess:
    """One `pai up` started with its own data dir and API port; stopped or killed by the test.

    ``choose_port=True`` gives no `--port`: the platform chooses, and ``port`` is the API port it
    printed once it is up.
    """

    def __init__(
        self, data_dir: Path, *args: str, port: int | None = None, choose_port: bool = False
    ) -> None:
        self.data_dir = data_dir
        self.port = 0 if choose_port else port or free_port()
        self.args = args
        self.output = data_dir.parent / f"up-{data_dir.name}-{self.port}.out"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> UpProcess:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "PAI_ADMIN_PASSWORD": "up-admin-pass"}
        port = ["--port", str(self.port)] if self.port else []
        with self.output.open("wb") as out:
            self.process = subprocess.Popen(
                [*CLI, "up", "--data-dir", str(self.data_dir), *port, *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                env=env,
            )
        return self

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    async def wait_until_up(self, within: float = 120.0) -> None:
        deadline = time.monotonic() + within
        # The banner's last line: every line of what pai up says about itself is printed by then.
        while "press Ctrl-C to stop" not in self.text():
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"pai up exited {self.process.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"pai up did not come up within {within:g}s:\n{self.text()}")
            await asyncio.sleep(0.1)  # a process's output: there is no event to await
        if not self.port:
            self.port = self.printed()["api"]

    def printed(self) -> dict[str, int]:
        """The ports `pai up` printed: api, nats, portal, metrics."""
        found: dict[str, int] = {}
        patterns = {
            "api": r"pai is up: API http://127\.0\.0\.1:(\d+)",
            "nats": r"\(NATS nats://127\.0\.0\.1:(\d+)",
            "portal": r"^portal: http://127\.0\.0\.1:(\d+)/",
            "metrics": r"^metrics: http://127\.0\.0\.1:(\d+)/metrics",
        }
        text = self.text()
        for name, pattern in patterns.items():
            # the last start's, where the output holds several
            matches = re.findall(pattern, text, flags=re.MULTILINE)
            assert matches, f"no {name} port in:\n{text}"
            found[name] = int(matches[-1])
        return found

    def descendants(self) -> list[psutil.Process]:
        assert self.process is not None
        try:
            return list(psutil.Process(self.process.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            return []

    def child_named(self, name: str) -> psutil.Process:
        for child in self.descendants():
            try:
                if name in " ".join(child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                continue
        raise AssertionError(f"no child {name!r} of pai up")

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def cleanup(self) -> None:
        """Leave nothing running, whatever the test did."""
        survivors = self.descendants()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for process in survivors:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def gone(processes: list[psutil.Process]) -> bool:
    def ended(process: psutil.Process) -> bool:
        try:
            return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, FileNotFoundError):  # reaped between the two questions
            return True

    return all(ended(p) for p in processes)
