"""A job run again on the same bits: its docker images pinned to the digests its tasks ran.

Where a container engine ran a job's tasks, the job detail names, per task, the image it ran as
``repository@sha256:...`` (``imageDigest``). Pinning rewrites the job's ``dockerimage``
prerequisites to those references, so a tag that moved since (``pytorch/pytorch:latest``) does
not change what the clone runs. A prerequisite two task roles share but ran at different digests
(a tag that moved between their starts) is split, one per role. Pure: a job config in, one out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


class PinningError(ValueError):
    """The job cannot be pinned (its detail names no digest for any task role)."""


def digests_by_role(detail: Mapping[str, Any]) -> dict[str, str]:
    """Each task role's image digest from a job detail (the latest attempt's tasks that ran)."""
    found: dict[str, str] = {}
    for role, status in (detail.get("taskRoles") or {}).items():
        for task in status.get("taskStatuses") or []:
            digest = task.get("imageDigest")
            if isinstance(digest, str) and digest:
                found.setdefault(role, digest)
    return found


def pin_images(config: Mapping[str, Any], digests: Mapping[str, str]) -> dict[str, Any]:
    """``config`` with each task role's image prerequisite pointing at its digest."""
    if not digests:
        raise PinningError(
            "the job's detail names no image digest: its tasks ran on the host or have not started"
        )
    pinned = copy.deepcopy(dict(config))
    prerequisites: list[dict[str, Any]] = pinned.setdefault("prerequisites", [])
    by_name = {p.get("name"): p for p in prerequisites if p.get("type") == "dockerimage"}
    chosen: dict[str, str] = {}  # prerequisite name -> the digest it now holds
    for role, spec in (pinned.get("taskRoles") or {}).items():
        digest = digests.get(role)
        name = spec.get("dockerImage")
        if digest is None or name not in by_name:
            continue
        if chosen.get(name, digest) == digest:
            by_name[name]["uri"] = digest
            chosen[name] = digest
            continue
        split = {**copy.deepcopy(by_name[name]), "name": f"{name}-{role}", "uri": digest}
        prerequisites.append(split)
        spec["dockerImage"] = split["name"]
    return pinned
