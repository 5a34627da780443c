"""The task spec as the platform writes it: everything the orchestrator tells the runtime about
one task of one attempt, as pydantic models that validate it on the platform's side.

The orchestrator writes it as JSON to a file and starts ``python -m runtime --spec FILE``. It is the
only input of the runtime besides the secrets file, so it carries the whole attempt (every task's
host and ports) to let each task compute the full PAI_* environment without asking anyone.
Secrets never appear here: only the path of the file that holds them. The runtime itself reads
the file with ``runtime.spec`` (the standard library only: pydantic costs every task about 0.1 s
of start-up); tests/contracts/test_task_spec.py keeps the two in agreement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SPEC_VERSION: Literal[1] = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class JobInfo(_Model):
    """Who and what the task belongs to."""

    user: str = Field(min_length=1)
    name: str = Field(min_length=1, description="the job name the user gave, without the user prefix")
    uid: str = Field(min_length=1, description="the platform's job uid")
    attempt_id: int = Field(ge=0, description="0 for the first attempt, +1 per job retry")
    task_attempt_id: int = Field(default=0, ge=0)
    virtual_cluster: str = "default"

    @property
    def framework_name(self) -> str:
        """OpenPAI names a job's framework ``user~name``; PAI_JOB_NAME carries that form."""
        return f"{self.user}~{self.name}"


class Resources(_Model):
    """Resources per instance of a task role, as in the protocol's resourcePerInstance."""

    cpu: float = Field(ge=0)
    memory_mb: int = Field(ge=0)
    gpu: int = Field(default=0, ge=0)
    shm_mb: int = Field(default=512, ge=0)
    ports: dict[str, int] = Field(default_factory=dict, description="port count requested per label")


class RoleInfo(_Model):
    """One task role of the job: its size, resources and completion policy."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    instances: int = Field(ge=1)
    resources: Resources
    min_failed_instances: int = 1
    min_succeeded_instances: int | None = Field(
        default=None, description="None means every instance (OpenPAI's default)"
    )


class TaskPlacement(_Model):
    """Where one task of the attempt runs and which ports were reserved for it, per label."""

    role: str
    index: int = Field(ge=0)
    host_ip: str
    ports: dict[str, list[int]] = Field(default_factory=dict)


class PluginSpec(_Model):
    """One entry of extras."com.microsoft.pai.runtimeplugin" (or a translated cmd prerequisite)."""

    plugin: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    failure_policy: Literal["ignore", "fail"] = Field(default="fail", alias="failurePolicy")
    taskroles: list[str] | None = Field(default=None, description="None applies the plugin to every role")


class StorageSpec(_Model):
    """A storage the user may use; the runtime refuses any other."""

    name: str
    type: str = Field(description="local and nfs (already mounted on the node) are linked locally")
    path: str = Field(description="where the storage's data is on the node")
    mount_path: str = Field(description="where the task sees it, e.g. /mnt/data")
    default: bool = False
    read_only: bool = False


class Directories(_Model):
    work_dir: Path = Field(description="the task's working directory and the root of storage links")
    log_dir: Path = Field(description="user.pai.* logs and runtime-result.json")
    barrier_dir: Path = Field(description="shared by every task of the attempt")
    ssh_key_dir: Path | None = Field(
        default=None, description="shared by every task of the job: holds the job ssh key pair"
    )
    private_dir: Path | None = Field(
        default=None,
        description="the runtime's own files (command scripts), out of the task's reach; "
        "None: private/ beside log_dir, in the task's directory",
    )


class Confine(_Model):
    """The kernel limits the runtime puts itself (and so the task) under, first thing."""

    cgroups: list[Path] = Field(
        default_factory=list, description="cgroup directories the runtime joins (cgroup.procs)"
    )
    rlimits: dict[str, int] = Field(
        default_factory=dict, description="resource limits set on the runtime, inherited by its commands"
    )


class RunAs(_Model):
    """The unprivileged user the task's commands run as (the runtime itself stays the platform's)."""

    name: str = Field(min_length=1)
    uid: int = Field(ge=1, description="never root")
    gid: int = Field(ge=0)
    groups: list[int] = Field(
        default_factory=list,
        description="supplementary groups: the gids of the team storages the task may mount",
    )


class Runc(_Model):
    """The task's containers run by runc itself on a bundle the executor prepared (the image's
    files under an overlay of the task's own, the engine's configuration patched for the task;
    services/orchestrator/core/bundles.py), not through the engine's ``run``."""

    program: str = Field(min_length=1, description="runc")
    root: Path = Field(description="runc's state directory (--root), the platform's")
    config: Path = Field(description="the task's OCI configuration; each script's adds its command")
    name: str = Field(min_length=1, description="each script's container is this name, a dash, its label")


class Container(_Model):
    """The task's commands run in its docker image through a container engine (the runtime stays
    on the host); see services/orchestrator/core/containers.py."""

    engine: str = Field(min_length=1, description="the engine's program (podman or docker)")
    run: list[str] = Field(description="the engine's run arguments up to the environment and the image")
    image: str = Field(min_length=1, description="the image run: its id or repository@digest")
    env: dict[str, str] = Field(
        default_factory=dict, description="the engine's own environment (CONTAINERS_CONF)"
    )
    digest: str | None = Field(default=None, description="the image as repository@sha256:..., for the record")
    pull: bool = Field(
        default=False,
        description="the runtime pulls the image first (it is not on the node); `image` is then the "
        "reference to pull, run by the id the pull gives",
    )
    auth_file: Path | None = Field(
        default=None, description="registry credentials for the pull (root-only; removed after it)"
    )
    runc: Runc | None = Field(
        default=None, description="None: each script runs with the engine's run and `run`; else with runc"
    )


