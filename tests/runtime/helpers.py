"""Builders of task specs and a way to run the real runtime as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from runtime.ports import port_is_bindable
from runtime.processes import runtime_command
from services.orchestrator.adapters.local import runtime_path

REPO_ROOT = Path(__file__).resolve().parents[2]


def role(name: str, instances: int = 1, **resources: Any) -> dict[str, Any]:
    res = {"cpu": 1, "memory_mb": 512, "gpu": 0, "ports": {}}
    res.update(resources)
    return {"name": name, "instances": instances, "resources": res}


def spec_for(
    root: Path,
    role_name: str,
    index: int,
    roles: list[dict[str, Any]],
    entrypoint: str,
    ports: dict[tuple[str, int], dict[str, list[int]]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A spec dict for one task; every task of an attempt shares ``root`` (barrier, keys)."""
    ports = ports or {}
    tasks = [
        {"role": r["name"], "index": i, "host_ip": "127.0.0.1", "ports": ports.get((r["name"], i), {})}
        for r in roles
        for i in range(r["instances"])
    ]
    task_dir = root / f"{role_name}-{index}"
    spec: dict[str, Any] = {
        "job": {"user": "alice", "name": "demo", "uid": "job-1", "attempt_id": 0},
        "role": role_name,
        "index": index,
        "entrypoint": entrypoint,
        "roles": roles,
        "tasks": tasks,
        "dirs": {
            "work_dir": str(task_dir / "work"),
            "log_dir": str(task_dir / "logs"),
            "barrier_dir": str(root / "barrier"),
            "ssh_key_dir": str(root / "job-ssh"),
        },
        "barrier_timeout_s": 30,
    }
    spec.update(extra)
    return spec


def write_spec(root: Path, spec: dict[str, Any]) -> Path:
    path = root / f"spec-{spec['role']}-{spec['index']}.json"
    path.write_text(json.dumps(spec))
    return path


def start_runtime(spec_path: Path) -> subprocess.Popen[str]:
    """The runtime started as the local executor starts it (no site module, its own PYTHONPATH)."""
    return subprocess.Popen(
        runtime_command(spec_path),
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": runtime_path()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_runtime(spec_path: Path, timeout: float = 60) -> tuple[int, str]:
    """Run the runtime to completion; returns (exit code, its stderr)."""
    proc = start_runtime(spec_path)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def log_dir(spec: dict[str, Any]) -> Path:
    return Path(spec["dirs"]["log_dir"])


def result_of(spec: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((log_dir(spec) / "runtime-result.json").read_text())
    return data


def all_log(spec: dict[str, Any]) -> str:
    return (log_dir(spec) / "user.pai.all").read_text()


def ports_outside_ephemeral(count: int, low: int = 21000, high: int = 32000) -> list[int]:
    """``count`` ports that are free now and below the kernel's ephemeral range.

    A fixed port inside that range (32768 and up by default) can be taken at any moment by some
    other program's outgoing connection, and a task whose reserved port is taken ends as a port
    conflict; ports below it are only ever bound on purpose.
    """
    free: list[int] = []
    for port in range(low + os.getpid() % 1000 * 8, high):
        if port_is_bindable(port):
            free.append(port)
            if len(free) == count:
                return free
    raise AssertionError(f"fewer than {count} free ports in [{low}, {high})")
