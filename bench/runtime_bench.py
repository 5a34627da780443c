"""What the task runtime costs: start-up to exit around a trivial command, the gang barrier, and
log capture with secret masking.

Run: .venv/bin/python bench/runtime_bench.py
Every task of every job starts through the runtime, so its own overhead is paid on each task
start; log capture sits between the user program and its log files for the task's whole life.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def spec(root: Path, role: str, roles: list[str], entrypoint: str, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "job": {"user": "bench", "name": "bench", "uid": "bench-1", "attempt_id": 0},
        "role": role,
        "index": 0,
        "entrypoint": entrypoint,
        "roles": [{"name": r, "instances": 1, "resources": {"cpu": 1, "memory_mb": 256}} for r in roles],
        "tasks": [{"role": r, "index": 0, "host_ip": "127.0.0.1"} for r in roles],
        "dirs": {
            "work_dir": str(root / role / "work"),
            "log_dir": str(root / role / "logs"),
            "barrier_dir": str(root / "barrier"),
        },
        **extra,
    }
    path = root / f"{role}.json"
    path.write_text(json.dumps(data))
    return path


def start(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "runtime", "--spec", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def report(label: str, samples: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples)
    print(f"{label:58} median {statistics.median(ms):8.1f} ms  max {ms[-1]:8.1f} ms  (n={len(ms)})")


def main() -> None:
    runs = 15
    single, pair = [], []
    for n in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            path = spec(Path(tmp), "worker", ["worker"], "true")
            t0 = time.perf_counter()
            assert start(path).wait() == 0
            single.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as tmp:
            a = spec(Path(tmp), "master", ["master", "worker"], "true")
            b = spec(Path(tmp), "worker", ["master", "worker"], "true")
            t0 = time.perf_counter()
            procs = [start(a), start(b)]
            assert all(p.wait() == 0 for p in procs), n
            pair.append(time.perf_counter() - t0)
    report("one task, command `true`, spawn to exit", single)
    report("two tasks through the gang barrier, spawn to both exited", pair)

    megabytes = 64
    with tempfile.TemporaryDirectory() as tmp:
        secrets = Path(tmp) / "secrets.json"
        secrets.write_text(json.dumps({"a": "alpha-secret", "b": "beta-secret"}))
        command = f"head -c {megabytes * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 99"
        path = spec(Path(tmp), "worker", ["worker"], command, secrets_file=str(secrets))
        t0 = time.perf_counter()
        assert start(path).wait() == 0
        elapsed = time.perf_counter() - t0
    label = "log capture, 100-byte lines, 2 secrets masked"
    print(f"{label:58} {megabytes / elapsed:8.1f} MB/s ({megabytes} MB)")


if __name__ == "__main__":
    main()
