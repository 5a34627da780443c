"""VC administration in an admin's words: "VC team gets 4 GPUs", "remove VC team", "show me".

`pai vc set NAME --gpus N` (or `--cells TYPE=N,...`, `--cpu N --memory MB`) creates or resizes a
VC, and `pai vc remove NAME` removes one, without writing HiveD's cells by hand. GPUs are taken
from the default VC (and from cells no VC holds, first) and given back to it; a request that
does not fit is refused naming what is free and who holds the rest. The result is a new
`SchedulerConfig`, which goes through the same check as any other change (running jobs
re-added first, `--force` to harm them anyway). `config_in_force` is the document `pai vc config`
prints and the portal's editor starts from: re-sent as it is, it changes nothing.

Amounts are carved into cells by hived/carving.py. Where the cells are derived from the nodes,
VCs are kept as GPUs per leaf type, so they survive node changes; where an admin's HiveD config
gives the cells, the VC's and the default VC's virtualCells are rewritten and every other VC's
are left as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from libs.protocol.wording import counted
from services.scheduler.core.hived import DEFAULT_VC
from services.scheduler.core.hived.carving import Chain, chains_of, pinned_devices, type_totals, vc_devices
from services.scheduler.core.placements import NodeInventory
from services.scheduler.core.reconfigure import SchedulerConfig
from services.scheduler.core.user_limits import user_limits_document
from services.scheduler.core.vc_quotas import VcQuota, quotas_document

VC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# `/api/v2/virtual-clusters/config` is the config itself, so no VC may be called that.
RESERVED = frozenset({"config"})


class VcChangeError(ValueError):
    """The change cannot be made; the text says why and what would fit."""


@dataclass(frozen=True)
class VcRequest:
    """What `pai vc set` asks for one VC; fields left None are kept as they are."""

    gpus: int | None = None
    model: str | None = None  # the leaf (SKU) type the GPUs must be of
    cells: Mapping[str, int] | None = None  # cell type -> how many
    cpu: int | None = None
    memory_mb: int | None = None


def request_from(raw: Any) -> VcRequest:
    """A request's JSON body (`gpus`, `model`, `cells`, `cpu`, `memoryMB`), checked field by field."""
    if not isinstance(raw, Mapping):
        raise VcChangeError("the body must be a JSON object with gpus, cells, cpu or memoryMB")
    unknown = sorted(set(raw) - {"gpus", "model", "cells", "cpu", "memoryMB"})
    if unknown:
        raise VcChangeError(f"unknown field(s) {unknown}; use gpus (and model), cells, cpu and memoryMB")

    def count(name: str) -> int | None:
        value = raw.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise VcChangeError(f"{name}: must be a whole number, 0 or more, got {value!r}")
        return value

    cells = raw.get("cells")
    if cells is not None:
        if not isinstance(cells, Mapping) or not cells:
            raise VcChangeError('cells: must map cell types to counts, e.g. {"V100-NODE8": 1}')
        for name, n in cells.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise VcChangeError(f"cells.{name}: must be a whole number, 0 or more, got {n!r}")
    model = raw.get("model")
    request = VcRequest(count("gpus"), str(model) if model else None, cells, count("cpu"), count("memoryMB"))
    if request.gpus is not None and request.cells is not None:
        raise VcChangeError("give gpus or cells, not both")
    if all(v is None for v in (request.gpus, request.cells, request.cpu, request.memory_mb)):
        raise VcChangeError("say what the VC gets: gpus (N, and model), cells, or cpu and memoryMB")
    return request


def check_name(name: str) -> None:
    if not VC_NAME.match(name) or name in RESERVED:
        raise VcChangeError(
            f"{name!r} cannot name a VC: use letters, digits, '-' and '_' (up to 64, not 'config')"
        )


@dataclass(frozen=True)
class Change:
    config: SchedulerConfig
    message: str


def _holders(held: Mapping[str, Mapping[str, int]], skip: str) -> str:
    totals = {vc: sum(h.values()) for vc, h in held.items() if vc != skip}
    parts = [f"{vc} {n}" for vc, n in sorted(totals.items()) if n]
    return ", ".join(parts) or "none"


