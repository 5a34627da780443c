"""CPU and memory quotas of virtual clusters, for tasks that use no GPU.

HiveD's VCs are cells of GPUs: on a cluster without GPUs every VC holds nothing, and tasks
without GPUs go to any node whatever their VC. A quota is the smallest sound notion to add: a
VC's quota (`cpu`, `memoryMB`, set with `pai vc set NAME --cpu N --memory MB` or beside its
virtualCells) bounds what its running tasks without GPUs hold at once, all nodes together.
VCs without a quota share what the quotas leave of the nodes (the default VC among them), so
the quotas together never promise more than the nodes offer, and a VC within its quota always
has that much room in the cluster as a whole. It is a bound on the sum, not a reservation on
particular nodes: a task still needs one node with room for it, and nothing is preempted to make
room (a VC is never over its quota, so there is nothing to take back). GPU tasks are held by
their cells, and their CPU and memory by the nodes, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from libs.protocol.quotas import QuotaFields

# The quota every VC without one draws from, together.
SHARED = ""


class QuotaError(ValueError):
    """A quota cannot be used as written; the text names the field."""


@dataclass(frozen=True)
class VcQuota:
    cpu: int
    memory_mb: int


def quota_of(vc: str, entry: Mapping[str, Any]) -> VcQuota | None:
    """The quota in a virtualClusters entry (`cpu` and `memoryMB` beside its cells), if any."""
    try:
        fields = QuotaFields.model_validate(entry)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise QuotaError(f"virtualClusters.{vc}.{error['loc'][0]}: {error['msg']}") from None
    given = fields.model_fields_set
    if not given:
        return None
    if len(given) < 2:
        raise QuotaError(f"virtualClusters.{vc}: a quota needs both cpu and memoryMB")
    if fields.cpu is None or fields.memory_mb is None:  # written as null
        where = "cpu" if fields.cpu is None else "memoryMB"
        raise QuotaError(f"virtualClusters.{vc}.{where}: must be a whole number, 0 or more, got None")
    return VcQuota(fields.cpu, fields.memory_mb)


def parse_quotas(doc: Any) -> dict[str, VcQuota]:
    """The stored form `{vc: {cpu, memoryMB}}` back into quotas."""
    if not isinstance(doc, Mapping):
        return {}
    out: dict[str, VcQuota] = {}
    for vc, entry in doc.items():
        quota = quota_of(str(vc), entry) if isinstance(entry, Mapping) else None
        if quota is not None:
            out[str(vc)] = quota
    return out


def quotas_document(quotas: Mapping[str, VcQuota]) -> dict[str, Any]:
    return {vc: QuotaFields(cpu=q.cpu, memory_mb=q.memory_mb).document() for vc, q in sorted(quotas.items())}


def bounds(quotas: Mapping[str, VcQuota], cpu: int, memory_mb: int) -> tuple[dict[str, VcQuota], VcQuota]:
    """Each quota, and what the VCs without one share: the nodes' `cpu` and `memory_mb` less
    every quota (never below nothing)."""
    shared = VcQuota(
        max(0, cpu - sum(q.cpu for q in quotas.values())),
        max(0, memory_mb - sum(q.memory_mb for q in quotas.values())),
    )
    return dict(quotas), shared
