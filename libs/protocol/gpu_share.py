"""A task role's share of one GPU: the `extras.gpuShare` extension of the job protocol.

OpenPAI's schema counts GPUs in whole devices (`resourcePerInstance.gpu`) and lets `extras` hold
any mapping, so a share rides there and every job OpenPAI accepts or refuses is judged the same:

    taskRoles:
      infer:
        resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 1}
    extras:
      gpuShare:
        taskRoles:
          infer: {gpuMilli: 500, gpuMemoryMiB: 8192}

`gpuMilli` is the thousandths of one GPU each instance uses (1-999, as the Alibaba GPU trace
counts them; 1000 is a whole GPU: leave gpuShare out). `gpuMemoryMiB` optionally caps the
device memory. A shared role asks for `gpu: 1`. The scheduler places instances of shared roles
two or more to a device; the runtime tells each its device and share (docs/gpu-sharing.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

EXTRAS_KEY = "gpuShare"
MILLI = 1000
MAX_GPU_MEMORY_MIB = 1 << 20  # 1 TiB: above any device made


@dataclass(frozen=True)
class GpuShare:
    """What one instance of a shared task role gets of its single GPU."""

    gpu_milli: int
    gpu_memory_mib: int | None = None

    @property
    def percentage(self) -> int:
        """The share as a whole percentage of the device's compute, at least 1."""
        return max(1, round(self.gpu_milli / 10))


Path = tuple[str | int, ...]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def share_problems(data: Mapping[str, Any]) -> Iterator[tuple[Path, str, str]]:
    """Each problem of `extras.gpuShare`: the path, what is wrong, and the allowed values."""
    extras = _mapping(data.get("extras"))
    if EXTRAS_KEY not in extras or extras[EXTRAS_KEY] is None:
        return
    base: Path = ("extras", EXTRAS_KEY)
    section = extras[EXTRAS_KEY]
    if not isinstance(section, dict):
        yield base, "gpuShare must be a mapping", "write `gpuShare: {taskRoles: {ROLE: {gpuMilli: 500}}}`"
        return
    for key in section:
        if key != "taskRoles":
            yield (*base, key), f"unknown field {key!r} in gpuShare", "gpuShare holds only taskRoles"
    roles = section.get("taskRoles")
    if not isinstance(roles, dict):
        yield (
            (*base, "taskRoles"),
            "gpuShare.taskRoles must be a mapping of task role names",
            ("write `taskRoles: {ROLE: {gpuMilli: 500}}`"),
        )
        return
    job_roles = _mapping(data.get("taskRoles"))
    for role, spec in roles.items():
        path = (*base, "taskRoles", role)
        if role not in job_roles:
            choices = ", ".join(map(str, job_roles))
            yield path, f"task role {role!r} does not exist", f"name one of: {choices}"
            continue
        if not isinstance(spec, dict):
            yield (
                path,
                "a role's share must be a mapping",
                "write `{gpuMilli: 500}` (and optionally gpuMemoryMiB)",
            )
            continue
        for key in spec:
            if key not in ("gpuMilli", "gpuMemoryMiB"):
                yield (*path, key), f"unknown field {key!r}", "allowed fields: gpuMilli, gpuMemoryMiB"
        milli = spec.get("gpuMilli")
        if not (isinstance(milli, int) and _whole(milli) and 1 <= milli < MILLI):
            yield (
                (*path, "gpuMilli"),
                f"gpuMilli must be a whole number from 1 to 999, not {milli!r}",
                ("gpuMilli counts thousandths of one GPU (500 is half); for whole GPUs drop gpuShare"),
            )
        memory = spec.get("gpuMemoryMiB")
        if memory is not None and not (
            isinstance(memory, int) and _whole(memory) and 1 <= memory <= MAX_GPU_MEMORY_MIB
        ):
            yield (
                (*path, "gpuMemoryMiB"),
                f"gpuMemoryMiB must be a whole number from 1 to {MAX_GPU_MEMORY_MIB}",
                ("give the device memory cap in MiB, e.g. 8192, or leave it out"),
            )
        resource = _mapping(_mapping(job_roles[role]).get("resourcePerInstance"))
        gpu = resource.get("gpu", 0)
        if gpu != 1:
            yield (
                ("taskRoles", role, "resourcePerInstance", "gpu"),
                (f"a role with a GPU share asks for gpu: 1, not {gpu!r}"),
                "set resourcePerInstance.gpu to 1 (the share is of that one GPU)",
            )


def gpu_shares(extras: Mapping[str, Any] | None) -> dict[str, GpuShare]:
    """The share of each shared task role, read from validated extras (roles without one are absent)."""
    section = _mapping(_mapping(extras).get(EXTRAS_KEY))
    out: dict[str, GpuShare] = {}
    for role, spec in _mapping(section.get("taskRoles")).items():
        spec = _mapping(spec)
        milli, memory = spec.get("gpuMilli"), spec.get("gpuMemoryMiB")
        if isinstance(milli, int) and _whole(milli) and 1 <= milli < MILLI:
            out[str(role)] = GpuShare(milli, memory if isinstance(memory, int) and _whole(memory) else None)
    return out
