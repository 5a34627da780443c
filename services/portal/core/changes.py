"""Live updates without the event gateway: what changed between two answers of the REST API."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def digest(answer: Any) -> str:
    """A stable fingerprint of a JSON answer (key order does not matter)."""
    return hashlib.sha256(json.dumps(answer, sort_keys=True, default=str).encode()).hexdigest()


def job_states(items: list[Mapping[str, Any]]) -> dict[str, str]:
    """user~name -> state, from a job list page."""
    return {f"{item.get('username')}~{item.get('name')}": str(item.get("state")) for item in items}


def changed_jobs(before: Mapping[str, str], after: Mapping[str, str]) -> list[dict[str, str]]:
    """The jobs whose state moved (or that appeared) between two list answers."""
    changes = []
    for key, state in after.items():
        if before.get(key) != state:
            user, _, name = key.partition("~")
            changes.append({"username": user, "name": name, "state": state, "previous": before.get(key, "")})
    return changes