class _Cells:
    """The devices each VC holds per chain, in either kind of config, and how to write them back."""

    def __init__(self, config: SchedulerConfig, in_force: Mapping[str, Any] | None) -> None:
        self.config = config
        self.derived = config.hived is None
        doc = in_force if self.derived else config.hived
        self.chains: dict[str, Chain] = chains_of(doc)
        self.held = vc_devices(doc, self.chains)
        for vc, pins in pinned_devices(None if self.derived else doc).items():
            for chain, n in pins.items():
                self.held.setdefault(vc, {})[chain] = self.held.get(vc, {}).get(chain, 0) + n
        if self.derived:
            for vc in config.vcs or {}:
                self.held.setdefault(vc, {})
        used = {c: sum(h.get(c, 0) for h in self.held.values()) for c in self.chains}
        self.unassigned = {c: chain.devices - used[c] for c, chain in self.chains.items()}

    def available(self, name: str) -> dict[str, int]:
        """Per chain: what the VC may have, its own, the default VC's and the cells no VC holds."""
        own = self.held.get(name, {})
        default = self.held.get(DEFAULT_VC, {})
        return {
            c: max(0, self.unassigned[c]) + own.get(c, 0) + (default.get(c, 0) if name != DEFAULT_VC else 0)
            for c in self.chains
        }


def _pick(cells: _Cells, name: str, gpus: int, model: str | None) -> dict[str, int]:
    """Devices per chain for `gpus` GPUs: the VC's own chains first, then those with most to give."""
    available = cells.available(name)
    own = cells.held.get(name, {})
    order = sorted(
        (c for c in cells.chains if model is None or cells.chains[c].leaf_type == model),
        key=lambda c: (-own.get(c, 0), -available[c], c),
    )
    if model is not None and not order:
        types = sorted({chain.leaf_type for chain in cells.chains.values()})
        raise VcChangeError(f"the cluster has no {model} GPUs; its GPU types: {', '.join(types) or 'none'}")
    out: dict[str, int] = {}
    left = gpus
    for chain in order:
        take = min(left, available[chain])
        if take:
            out[chain] = take
            left -= take
    if left:
        kind = f"{model} " if model else ""
        if not cells.chains:
            raise VcChangeError(
                f"VC {name} cannot get {counted(gpus, kind + 'GPU')}: the cluster has no GPUs; give it CPU "
                f"and memory instead (`pai vc set {name} --cpu N --memory MB`)"
            )
        mine = sum(own.get(c, 0) for c in order)
        default = sum(cells.held.get(DEFAULT_VC, {}).get(c, 0) for c in order)
        nobody = sum(max(0, cells.unassigned[c]) for c in order)
        others = {vc: h for vc, h in cells.held.items() if vc not in (name, DEFAULT_VC)}
        raise VcChangeError(
            f"VC {name} cannot get {counted(gpus, kind + 'GPU')}; it may have at most "
            f"{mine + default + nobody}: its own {mine}, the {default} of VC {DEFAULT_VC} (which gives what "
            f"the other VCs leave) and {nobody} in no VC. Other VCs hold: {_holders(others, name)}. "
            "Make room first with `pai vc set OTHER --gpus N` or `pai vc remove OTHER`"
        )
    return out


def _from_cells(cells: _Cells, name: str, wanted: Mapping[str, int]) -> dict[str, int]:
    """Devices per chain of a `--cells` request, refused where a chain has not that much to give."""
    out: dict[str, int] = {}
    for cell_type, n in wanted.items():
        found = cells.chains.get(str(cell_type).split(".")[0])
        size = found.size_of(str(cell_type)) if found is not None else None
        if found is None or size is None:
            known = ", ".join(sorted(c.cell_name(t) for c in cells.chains.values() for t, _ in c.levels))
            raise VcChangeError(
                f"cells: {cell_type!r} is not a cell type of this cluster ({known or 'none'})"
            )
        out[found.name] = out.get(found.name, 0) + size * n
    available = cells.available(name)
    for chain_name, n in out.items():
        if n > available[chain_name]:
            raise VcChangeError(
                f"VC {name} cannot get {n} GPUs of chain {chain_name}: {available[chain_name]} are free "
                "to give there "
                f"(other VCs hold: {_holders(cells.held, name)})"
            )
    return out