class Sandbox(_Model):
    """A host task's commands in a sandbox: bubblewrap's arguments up to the task's mounts, then
    setpriv's up to the command (services/orchestrator/core/sandboxes.py decides them)."""

    wrap: list[str] = Field(min_length=1, description="bwrap and its arguments, up to the mounts")
    drop: list[str] = Field(min_length=1, description="setpriv and its arguments, up to the command")


class LogRotation(_Model):
    max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    backup_count: int = Field(default=3, ge=0)


class TaskSpec(_Model):
    """The whole input of one runtime run."""

    spec_version: Literal[1] = SPEC_VERSION
    job: JobInfo
    role: str
    index: int = Field(ge=0)
    entrypoint: str = Field(description="bash script, parameters rendered, secrets still as references")
    gpu_indices: list[int] = Field(default_factory=list, description="GPUs assigned to this task")
    gpu_milli: int | None = Field(
        default=None, ge=1, le=999, description="thousandths of its one GPU a shared task may use"
    )
    gpu_memory_mib: int | None = Field(default=None, ge=1, description="device memory cap of a shared task")
    mps_pipe_dir: Path | None = Field(
        default=None,
        description="the pipe directory of the node's NVIDIA MPS control daemon, given to a shared "
        "task where MPS enforces its share (CUDA_MPS_PIPE_DIRECTORY)",
    )
    roles: list[RoleInfo] = Field(min_length=1)
    tasks: list[TaskPlacement] = Field(min_length=1, description="every task of the attempt")
    plugins: list[PluginSpec] = Field(default_factory=list)
    storages: list[StorageSpec] = Field(default_factory=list)
    secrets_file: Path | None = None
    dirs: Directories
    barrier_timeout_s: float = Field(default=300.0, gt=0)
    gang: bool = Field(
        default=True,
        description="wait at the barrier for every task of the attempt; false when the job turns "
        "gang allocation off (extras.gangAllocation: false), whose tasks start on their own",
    )
    log_rotation: LogRotation = Field(default_factory=LogRotation)
    result_tail_kib: int = Field(default=16, ge=0)
    default_fs_uri: str = ""
    failure_rules_file: Path | None = Field(
        default=None, description="the operator's current failure rules; the packaged defaults when absent"
    )
    run_as: RunAs | None = Field(
        default=None, description="the user commands run as; None: the runtime's own user"
    )
    confine: Confine | None = Field(default=None, description="None: no limits (none could be set)")
    container: Container | None = Field(
        default=None, description="None: the commands run on the host; else in this container"
    )
    sandbox: Sandbox | None = Field(
        default=None, description="None: the host commands run without a sandbox (or in a container)"
    )
    notice: str | None = Field(
        default=None,
        description="what the executor did with the task's image and where the commands run; "
        "the first line of the task's log",
    )

    @model_validator(mode="after")
    def _tasks_match_roles(self) -> TaskSpec:
        by_name = {r.name: r for r in self.roles}
        if len(by_name) != len(self.roles):
            raise ValueError("roles: task role names must be unique")
        if self.role not in by_name:
            raise ValueError(f"role: {self.role!r} is not one of the roles {sorted(by_name)}")
        seen = {(t.role, t.index) for t in self.tasks}
        expected = {(r.name, i) for r in self.roles for i in range(r.instances)}
        if len(seen) != len(self.tasks) or seen != expected:
            missing = sorted(expected - seen)
            extra = sorted(seen - expected)
            raise ValueError(
                f"tasks: must list each (role, index) of the roles exactly once; "
                f"missing {missing}, unexpected {extra}"
            )
        if (self.role, self.index) not in seen:
            raise ValueError(f"index: {self.role}-{self.index} is not a task of the attempt")
        return self

    def role_info(self, name: str) -> RoleInfo:
        return next(r for r in self.roles if r.name == name)

    def placement(self, role: str, index: int) -> TaskPlacement:
        return next(t for t in self.tasks if t.role == role and t.index == index)

    @property
    def me(self) -> TaskPlacement:
        return self.placement(self.role, self.index)


class RuntimeExit(BaseModel):
    """Why the runtime itself ended the task, with one of its own exit codes."""

    model_config = ConfigDict(frozen=True)

    code: int
    phrase: str
    reason: str


class RuntimeResult(BaseModel):
    """runtime-result.json, the runtime's account of a finished task, as the platform reads it:
    what ended it (the user command's code or the runtime's own), who stopped it, the plugins'
    reports, the log's tail (secrets masked) and the failure rule the runtime matched. Read
    tolerantly (an older runtime's extra keys are ignored); the runtime writes
    ``runtime.spec.RuntimeResult``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    exit_code: int = Field(alias="exitCode")
    user_exit_code: int | None = Field(default=None, alias="userExitCode")
    runtime_exit: RuntimeExit | None = Field(default=None, alias="runtimeExit")
    stopped_by: str | None = Field(default=None, alias="stoppedBy")
    plugins: list[dict[str, Any]] = Field(default_factory=list)
    user_log_tail: str = Field(default="", alias="userLogTail")
    failure: dict[str, Any] | None = None
    image_digest: str | None = Field(
        default=None, alias="imageDigest", description="the image the runtime pulled, repository@sha256:..."
    )
