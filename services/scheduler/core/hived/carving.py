"""Cells as amounts: how many devices each VC holds on each chain, and the cells that make them.

An admin thinks "VC team gets 4 GPUs"; HiveD wants virtual cells of its cell types. Here a
VC's cells on a chain (a top cell type with its levels) are counted in devices, and an amount is
written back as the fewest cells (largest levels first: 5 devices of an 8-GPU node chain are a
4-GPU cell and a single GPU). Every level of a chain holds a whole number of the level below,
so cell sizes divide each other and any set of amounts whose sum per chain is at most the
chain's devices can be packed into its physical cells: VC changes made of amounts never ask
HiveD for the impossible.

Cells derived from the nodes (no HiveD config) change when nodes do; a VC an admin set there is
kept as GPUs per leaf (SKU) type and carved anew from the cells of each node change
(`split_by_type`): the admin's VCs take their amounts, the default VC everything else, and the
notes say what changed since the VCs were set.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.scheduler.core.hived.config import cell_types, parse_config
from services.scheduler.core.hived.defaults import DEFAULT_VC


@dataclass(frozen=True)
class Chain:
    """One chain of cells: its name (the top cell type), leaf type and devices in the cluster."""

    name: str
    leaf_type: str
    devices: int
    levels: tuple[tuple[str, int], ...]  # (cell type, devices in one such cell), largest first

    def cell_name(self, cell_type: str) -> str:
        """The name a VC's virtualCells give a cell type of this chain (`chain.type`)."""
        return cell_type if cell_type == self.name else f"{self.name}.{cell_type}"

    def cells(self, devices: int) -> list[dict[str, Any]]:
        """`devices` as the fewest cells of this chain, largest first."""
        out: list[dict[str, Any]] = []
        left = devices
        for cell_type, size in self.levels:
            count, left = divmod(left, size)
            if count:
                out.append({"cellType": self.cell_name(cell_type), "cellNumber": count})
        return out

    def size_of(self, cell_type: str) -> int | None:
        """Devices in one cell of `cell_type` (plain, or `chain.type`), None if not of this chain."""
        chain, _, inner = cell_type.rpartition(".")
        if chain and chain != self.name:
            return None
        return dict(self.levels).get(inner or cell_type)


def chains_of(doc: Mapping[str, Any] | None) -> dict[str, Chain]:
    """Every chain of a HiveD config's physical cluster (none without one)."""
    if not doc or not isinstance(doc.get("physicalCluster"), Mapping):
        return {}
    physical = doc["physicalCluster"]
    # Counted from the cell types alone: building every cell (parse_config) costs seconds at
    # 100,000 GPUs, and every level holds a whole number of the one below.
    types = cell_types(dict(physical.get("cellTypes") or {}))
    devices: dict[str, int] = {}
    for spec in physical.get("physicalCells") or []:
        name = str((spec or {}).get("cellType", ""))
        if name in types:
            devices[name] = devices.get(name, 0) + types[name].leaf_num
    out: dict[str, Chain] = {}
    for chain, count in devices.items():
        levels: list[tuple[str, int]] = []
        name = chain
        while name:
            levels.append((name, types[name].leaf_num))
            name = types[name].child_type
        out[chain] = Chain(chain, types[chain].leaf_type, count, tuple(levels))
    return out


def vc_devices(doc: Mapping[str, Any] | None, chains: Mapping[str, Chain]) -> dict[str, dict[str, int]]:
    """Devices each VC's virtualCells hold per chain (pinned cells are counted by `pinned_devices`)."""
    out: dict[str, dict[str, int]] = {}
    for vc, spec in ((doc or {}).get("virtualClusters") or {}).items():
        held = out.setdefault(str(vc), {})
        for cell in (spec or {}).get("virtualCells") or []:
            name = str(cell.get("cellType", ""))
            chain = chains.get(name.split(".")[0])
            size = chain.size_of(name) if chain is not None else None
            if chain is not None and size is not None:
                held[chain.name] = held.get(chain.name, 0) + size * int(cell.get("cellNumber", 0))
    return out


def pinned_devices(doc: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """Devices each VC's pinned cells hold per chain."""
    if not doc or not isinstance(doc.get("physicalCluster"), Mapping):
        return {}
    parsed = parse_config(dict(doc))
    out: dict[str, dict[str, int]] = {}
    for vc, pins in parsed.vc_pinned_physical.items():
        for cell in pins.values():
            held = out.setdefault(vc, {})
            held[cell.chain] = held.get(cell.chain, 0) + cell.leaf_num
    return out


def by_type(amounts: Mapping[str, int], chains: Mapping[str, Chain]) -> dict[str, int]:
    """Devices per chain summed per leaf type."""
    out: dict[str, int] = {}
    for chain, devices in amounts.items():
        if chain in chains and devices:
            leaf = chains[chain].leaf_type
            out[leaf] = out.get(leaf, 0) + devices
    return out


def type_totals(chains: Mapping[str, Chain]) -> dict[str, int]:
    return by_type({name: chain.devices for name, chain in chains.items()}, chains)


def split_by_type(
    shape: dict[str, Any],
    vcs: Mapping[str, Mapping[str, int]],
    declared: Mapping[str, int] | None,
) -> tuple[dict[str, Any], list[str]]:
    """A derived config (every cell in the default VC) with the admin's VCs carved out of it.

    Each VC but the default takes its GPUs of each leaf type from that type's chains, in the
    order of its name; the default VC holds the rest. The notes say where a VC got less than it
    was set to (its nodes are gone) and how many GPUs the nodes added since the VCs were set
    (`declared`: GPUs per type then) went to the default VC.
    """
    chains = chains_of(shape)
    left = {name: chain.devices for name, chain in chains.items()}
    carved: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    for vc in sorted(v for v in vcs if v != DEFAULT_VC):
        carved[vc] = {}
        for leaf, wanted in sorted(vcs[vc].items()):
            need = wanted
            for chain in (c for c in chains.values() if c.leaf_type == leaf):
                take = min(need, left[chain.name])
                if take:
                    carved[vc][chain.name] = carved[vc].get(chain.name, 0) + take
                    left[chain.name] -= take
                    need -= take
            if need:
                got = wanted - need
                notes.append(
                    f"VC {vc} is set to {wanted} {leaf} GPUs, but the nodes have only {got} of them left "
                    "for it: it holds those until the nodes are back"
                )
    doc = copy.deepcopy(shape)
    vcs_doc: dict[str, Any] = {
        DEFAULT_VC: {"virtualCells": [c for name, n in left.items() for c in chains[name].cells(n)]}
    }
    for vc, amounts in carved.items():
        vcs_doc[vc] = {"virtualCells": [c for name, n in amounts.items() for c in chains[name].cells(n)]}
    doc["virtualClusters"] = vcs_doc
    if declared is not None:
        for leaf, total in sorted(type_totals(chains).items()):
            before = int(declared.get(leaf, 0))
            if total > before:
                notes.append(
                    f"the nodes have {total - before} {leaf} GPUs more than when the VCs were set "
                    f"({before}): they went to VC {DEFAULT_VC}"
                )
    return doc, notes
