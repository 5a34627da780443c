"""Shared GPUs inside HiveD's model: fractions of a leaf cell that HiveD holds whole for one VC.

HiveD hands out whole leaf cells (devices); a VC's guarantee is counted in them. A task that asks
for a share of one GPU therefore never takes a device on its own: it lands on a *host*, a leaf
cell held through HiveD by a one-pod affinity group of its VC at its priority, and shares that
device only with tasks of the same pool (VC, priority, SKU type and pinned cell). So:

- the VC's guarantee stays in whole cells, and sharing can never take a VC past its quota: every
  thousandth it hands out lies inside a leaf cell HiveD already counts against that VC (or, for
  opportunistic work, on a free cell as HiveD allows opportunistic pods anywhere);
- tasks of different VCs, or of different priorities, never share a device;
- a host is an ordinary HiveD group: higher-priority work preempts it like any other, and its
  victims are all the jobs that have a share on it; a host is given back to HiveD the moment its
  last tenant leaves, so preemption (or any end) frees exactly what each victim held.

Which host (and device) a share goes to is decided by the platform's sharing policy
(`gpu_share.SharePlacer`, fragpack by default) over the pool's hosts; only when no host has room
does the share open a new one, placed by HiveD itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.scheduler.core.gpu_share import (
    DEFAULT_POLICY,
    MAX_GPUS,
    MILLI,
    ShareDemand,
    ShareNode,
    SharePlacer,
    typical_mix,
)
from services.scheduler.core.hived.groups import BindInfo, PodSpec

# (VC, priority, SKU type, pinned cell): the tasks that may share one host's device.
PoolKey = tuple[str, int, str, str]
# (job id, role, index): one tenant task.
TenantKey = tuple[str, str, int]


@dataclass
class ShareHost:
    """One leaf cell HiveD holds whole for a pool, and the shares placed on it."""

    name: str
    pool: PoolKey
    node: str
    device: int
    spec: PodSpec
    info: BindInfo
    tenants: dict[TenantKey, int] = field(default_factory=dict)

    @property
    def used_milli(self) -> int:
        return sum(self.tenants.values())

    @property
    def free_milli(self) -> int:
        return MILLI - self.used_milli


@dataclass(frozen=True)
class NodeRoom:
    """What a node has left for another task: CPU (cores) and memory (MB)."""

    cpu: int
    memory_mb: int


class ShareHosts:
    """Every host and its tenants; pure bookkeeping plus the choice among a pool's hosts."""

    def __init__(self, policy: str = DEFAULT_POLICY) -> None:
        self.policy = policy
        self.hosts: dict[str, ShareHost] = {}
        self._at: dict[tuple[str, int], str] = {}  # (node, device) -> host name

    def host_at(self, node: str, device: int) -> ShareHost | None:
        name = self._at.get((node, device))
        return self.hosts.get(name) if name is not None else None

    def pool(self, key: PoolKey) -> list[ShareHost]:
        return [h for h in self.hosts.values() if h.pool == key]

    def add_host(self, host: ShareHost) -> None:
        self.hosts[host.name] = host
        self._at[(host.node, host.device)] = host.name

    def remove_host(self, host: ShareHost) -> None:
        self.hosts.pop(host.name, None)
        if self._at.get((host.node, host.device)) == host.name:
            del self._at[(host.node, host.device)]

    def jobs_on(self, name: str) -> set[str]:
        host = self.hosts.get(name)
        return {job for job, _, _ in host.tenants} if host is not None else set()

    def choose(
        self,
        pool: PoolKey,
        milli: int,
        cpu: int,
        memory_mb: int,
        rooms: dict[str, NodeRoom],
        mix: list[ShareDemand],
    ) -> ShareHost | None:
        """The pool's host the sharing policy picks for a share, or None when none has room."""
        hosts = [h for h in self.pool(pool) if h.free_milli >= milli and h.node in rooms]
        if not hosts:
            return None
        # One placer node per node (more than MAX_GPUS hosts on one node: several), whose devices
        # are that node's hosts of the pool with what they have free: the only devices a share may use.
        slots: list[list[ShareHost]] = []
        owner: list[str] = []
        for h in sorted(hosts, key=lambda h: (h.node, h.device)):
            if not slots or owner[-1] != h.node or len(slots[-1]) == MAX_GPUS:
                slots.append([])
                owner.append(h.node)
            slots[-1].append(h)
        nodes = [
            ShareNode(f"{n}#{i}", rooms[n].cpu * 1000, rooms[n].memory_mb, len(group))
            for i, (n, group) in enumerate(zip(owner, slots, strict=True))
        ]
        placer = SharePlacer(nodes, self.policy, typical_mix(mix))
        for i, group in enumerate(slots):
            for j, h in enumerate(group):
                placer.gpu[i, j] = h.free_milli
        binding = placer.choose(ShareDemand(cpu * 1000, memory_mb, 1, milli))
        if binding is None:
            return None
        return slots[binding.node][binding.devices[0]]


__all__ = ["NodeRoom", "PoolKey", "ShareHost", "ShareHosts", "TenantKey"]
