"""Starter templates: the items the marketplace holds from its first start.

Each starter is a folder ``starters/<slug>/`` with ``job.yaml`` (the job protocol v2),
``item.yaml`` (name, summary, tags, categories) and ``README.md`` (the description). This module
turns the three texts into an item, or a ``FieldError`` naming the file and the field.
"""

from __future__ import annotations

from datetime import datetime

import yaml

from libs.protocol.limits import DEFAULT_LIMITS
from services.marketplace.core.items import STARTER_AUTHOR, Caller, FieldError, Item, new_item, read_fields

ITEM_KEYS = frozenset({"name", "summary", "tags", "categories"})
STARTER = Caller(username=STARTER_AUTHOR, admin=True)


def starter_item(item_id: str, item_yaml: str, job_yaml: str, readme: str, now: datetime) -> Item:
    """The public, approved template by ``pai`` a starter folder describes."""
    try:
        meta = yaml.safe_load(item_yaml)
    except yaml.YAMLError as exc:
        raise FieldError("item.yaml", f"item.yaml is not YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise FieldError("item.yaml", "item.yaml must be a mapping with name, summary, tags, categories.")
    unknown = sorted(set(meta) - ITEM_KEYS)
    if unknown:
        raise FieldError(
            f"item.yaml:{unknown[0]}", f"item.yaml may hold only {', '.join(sorted(ITEM_KEYS))}."
        )
    body = {
        **meta,
        "type": "template",
        "protocol": job_yaml,
        "description": readme,
        "isPublic": True,
        "isPrivate": False,
    }
    try:
        return new_item(item_id, STARTER, read_fields(body), now, DEFAULT_LIMITS)
    except FieldError as exc:
        where = (
            "job.yaml"
            if exc.field == "protocol"
            else "README.md"
            if exc.field == "description"
            else "item.yaml"
        )
        raise FieldError(f"{where}:{exc.field}", exc.message, exc.problems) from None
