"""Read a HiveD cluster description (its own YAML layout, already parsed) into cells.

The layout is HiveD's: `physicalCluster` with `skuTypes`, `cellTypes` (childCellType,
childCellNumber, isNodeLevel) and `physicalCells` (cellType, cellAddress, cellChildren,
pinnedCellId), and `virtualClusters` with `virtualCells` ("chain.type" names and counts) and
`pinnedCells`. Mistakes are reported as `HivedConfigError` naming the field and the fix, because
the people writing these files are cluster admins, not developers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.scheduler.core.gpu_share import DEFAULT_POLICY, POLICIES
from services.scheduler.core.hived.cells import (
    ChainCellList,
    PhysicalCell,
    VirtualCell,
    new_chain_cell_list,
)


class HivedConfigError(ValueError):
    """The cluster description cannot be used as written; the text says where and how to fix it."""


@dataclass
class CellTypeInfo:
    name: str
    level: int
    child_type: str
    child_number: int
    has_node: bool
    multi_nodes: bool
    leaf_type: str
    leaf_num: int


@dataclass
class SkuInfo:
    gpu: int = 1
    cpu: float = 0.0
    memory_mb: int = 0


@dataclass
class ParsedConfig:
    cell_types: dict[str, CellTypeInfo]
    skus: dict[str, SkuInfo]
    full_cells: dict[str, ChainCellList]
    free_cells: dict[str, ChainCellList]
    pinned_physical: dict[str, PhysicalCell]
    vc_names: list[str]
    vc_free_cell_num: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    vc_full: dict[str, dict[str, ChainCellList]] = field(default_factory=dict)
    vc_preassigned: dict[str, dict[str, ChainCellList]] = field(default_factory=dict)
    vc_pinned: dict[str, dict[str, ChainCellList]] = field(default_factory=dict)
    vc_pinned_physical: dict[str, dict[str, PhysicalCell]] = field(default_factory=dict)
    leaf_type_chains: dict[str, list[str]] = field(default_factory=dict)
    level_types: dict[str, dict[int, str]] = field(default_factory=dict)
    level_leaf_num: dict[str, dict[int, int]] = field(default_factory=dict)
    # How shared GPUs are placed among a VC's hosts (core/gpu_share.py's policies), per cluster.
    sharing_policy: str = DEFAULT_POLICY


def _memory_mb(value: Any) -> int:
    text = str(value).strip()
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "K": 1 / 1000, "M": 1, "G": 1000}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text) / (1024 * 1024)) if text else 0


def cell_types(raw: dict[str, Any]) -> dict[str, CellTypeInfo]:
    out: dict[str, CellTypeInfo] = {}

    def add(name: str, trail: tuple[str, ...]) -> CellTypeInfo:
        if name in out:
            return out[name]
        if name in trail:
            raise HivedConfigError(
                f"physicalCluster.cellTypes: cell type {name} contains itself; fix childCellType"
            )
        spec = raw.get(name)
        if spec is None:
            out[name] = CellTypeInfo(name, 1, "", 0, False, False, name, 1)
            return out[name]
        if not isinstance(spec, dict) or "childCellType" not in spec:
            raise HivedConfigError(
                f"physicalCluster.cellTypes.{name}: needs childCellType and childCellNumber"
            )
        number = int(spec.get("childCellNumber") or 0)
        if number <= 0:
            raise HivedConfigError(
                f"physicalCluster.cellTypes.{name}.childCellNumber: must be a positive number"
            )
        child = add(str(spec["childCellType"]), (*trail, name))
        out[name] = CellTypeInfo(
            name=name,
            level=child.level + 1,
            child_type=child.name,
            child_number=number,
            has_node=child.has_node or bool(spec.get("isNodeLevel", False)),
            multi_nodes=child.has_node,
            leaf_type=child.leaf_type,
            leaf_num=child.leaf_num * number,
        )
        return out[name]

    for name in raw:
        add(str(name), ())
    return out


class _PhysicalBuilder:
    def __init__(self, types: dict[str, CellTypeInfo]) -> None:
        self.types = types
        self.full: dict[str, ChainCellList] = {}
        self.pinned: dict[str, PhysicalCell] = {}
        self.leaf_counter: dict[tuple[str, str], int] = {}
        self.chain = ""

    def build(
        self, spec: dict[str, Any], type_name: str, node: str, address: str, where: str
    ) -> PhysicalCell:
        info = self.types[type_name]
        if info.has_node and not info.multi_nodes:
            node = address.split("/")[-1]
        cell = PhysicalCell(
            self.chain,
            info.level,
            type_name,
            address,
            info.leaf_num,
            info.has_node,
            info.has_node and not info.multi_nodes,
        )
        self.full.setdefault(self.chain, {}).setdefault(info.level, []).append(cell)
        pinned = spec.get("pinnedCellId")
        if pinned:
            if str(pinned) in self.pinned:
                raise HivedConfigError(
                    f"{where}.pinnedCellId: {pinned} is used twice; pinned ids must be unique"
                )
            self.pinned[str(pinned)] = cell
            cell.pinned = True
        if info.level == 1:
            cell.nodes = [node]
            cell.leaf_indices = [int(address.split("/")[-1])]
            return cell
        children_specs = spec.get("cellChildren") or [{} for _ in range(info.child_number)]
        if len(children_specs) != info.child_number:
            raise HivedConfigError(
                f"{where}.cellChildren: cell type {type_name} has {info.child_number} children, "
                f"{len(children_specs)} given"
            )
        child_info = self.types[info.child_type]
        for i, child_spec in enumerate(children_specs):
            child_spec = child_spec or {}
            given = child_spec.get("cellAddress")
            if given is not None:
                child_address = str(given)
            elif child_info.has_node and not child_info.multi_nodes:
                raise HivedConfigError(
                    f"{where}.cellChildren[{i}].cellAddress: a node-level cell needs its node name"
                )
            elif child_info.level == 1:
                child_address = str(self.leaf_counter.get((self.chain, node), 0))
            else:
                child_address = f"{address}/{i}"
            if child_info.level == 1:
                self.leaf_counter[(self.chain, node)] = max(
                    self.leaf_counter.get((self.chain, node), 0), int(child_address) + 1
                )
            child = self.build(child_spec, info.child_type, node, child_address, f"{where}.cellChildren[{i}]")
            child.parent = cell
            cell.children.append(child)
        if info.multi_nodes:
            cell.nodes = [n for c in cell.children for n in c.nodes]
            cell.leaf_indices = [-1]
        else:
            cell.nodes = [node]
            cell.leaf_indices = [i for c in cell.children for i in c.leaf_indices]
        return cell


def _build_virtual(
    cfg: ParsedConfig, vc: str, chain: str, type_name: str, address: str, target: ChainCellList
) -> VirtualCell:
    root: VirtualCell | None = None

    def build(name: str, addr: str) -> VirtualCell:
        nonlocal root
        info = cfg.cell_types[name]
        cell = VirtualCell(
            vc,
            chain,
            info.level,
            name,
            addr,
            info.leaf_num,
            info.has_node,
            info.has_node and not info.multi_nodes,
        )
        target.setdefault(info.level, []).append(cell)
        if root is None:
            root = cell
        cell.preassigned = root
        if info.level == 1:
            return cell
        parts = addr.split("/")
        offset = 0 if len(parts) == 2 else int(parts[-1]) * info.child_number
        for i in range(info.child_number):
            child = build(info.child_type, f"{addr}/{offset + i}")
            child.parent = cell
            cell.children.append(child)
        return cell

    return build(type_name, address)


def parse_config(doc: dict[str, Any]) -> ParsedConfig:
    """Build the physical and virtual cells of a HiveD config (the whole file or its body)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("physicalCluster"), dict):
        raise HivedConfigError(
            "physicalCluster: missing; a HiveD config needs physicalCluster and virtualClusters"
        )
    pc = doc["physicalCluster"]
    types = cell_types(dict(pc.get("cellTypes") or {}))
    skus = {
        str(name): SkuInfo(int(s.get("gpu", 1)), float(s.get("cpu", 0)), _memory_mb(s.get("memory", 0)))
        for name, s in dict(pc.get("skuTypes") or {}).items()
        if isinstance(s, dict)
    }
    builder = _PhysicalBuilder(types)
    free: dict[str, ChainCellList] = {}
    for i, spec in enumerate(pc.get("physicalCells") or []):
        where = f"physicalCluster.physicalCells[{i}]"
        type_name = str((spec or {}).get("cellType", ""))
        if type_name not in types:
            raise HivedConfigError(
                f"{where}.cellType: {type_name!r} is not defined in physicalCluster.cellTypes"
            )
        info = types[type_name]
        if not info.has_node:
            raise HivedConfigError(
                f"{where}.cellType: a top-level cell must be a node or bigger ({type_name} is not)"
            )
        builder.chain = type_name
        address = str(spec.get("cellAddress", i))
        top = builder.build(spec, type_name, "", address, where)
        free.setdefault(type_name, new_chain_cell_list(info.level))[info.level].append(top)
    cfg = ParsedConfig(types, skus, builder.full, free, builder.pinned, [])
    for chain, ccl in builder.full.items():
        info = types[chain]
        for level in range(1, info.level + 1):
            ccl.setdefault(level, [])
        cfg.leaf_type_chains.setdefault(info.leaf_type, []).append(chain)
        levels: dict[int, str] = {}
        name = chain
        while name:
            levels[types[name].level] = name
            name = types[name].child_type
        cfg.level_types[chain] = levels
        cfg.level_leaf_num[chain] = {lvl: types[t].leaf_num for lvl, t in levels.items()}
    for chains in cfg.leaf_type_chains.values():
        chains.sort(reverse=True)
    _parse_vcs(cfg, dict(doc.get("virtualClusters") or {}))
    policy = doc.get("sharingPolicy", DEFAULT_POLICY)
    if policy not in POLICIES:
        raise HivedConfigError(
            f"sharingPolicy: {policy!r} is not a sharing policy; choose one of {', '.join(POLICIES)} "
            f"(or leave it out for {DEFAULT_POLICY})"
        )
    cfg.sharing_policy = str(policy)
    return cfg


