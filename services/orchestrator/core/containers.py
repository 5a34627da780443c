"""A task in its docker image: the container engine's arguments, decided without touching anything.

The local executor runs a task's commands in the image its task role names when the machine has
a container engine (Podman or Docker; adapters/engines.py finds it). The runtime stays outside
the image, on the host, contained as a host task is (its own uid, its cgroups): it does the
barrier, the PAI_* environment, the plugins, log capture and masking and the exit analysis, and
runs each of the task's command scripts with ``<engine> run`` of this module's arguments. An
image therefore needs no Python and is never changed: a busybox image with a shell will do.

What a container gets (OpenPAI's pods, as closely as one machine allows):

- the host network, so the ports the scheduler gave the task are the task's own;
- the task's work directory mounted at the same path, and the working directory set to it, so
  every path in the PAI_* environment means the same inside and out;
- the task's uid and gid (``--user``): the image's own users are not the platform's tenants, and
  a container as root could write root-owned files into the shared work directory; beside it,
  the gids of the team storages it may mount (``--group-add``, core/storage_groups.py). An image that
  needs root at run time is not supported on this executor (Kubernetes runs it as its securityContext
  says);
- its cgroup nested under the task's memory group (``--cgroup-parent``, the group's path in the
  memory hierarchy), so the task's memory limit holds for everything in the container and an OOM
  kill is the task's; CPU and processes are set on the container itself, and memory too where
  the task has no cgroup;
- ``/dev/shm`` sized for PyTorch's data loaders (half the task's memory, at least 64 MiB);
- its GPUs by index: CDI names (``nvidia.com/gpu=N``) where the engine has NVIDIA's CDI spec,
  Docker's ``--gpus device=N`` where the engine is Docker, else the device nodes themselves;
- no capability at all (``--cap-drop all``) and ``no-new-privileges``: a setuid-root binary in
  the user's image runs as the tenant's uid, with nothing (no NET_RAW: no packet socket that
  could read the host network's loopback, where the container lives); the engine's default
  seccomp profile. The tenant's uid is the unprivileged mapping: nothing in the container is
  uid 0, so the image's root is nobody's (docs/security.md compares this with Kubernetes'
  restricted Pod Security Standard);
- ``--init``: a small init is process 1 and passes a stop signal on to the task's commands;
- labels naming the platform, the job and the task, so what a platform started can always be
  found again, and removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LABEL_PLATFORM = "ai.pai.platform"
LABEL_JOB = "ai.pai.job"
LABEL_TASK = "ai.pai.task"
MIN_SHM_MIB = 64

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass(frozen=True)
class ContainerPlan:
    """What one task's containers are: everything but its environment and its command."""

    engine: str
    """``podman`` or ``docker``."""
    image: str
    """What runs: the image's id (or ``repository@sha256:...``), never a tag that can move."""
    name: str
    user: str
    """``uid:gid``."""
    work_dir: str
    labels: tuple[tuple[str, str], ...]
    memory_mb: int
    cpus: float
    pids: int
    cgroup_parent: str | None = None
    gpus: tuple[int, ...] = ()
    cdi: bool = False
    mounts: tuple[tuple[str, str, bool], ...] = ()
    """(host path, container path, read-only)."""
    groups: tuple[int, ...] = ()
    """Supplementary gids (``--group-add``): the team storages the task may mount."""


def container_name(job_uid: str, job_attempt: int, role: str, index: int, task_attempt: int) -> str:
    """A task attempt's container: one name per attempt, so an attempt can never run twice."""
    raw = f"pai-{job_uid}-{job_attempt}-{role}-{index}-{task_attempt}"
    return _NAME_UNSAFE.sub("_", raw)[:250]


def shm_mib(memory_mb: int) -> int:
    return max(MIN_SHM_MIB, memory_mb // 2)


def gpu_arguments(engine: str, gpus: tuple[int, ...], cdi: bool) -> list[str]:
    """The engine's way of giving the container exactly these GPUs."""
    if not gpus:
        return []
    if cdi:
        return [arg for n in gpus for arg in ("--device", f"nvidia.com/gpu={n}")]
    if engine == "docker":
        return ["--gpus", "device=" + ",".join(str(n) for n in gpus)]
    nodes = [f"/dev/nvidia{n}" for n in gpus] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    return [arg for node in nodes for arg in ("--device", node)]


def run_arguments(plan: ContainerPlan) -> list[str]:
    """``run ...`` up to (not including) the environment, the image and the command."""
    args = [
        "run",
        "--rm",
        "-i",
        "--init",
        "--name",
        plan.name,
        "--network",
        "host",
        "--user",
        plan.user,
        "--workdir",
        plan.work_dir,
        "--volume",
        f"{plan.work_dir}:{plan.work_dir}",
        "--shm-size",
        f"{shm_mib(plan.memory_mb)}m",
        "--cpus",
        f"{plan.cpus:g}",
        "--pids-limit",
        str(plan.pids),
        "--log-driver",
        "none",
        # Nothing a tenant's image can gain: no capability (NET_RAW's packet sockets, ptrace,
        # mounts), and a setuid binary runs as the tenant (no_new_privs); the engine's default
        # seccomp profile stays on.
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
    ]
    if plan.engine == "podman":
        args += ["--pull", "never"]
    for gid in plan.groups:
        args += ["--group-add", str(gid)]
    if plan.cgroup_parent:
        args += ["--cgroup-parent", plan.cgroup_parent]
    else:
        args += ["--memory", f"{plan.memory_mb}m", "--memory-swap", f"{plan.memory_mb}m"]
    for key, value in plan.labels:
        args += ["--label", f"{key}={value}"]
    for source, target, read_only in plan.mounts:
        args += ["--volume", f"{source}:{target}" + (":ro" if read_only else "")]
    args += gpu_arguments(plan.engine, plan.gpus, plan.cdi)
    return args
