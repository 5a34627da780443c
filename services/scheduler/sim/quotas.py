"""VC quotas for a simulation: read from a file, made of whole nodes, and turned into clusters.

A quota file is a CSV with the header `vc,gpus`: one row per VC, the GPUs it is guaranteed.
The quotas must fit the cluster together. Each VC's GPUs are then made of whole nodes, the
same mix of node shapes as the cluster (a VC of a tenth of the GPUs gets a tenth of each shape,
largest remainders rounding), or, given the VCs' demand, shaped to it (`split_nodes`). Either
way, a VC whose largest job needs more nodes of the biggest shape than its share gets them,
trading smaller nodes with the VC that has the most big nodes to spare. Whole nodes are what a
tenant's private cluster would be made of, so the same split gives the HiveD config of the
shared cluster (one VC cell per node), each VC's private cluster and the GPU quotas of the
quota baseline: every arm of an experiment has the same GPUs per VC.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from services.scheduler.core.hived import config_from_nodes, leaf_type_of
from services.scheduler.core.placements import NodeInventory
from services.scheduler.sim.traces import SimCluster, SimError, SimPod, _rows

Shape = tuple[str, int]  # (leaf cell type, GPUs per node)


def read_quotas(path: Path) -> dict[str, int]:
    """VC -> GPUs from a `vc,gpus` CSV; errors name the line and how to fix it."""
    header, rows = _rows(path)
    columns = [h.lower() for h in header]
    if columns[:2] != ["vc", "gpus"]:
        raise SimError(f"{path}: a quota file is a CSV with the header vc,gpus (found {','.join(header)})")
    quotas: dict[str, int] = {}
    for line, row in enumerate(rows, start=2):
        vc, raw = row.get(header[0], ""), row.get(header[1], "")
        if not vc:
            raise SimError(f"{path}:{line}: no VC name in column vc; name the VC or drop the row")
        try:
            gpus = int(raw)
        except ValueError as err:
            raise SimError(f"{path}:{line}: gpus {raw!r} of VC {vc} is not a whole number") from err
        if gpus <= 0:
            raise SimError(f"{path}:{line}: VC {vc} has {gpus} GPUs; a quota must be at least 1")
        if vc in quotas:
            raise SimError(f"{path}:{line}: VC {vc} is listed twice; keep one row per VC")
        quotas[vc] = gpus
    if not quotas:
        raise SimError(f"{path}: no VC listed; add rows of vc,gpus")
    return quotas


def check_quotas(quotas: dict[str, int], nodes: list[NodeInventory], where: str = "quotas") -> None:
    total = sum(n.gpus for n in nodes if n.gpus > 0)
    asked = sum(quotas.values())
    if asked > total:
        biggest = max(quotas, key=lambda vc: quotas[vc])
        raise SimError(
            f"{where}: the VC quotas add up to {asked} GPUs but the cluster has {total}; lower them "
            f"(the largest is {biggest} with {quotas[biggest]})"
        )


def largest_jobs(pods: Iterable[SimPod]) -> dict[str, int]:
    """VC -> GPUs of its largest job."""
    out: dict[str, int] = {}
    for p in pods:
        out[p.vc] = max(out.get(p.vc, 0), p.gpus)
    return out


def demand_by_size(pods: Iterable[SimPod]) -> dict[str, dict[int, float]]:
    """VC -> job GPUs -> GPU-hours the trace asks for."""
    out: dict[str, dict[int, float]] = {}
    for p in pods:
        by_size = out.setdefault(p.vc, {})
        by_size[p.gpus] = by_size.get(p.gpus, 0.0) + p.gpus * p.duration / 3600
    return out


def _largest_remainder(targets: dict[str, float], total: int) -> dict[str, int]:
    out = {k: math.floor(v) for k, v in targets.items()}
    left = min(total, round(sum(targets.values()))) - sum(out.values())
    for k in sorted(targets, key=lambda k: (out[k] - targets[k], k))[: max(0, left)]:
        out[k] += 1
    return out


def _capped_shares(weights: dict[str, float], caps: dict[str, int], total: int) -> dict[str, int]:
    """`total` nodes split in proportion to `weights`, no VC above its cap (the excess goes to the rest)."""
    share: dict[str, float] = {}
    open_ = {k for k, w in weights.items() if w > 0 and caps[k] > 0}
    left = float(min(total, sum(caps[k] for k in open_)))
    while open_ and left > 1e-9:
        whole = sum(weights[k] for k in open_)
        over = {k for k in open_ if share.get(k, 0.0) + left * weights[k] / whole >= caps[k]}
        if not over:
            for k in open_:
                share[k] = share.get(k, 0.0) + left * weights[k] / whole
            break
        for k in over:
            left -= caps[k] - share.get(k, 0.0)
            share[k] = float(caps[k])
        open_ -= over
    out = _largest_remainder({k: share.get(k, 0.0) for k in weights}, total)
    return {k: min(v, caps[k]) for k, v in out.items()}


def split_nodes(
    quotas: dict[str, int],
    nodes: list[NodeInventory],
    largest: dict[str, int] | None = None,
    demand: dict[str, dict[int, float]] | None = None,
) -> dict[str, list[NodeInventory]]:
    """Each VC's whole nodes (see the module's text).

    With `demand` (VC -> job GPUs -> GPU-hours), nodes of each smaller shape go to the VCs in
    proportion to their quota times the part of their demand those nodes can run (jobs no larger
    than a node), and each VC's quota is completed with nodes of the biggest shape: a tenant whose
    jobs all need 8 GPUs is not given 2-GPU machines it cannot use.
    """
    check_quotas(quotas, nodes)
    by_shape: dict[Shape, list[NodeInventory]] = {}
    for n in nodes:
        if n.gpus > 0:
            by_shape.setdefault((leaf_type_of(n.gpu_model), n.gpus), []).append(n)
    total = sum(n.gpus for ns in by_shape.values() for n in ns)
    shapes = sorted(by_shape, key=lambda s: (-s[1], s[0]))
    if demand:
        counts: dict[Shape, dict[str, int]] = {}
        rest = dict(quotas)
        for s in sorted(shapes[1:], key=lambda s: (s[1], s[0])):
            weights = {}
            for vc, q in quotas.items():
                by_size = demand.get(vc, {})
                whole = sum(by_size.values()) or 1.0
                weights[vc] = q * sum(h for g, h in by_size.items() if g <= s[1]) / whole
            caps = {vc: rest[vc] // s[1] for vc in quotas}
            counts[s] = _capped_shares(weights, caps, len(by_shape[s]))
            for vc in quotas:
                rest[vc] -= counts[s][vc] * s[1]
        biggest = shapes[0]
        counts[biggest] = _capped_shares(
            {vc: rest[vc] / biggest[1] for vc in quotas},
            {vc: max(0, round(rest[vc] / biggest[1])) for vc in quotas},
            len(by_shape[biggest]),
        )
    else:
        counts = {
            s: _largest_remainder(
                {vc: q * len(by_shape[s]) / total for vc, q in quotas.items()}, len(by_shape[s])
            )
            for s in shapes
        }
    big = shapes[0]
    smaller = max((s[1] for s in shapes[1:]), default=0)
    for vc, size in sorted((largest or {}).items()):
        if vc not in quotas or size <= smaller:
            continue
        need = math.ceil(size / big[1])
        while counts[big][vc] < need:
            donors = [u for u in quotas if u != vc and counts[big][u] > _big_need(u, largest, big, smaller)]
            if not donors:
                raise SimError(
                    f"VC {vc}'s largest job needs {need} nodes of {big[1]} GPUs and no other VC can spare "
                    f"one; raise its quota to at least {need * big[1]} GPUs"
                )
            donor = max(donors, key=lambda u: (counts[big][u], u))
            counts[big][donor] -= 1
            counts[big][vc] += 1
            # The donor is paid back in smaller nodes, as many GPUs as the VC has of them.
            owed = big[1]
            for s in shapes[1:]:
                while owed >= s[1] and counts[s][vc] > 0:
                    counts[s][vc] -= 1
                    counts[s][donor] += 1
                    owed -= s[1]
    out: dict[str, list[NodeInventory]] = {vc: [] for vc in quotas}
    for s in shapes:
        members = iter(by_shape[s])
        for vc in quotas:
            out[vc].extend(next(members) for _ in range(counts[s][vc]))
    return out


def _big_need(vc: str, largest: dict[str, int] | None, big: Shape, smaller: int) -> int:
    size = (largest or {}).get(vc, 0)
    return math.ceil(size / big[1]) if size > smaller else 0


def _node_type(n: NodeInventory) -> str:
    # The node-level cell type config_from_nodes names for this shape (defaults.py).
    return f"{leaf_type_of(n.gpu_model)}-NODE{n.gpus}"


def shared_cluster(nodes: list[NodeInventory], split: dict[str, list[NodeInventory]]) -> SimCluster:
    """The whole cluster under HiveD, each VC holding its nodes as node-level virtual cells."""
    doc: dict[str, Any] = config_from_nodes(nodes, 0)
    vcs: dict[str, Any] = {}
    for vc, members in split.items():
        cells: dict[str, int] = {}
        for n in members:
            cells[_node_type(n)] = cells.get(_node_type(n), 0) + 1
        vcs[vc] = {"virtualCells": [{"cellType": t, "cellNumber": c} for t, c in sorted(cells.items())]}
    doc["virtualClusters"] = vcs
    quotas = {vc: sum(n.gpus for n in members) for vc, members in split.items()}
    return SimCluster(doc, nodes, quotas)


def private_cluster(vc: str, members: list[NodeInventory]) -> SimCluster:
    """One VC alone on its own nodes: what its quota would buy as a private cluster."""
    if not members:
        raise SimError(f"VC {vc} has no whole node of its own; raise its quota to at least one node's GPUs")
    return SimCluster(config_from_nodes(members, 0, {vc: 1.0}), members, {vc: sum(n.gpus for n in members)})