def _parse_vcs(cfg: ParsedConfig, vcs: dict[str, Any]) -> None:
    used_pins: dict[str, str] = {}
    for vc_key, spec in vcs.items():
        vc = str(vc_key)
        cfg.vc_names.append(vc)
        free_num: dict[str, dict[int, int]] = {}
        full: dict[str, ChainCellList] = {}
        pre: dict[str, ChainCellList] = {}
        number = 0
        for j, vcell in enumerate((spec or {}).get("virtualCells") or []):
            where = f"virtualClusters.{vc}.virtualCells[{j}]"
            parts = str(vcell.get("cellType", "")).split(".")
            chain, root = parts[0], parts[-1]
            if chain not in cfg.full_cells:
                raise HivedConfigError(
                    f"{where}.cellType: chain {chain} is not a cellType used in physicalCells"
                )
            if root not in cfg.level_types[chain].values():
                raise HivedConfigError(f"{where}.cellType: {root} is not part of chain {chain}")
            count = int(vcell.get("cellNumber", 0))
            level = cfg.cell_types[root].level
            free_num.setdefault(chain, {}).setdefault(level, 0)
            free_num[chain][level] += count
            for _ in range(count):
                target = full.setdefault(chain, {})
                top = _build_virtual(cfg, vc, chain, root, f"{vc}/{number}", target)
                pre.setdefault(chain, {}).setdefault(level, []).append(top)
                number += 1
        pinned: dict[str, ChainCellList] = {}
        pinned_phys: dict[str, PhysicalCell] = {}
        for j, pin in enumerate((spec or {}).get("pinnedCells") or []):
            pid = str(pin.get("pinnedCellId", ""))
            where = f"virtualClusters.{vc}.pinnedCells[{j}].pinnedCellId"
            if pid not in cfg.pinned_physical:
                raise HivedConfigError(f"{where}: {pid!r} is not a pinnedCellId in physicalCells")
            if pid in used_pins:
                raise HivedConfigError(f"{where}: {pid} is already pinned to VC {used_pins[pid]}")
            used_pins[pid] = vc
            pc = cfg.pinned_physical[pid]
            pinned_phys[pid] = pc
            free_num.setdefault(pc.chain, {}).setdefault(pc.level, 0)
            free_num[pc.chain][pc.level] += 1
            pinned[pid] = {}
            _build_virtual(cfg, vc, pc.chain, pc.cell_type, f"{vc}/{number}", pinned[pid])
            number += 1
        for ccl in full.values():
            for level in range(1, max(ccl) + 1):
                ccl.setdefault(level, [])
        cfg.vc_free_cell_num[vc] = free_num
        cfg.vc_full[vc] = full
        cfg.vc_preassigned[vc] = pre
        cfg.vc_pinned[vc] = pinned
        cfg.vc_pinned_physical[vc] = pinned_phys