def _gpu_change(
    cells: _Cells, name: str, wanted: dict[str, int], exact: list[dict[str, Any]] | None
) -> SchedulerConfig:
    """The config with VC `name` holding `wanted` devices per chain, the default VC the difference."""
    config = cells.config
    if cells.derived:
        vcs = {vc: dict(gpus) for vc, gpus in (config.vcs or {}).items()}
        amounts: dict[str, int] = {}
        for chain_name, n in wanted.items():
            leaf = cells.chains[chain_name].leaf_type
            amounts[leaf] = amounts.get(leaf, 0) + n
        vcs[name] = amounts
        return replace(config, vcs=vcs, declared=type_totals(cells.chains))
    assert config.hived is not None
    doc = {**config.hived, "virtualClusters": dict(config.hived.get("virtualClusters") or {})}
    own = cells.held.get(name, {})
    default = dict(cells.held.get(DEFAULT_VC, {})) if DEFAULT_VC in doc["virtualClusters"] else None
    for chain in cells.chains.values():
        c = chain.name
        need = wanted.get(c, 0)
        from_own = min(own.get(c, 0), need)
        from_free = min(max(0, cells.unassigned[c]), need - from_own)
        from_default = need - from_own - from_free
        given_back = own.get(c, 0) - from_own
        if default is not None:
            default[c] = default.get(c, 0) - from_default + given_back
    entry = dict(doc["virtualClusters"].get(name) or {})
    entry["virtualCells"] = exact if exact is not None else _cells_of(cells, wanted)
    doc["virtualClusters"][name] = entry
    if default is not None and name != DEFAULT_VC:
        kept = dict(doc["virtualClusters"][DEFAULT_VC] or {})
        kept["virtualCells"] = _cells_of(cells, default)
        doc["virtualClusters"][DEFAULT_VC] = kept
    return replace(config, hived=doc)


def _cells_of(cells: _Cells, amounts: Mapping[str, int]) -> list[dict[str, Any]]:
    return [cell for chain, n in amounts.items() if n > 0 for cell in cells.chains[chain].cells(n)]


def _quota_change(
    config: SchedulerConfig, name: str, request: VcRequest, nodes: list[NodeInventory]
) -> tuple[dict[str, VcQuota], str]:
    healthy = [n for n in nodes if n.healthy]
    total_cpu, total_memory = sum(n.cpu for n in healthy), sum(n.memory_mb for n in healthy)
    quotas = dict(config.quotas)
    cpu, memory = request.cpu, request.memory_mb
    if cpu is None or memory is None:
        # One given: the other in the same share of the nodes.
        if not total_cpu or not total_memory:
            raise VcChangeError("give both --cpu and --memory: no node has reported what it offers yet")
        if cpu is None:
            assert memory is not None
            cpu = int(total_cpu * memory / total_memory)
        else:
            memory = int(total_memory * cpu / total_cpu)
    if cpu == 0 and memory == 0:
        quotas.pop(name, None)
        return quotas, "no CPU and memory quota (it shares what the quotas leave)"
    others = {vc: q for vc, q in quotas.items() if vc != name}
    free_cpu = total_cpu - sum(q.cpu for q in others.values())
    free_memory = total_memory - sum(q.memory_mb for q in others.values())
    if cpu > free_cpu or memory > free_memory:
        held = ", ".join(f"{vc} {q.cpu} CPU {q.memory_mb} MB" for vc, q in sorted(others.items())) or "none"
        raise VcChangeError(
            f"VC {name} cannot get a quota of {counted(cpu, 'CPU')} and {memory} MB: the nodes offer "
            f"{counted(total_cpu, 'CPU')} and {total_memory} MB, and other quotas hold {held}, so "
            f"{max(0, free_cpu)} CPU and {max(0, free_memory)} MB are free to give"
        )
    quotas[name] = VcQuota(cpu, memory)
    return quotas, f"a quota of {counted(cpu, 'CPU')} and {memory} MB memory for tasks without GPUs"


