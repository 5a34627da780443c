"""Derive a HiveD cell hierarchy from a plain node list, for clusters without a HiveD config.

Without an admin-written config the platform still wants gang and topology awareness, so the
nodes are described the way HiveD's examples do: the GPU model is the leaf (SKU) type, a node is
the node-level cell, power-of-two GPU counts are split in halves (a 2-GPU and 4-GPU level for
an 8-GPU node, matching PCIe switch and socket buddies), and nodes of the same shape can be
grouped into racks. One VC owns everything unless VC shares are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.scheduler.core.placements import NodeInventory

DEFAULT_VC = "default"


def leaf_type_of(model: str | None) -> str:
    return (model or "GPU").strip() or "GPU"


def _node_type(leaf: str, gpus: int, types: dict[str, Any]) -> str:
    child, size = leaf, 1
    if gpus & (gpus - 1) == 0:
        while size * 2 < gpus:
            name = f"{leaf}-{size * 2}GPU"
            types[name] = {"childCellType": child, "childCellNumber": 2}
            child, size = name, size * 2
        number = gpus // size
    else:
        number = gpus
    node = f"{leaf}-NODE{gpus}"
    types[node] = {"childCellType": child, "childCellNumber": number, "isNodeLevel": True}
    return node


def config_from_nodes(
    nodes: Sequence[NodeInventory],
    rack_size: int = 0,
    vc_shares: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A HiveD config (as parsed YAML) for `nodes`; CPU-only nodes are left out of the cells.

    `vc_shares` splits every chain's top cells between VCs by share (the rest goes to the last
    VC); by default a single "default" VC holds all cells.
    """
    types: dict[str, Any] = {}
    by_shape: dict[tuple[str, int], list[NodeInventory]] = {}
    for n in nodes:
        if n.gpus > 0:
            by_shape.setdefault((leaf_type_of(n.gpu_model), n.gpus), []).append(n)
    physical: list[dict[str, Any]] = []
    tops: dict[str, int] = {}
    for (leaf, gpus), members in sorted(by_shape.items()):
        node_type = _node_type(leaf, gpus, types)
        full_racks = len(members) // rack_size if rack_size > 1 else 0
        if full_racks:
            rack_type = f"{leaf}-RACK{rack_size}x{gpus}"
            types[rack_type] = {"childCellType": node_type, "childCellNumber": rack_size}
            for r in range(full_racks):
                chunk = members[r * rack_size : (r + 1) * rack_size]
                physical.append(
                    {"cellType": rack_type, "cellChildren": [{"cellAddress": m.name} for m in chunk]}
                )
            tops[rack_type] = full_racks
        for m in members[full_racks * rack_size if full_racks else 0 :]:
            physical.append({"cellType": node_type, "cellAddress": m.name})
            tops[node_type] = tops.get(node_type, 0) + 1
    shares = vc_shares or {DEFAULT_VC: 1.0}
    vcs: dict[str, Any] = {name: {"virtualCells": []} for name in shares}
    names = list(shares)
    total_share = sum(shares.values()) or 1.0
    for top, count in tops.items():
        left = count
        for i, name in enumerate(names):
            take = left if i == len(names) - 1 else min(left, int(count * shares[name] / total_share))
            left -= take
            if take:
                vcs[name]["virtualCells"].append({"cellType": top, "cellNumber": take})
    return {"physicalCluster": {"cellTypes": types, "physicalCells": physical}, "virtualClusters": vcs}
