"""Turning a job's framework state into the runtime's task spec and the task's directory layout.

Every task attempt gets its own directory, derived from its identity alone so that a restarted
orchestrator finds it again without any other record:

    <data dir>/jobs/<job id>/attempt-<n>/<role>-<index>/try-<task attempt>/
        spec.json  secrets.json (0600)  task.lock  pid  runtime.out
        logs/      user.pai.stdout, user.pai.stderr, user.pai.all, runtime-result.json
        work/      the task's working directory

Ports are reserved once per job attempt with the runtime's helpers and written to
`attempt-<n>/ports.json`, so every task of the attempt (and a restarted orchestrator) sees the
same PAI_PORT_LIST. Each spec names the operator's newest failure-rule file (see rules.py), so
a rule changed at run time explains the exit of every task started after the change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from libs.protocol import JobConfig, render_entrypoint
from runtime.ports import release_ports, reserve_many, with_default_ports
from runtime.spec import (
    Directories,
    JobInfo,
    PluginSpec,
    Resources,
    RoleInfo,
    RunAs,
    RuntimeResult,
    SpecError,
    StorageSpec,
    TaskPlacement,
    TaskSpec,
    parse_result,
    read,
)
from services.orchestrator.adapters.rules import current_rules_file
from services.orchestrator.core.frameworks import Framework, TaskKey

SPEC_FILE = "spec.json"
SECRETS_FILE = "secrets.json"
LOCK_FILE = "task.lock"
PID_FILE = "pid"
RUNTIME_OUT = "runtime.out"
RESULT_FILE = "runtime-result.json"
LOG_FILES = {"all": "user.pai.all", "stdout": "user.pai.stdout", "stderr": "user.pai.stderr"}


def attempt_dir(data_dir: Path, job_id: str, attempt: int) -> Path:
    return data_dir / "jobs" / job_id / f"attempt-{attempt}"


def task_dir(data_dir: Path, job_id: str, key: TaskKey) -> Path:
    attempt, role, index, task_attempt = key
    return attempt_dir(data_dir, job_id, attempt) / f"{role}-{index}" / f"try-{task_attempt}"


def latest_task_dir(data_dir: Path, job_id: str, attempt: int, role: str, index: int) -> Path | None:
    """The directory of the newest task attempt of a task, or None if it never started."""
    base = attempt_dir(data_dir, job_id, attempt) / f"{role}-{index}"
    tries = sorted((p for p in base.glob("try-*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))
    return tries[-1] if tries else None


def _ports_for_attempt(data_dir: Path, framework: Framework, attempt: int) -> dict[str, dict[str, list[int]]]:
    path = attempt_dir(data_dir, framework.job_id, attempt) / "ports.json"
    if path.exists():
        stored: dict[str, dict[str, list[int]]] = json.loads(path.read_text())
        return stored
    wanted: dict[str, dict[str, int]] = {}
    for name, body in framework.config.task_roles.items():
        requests = with_default_ports(dict(body.resource_per_instance.ports or {}))
        for index in range(body.instances):
            wanted[f"{framework.job_id}/{attempt}/{name}-{index}"] = requests
    prefix = f"{framework.job_id}/{attempt}/"
    ports = {
        owner.removeprefix(prefix): assigned
        for owner, assigned in reserve_many(wanted, data_dir / "ports").items()
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    tmp.replace(path)
    return ports


def release_attempt_ports(data_dir: Path, job_id: str, attempt: int) -> None:
    """Give back the ports of an ended attempt (idempotent: unknown owners are ignored)."""
    path = attempt_dir(data_dir, job_id, attempt) / "ports.json"
    if not path.exists():
        return
    owners = [f"{job_id}/{attempt}/{task}" for task in json.loads(path.read_text())]
    release_ports(data_dir / "ports", owners)


class Peers(NamedTuple):
    """What every task spec of one job attempt holds alike: its roles and every task's placement."""

    roles: list[RoleInfo]
    tasks: list[TaskPlacement]


def attempt_peers(data_dir: Path, framework: Framework, attempt: int) -> Peers:
    """The roles and placements of the job attempt (its ports reserved at the first call). They do
    not change once the attempt is placed, so an executor may build them once per attempt: for a
    task of a job of n tasks they are n placements, and building them for every task cost the job
    n * n."""
    job = framework.config
    ports = _ports_for_attempt(data_dir, framework, attempt)
    roles: list[RoleInfo] = []
    tasks: list[TaskPlacement] = []
    current = next((a for a in framework.attempts if a.attempt == attempt), None)
    placed = {(task.role, task.index): task for task in current.tasks} if current is not None else {}
    for name, body in job.task_roles.items():
        res = body.resource_per_instance
        roles.append(
            RoleInfo(
                name=name,
                instances=body.instances,
                resources=Resources(
                    cpu=res.cpu,
                    memory_mb=res.memory_mb,
                    gpu=res.gpu,
                    shm_mb=body.shm_mb,
                    ports={k: int(v) for k, v in (res.ports or {}).items()},
                ),
                min_failed_instances=int(body.completion.min_failed_instances or 1),
                min_succeeded_instances=body.completion.min_succeeded_instances,
            )
        )
        for i in range(body.instances):
            task = placed.get((name, i))
            address = (
                task.placement.node_address
                if task is not None and task.placement is not None
                else "127.0.0.1"
            )
            tasks.append(
                TaskPlacement(role=name, index=i, host_ip=address, ports=ports.get(f"{name}-{i}", {}))
            )
    return Peers(roles, tasks)