def set_vc(
    config: SchedulerConfig,
    in_force: Mapping[str, Any] | None,
    nodes: list[NodeInventory],
    name: str,
    request: VcRequest,
) -> Change:
    """Create or resize VC `name` as `request` asks; VcChangeError says why not, and what is free."""
    check_name(name)
    cells = _Cells(config, in_force)
    said: list[str] = []
    if request.gpus is not None or request.cells is not None:
        if name == DEFAULT_VC:
            raise VcChangeError(
                f"VC {DEFAULT_VC} holds the GPUs the other VCs leave; resize the others to change it"
            )
        if request.cells is not None:
            wanted = _from_cells(cells, name, request.cells)
            exact = (
                [{"cellType": str(t), "cellNumber": n} for t, n in request.cells.items() if n]
                if not cells.derived
                else None
            )
        else:
            assert request.gpus is not None
            wanted = _pick(cells, name, request.gpus, request.model) if request.gpus else {}
            exact = None
        config = _gpu_change(cells, name, wanted, exact)
        said.append(counted(sum(wanted.values()), "GPU"))
    elif name not in (config.vc_names or [DEFAULT_VC]):
        config = _gpu_change(cells, name, {}, None)  # a new VC with no GPUs, for its quota
    if request.cpu is not None or request.memory_mb is not None:
        quotas, quota_said = _quota_change(config, name, request, nodes)
        config = replace(config, quotas=quotas)
        if config.vcs is None and config.hived is None:
            config = replace(config, vcs={}, declared=type_totals(cells.chains))
        said.append(quota_said)
    existed = name in (cells.config.vc_names or [DEFAULT_VC])
    return Change(config, f"VC {name} {'now has' if existed else 'was created with'} {' and '.join(said)}")


def remove_vc(config: SchedulerConfig, in_force: Mapping[str, Any] | None, name: str) -> Change:
    """Remove VC `name`; its GPUs go back to the default VC (or to no VC, where there is none)."""
    if name == DEFAULT_VC:
        raise VcChangeError(f"VC {DEFAULT_VC} cannot be removed: it holds what the other VCs leave")
    names = config.vc_names or [DEFAULT_VC]
    if name not in names:
        raise VcChangeError(f"there is no VC {name}; the VCs are: {', '.join(names)}")
    cells = _Cells(config, in_force)
    freed = sum(cells.held.get(name, {}).values())
    limits = {vc: limit for vc, limit in config.user_limits.items() if vc != name}
    quotas = {vc: q for vc, q in config.quotas.items() if vc != name}
    if cells.derived:
        vcs = {vc: gpus for vc, gpus in (config.vcs or {}).items() if vc != name}
        new = replace(config, vcs=vcs, user_limits=limits, quotas=quotas)
    else:
        new = _gpu_change(cells, name, {}, None)
        assert new.hived is not None
        remaining = {vc: spec for vc, spec in new.hived["virtualClusters"].items() if vc != name}
        new = replace(
            new, hived={**new.hived, "virtualClusters": remaining}, user_limits=limits, quotas=quotas
        )
    where = (
        f"VC {DEFAULT_VC}"
        if DEFAULT_VC in (new.vc_names or [DEFAULT_VC])
        else "no VC (there is no default VC)"
    )
    return Change(new, f"VC {name} was removed; its {counted(freed, 'GPU')} went to {where}")


def config_in_force(config: SchedulerConfig, cells_doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """The HiveD config in force (cells derived or given, VCs with their quotas beside their cells)
    and the user limits: what `pai vc config` prints, and what set-config takes back unchanged."""
    doc = dict(cells_doc or {})
    vcs: dict[str, Any] = {}
    quotas = quotas_document(config.quotas)
    for vc, spec in (doc.get("virtualClusters") or {}).items():
        vcs[vc] = {**(spec or {}), **quotas.get(vc, {})}
    out: dict[str, Any] = {"physicalCluster": doc.get("physicalCluster") or {}, "virtualClusters": vcs}
    limits = user_limits_document(config.user_limits)
    if limits:
        out["userLimits"] = limits
    return out