def build_spec(
    data_dir: Path,
    framework: Framework,
    key: TaskKey,
    directory: Path,
    has_secrets: bool,
    run_as: RunAs | None = None,
    notice: str | None = None,
    peers: Peers | None = None,
) -> TaskSpec:
    """The runtime's whole input for one task attempt (`peers`: the attempt's, if already built)."""
    attempt, role, index, task_attempt = key
    job = framework.config
    roles, tasks = peers if peers is not None else attempt_peers(data_dir, framework, attempt)
    current = next((a for a in framework.attempts if a.attempt == attempt), None)
    me = current.task(role, index) if current is not None else None
    placement = me.placement if me is not None else None
    gpus = list(placement.gpu_indices) if placement is not None else []
    base = attempt_dir(data_dir, framework.job_id, attempt)
    return TaskSpec(
        job=JobInfo(
            user=framework.user or "unknown",
            name=framework.name or framework.job_id,
            uid=framework.job_id,
            attempt_id=attempt,
            task_attempt_id=task_attempt,
            virtual_cluster=framework.virtual_cluster or "default",
        ),
        role=role,
        index=index,
        entrypoint=render_entrypoint(job, role),
        gpu_indices=gpus,
        gpu_milli=placement.gpu_milli if placement is not None else None,
        gpu_memory_mib=placement.gpu_memory_mib if placement is not None else None,
        roles=roles,
        tasks=tasks,
        plugins=runtime_plugins(job),
        storages=[
            read(StorageSpec, storage, f"storages.{i}") for i, storage in enumerate(framework.storages)
        ],
        secrets_file=directory / SECRETS_FILE if has_secrets else None,
        dirs=Directories(
            work_dir=directory / "work",
            log_dir=directory / "logs",
            barrier_dir=base / "barrier",
            ssh_key_dir=attempt_dir(data_dir, framework.job_id, 0).parent / "ssh",
        ),
        failure_rules_file=current_rules_file(data_dir),
        gang=framework.spec.gang if framework.spec is not None else True,
        run_as=run_as,
        notice=notice,
    )


def runtime_plugins(job: JobConfig) -> list[PluginSpec]:
    """The job's extras."com.microsoft.pai.runtimeplugin", in its order, as the runtime reads them."""
    entries = job.extras.runtime_plugins if job.extras is not None else None
    specs = []
    for entry in entries or []:
        policy = (entry.model_extra or {}).get("failurePolicy", "fail")
        specs.append(
            PluginSpec(
                plugin=entry.plugin,
                parameters=dict(entry.parameters or {}),
                failure_policy="ignore" if policy == "ignore" else "fail",
                taskroles=entry.taskroles,
            )
        )
    return specs


def launch_facts(directory: Path) -> tuple[dict[str, list[int]], str | None, str | None]:
    """The ports the task's spec reserved for it, by label, the executor's notice to its user and
    the digest of the image it runs in; nothing when it has no readable spec.

    Read after every start, from a spec the executor has just written (or a restarted one found):
    only these two fields are taken, not the whole spec checked again, which for a task of a
    large job means every peer's placement (milliseconds per task, so seconds per job)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        me = next(t for t in data["tasks"] if t["role"] == data["role"] and t["index"] == data["index"])
        ports = {str(label): [int(port) for port in got] for label, got in me.get("ports", {}).items()}
        notice = data.get("notice")
        digest = (data.get("container") or {}).get("digest")
    except (OSError, ValueError, TypeError, KeyError, AttributeError, StopIteration):
        return {}, None, None
    return (
        ports,
        notice if isinstance(notice, str) else None,
        digest if isinstance(digest, str) else None,
    )


def image_of(config: JobConfig, role: str) -> str:
    """The docker image a task role names, as the user wrote it (its prerequisite's uri)."""
    name = config.task_roles[role].docker_image
    prerequisite = config.prerequisite("dockerimage", name)
    uri = getattr(prerequisite, "uri", None)
    return str(uri or name)


def read_result(directory: Path) -> RuntimeResult | None:
    """The runtime's result for a finished task, or None when it wrote none (or none readable:
    the task's end is then the platform's to explain)."""
    path = directory / "logs" / RESULT_FILE
    try:
        return parse_result(json.loads(path.read_bytes()))
    except (OSError, ValueError, SpecError):
        return None
