"""Marketplace items: their fields, who may see and change them, and how a write changes one.

Pure: the handlers hand in the caller, the request's fields and the time, and get back the new
item or a ``FieldError`` naming the field and the fix. The JSON names are openpaimarketplace's
(``isPrivate``, ``groupList``, ``useNumber``...), so its clients and habits carry over.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from libs.protocol import JobProtocolError, parse_job
from libs.protocol.limits import JobLimits

ItemType = Literal["template", "data"]
Status = Literal["approved", "pending", "rejected"]
ITEM_TYPES = ("template", "data")
DATA_TYPES = ("storage", "url")
STATUSES = ("approved", "pending", "rejected")
VISIBILITIES = ("private", "group", "public")
# The author of the starter templates the service seeds.
STARTER_AUTHOR = "pai"


@dataclass(frozen=True)
class FieldLimits:
    """How large each field may be; over a limit is a 400 naming the field and the limit."""

    name: int = 255
    summary: int = 1024
    description: int = 64 * 1024
    protocol: int = 256 * 1024
    data_url: int = 2048
    status_reason: int = 1024
    labels: int = 32  # tags, and categories, per item
    label_length: int = 64
    groups: int = 64
    group_length: int = 128


LIMITS = FieldLimits()
LABEL = re.compile(r"^[^\x00-\x1f/\\?#%]+$")


class FieldError(ValueError):
    """A field the marketplace cannot take: ``field`` names it, the message says the fix."""

    def __init__(self, field_name: str, message: str, problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message
        self.problems = problems or []


class NotAllowed(Exception):
    """The caller may see the item but not do this to it (403)."""


@dataclass(frozen=True)
class Caller:
    """Who asks, as the REST API knows them."""

    username: str
    admin: bool = False
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Item:
    id: str
    name: str
    author: str
    type: ItemType
    summary: str = ""
    description: str = ""
    protocol: str = ""
    data_type: str = ""
    data_url: str = ""
    tags: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    is_private: bool = False
    is_public: bool = False
    group_list: tuple[str, ...] = ()
    status: Status = "approved"
    status_reason: str = ""
    use_number: int = 0
    star_number: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def visibility(self) -> Literal["private", "group", "public"]:
        if self.is_private:
            return "private"
        return "public" if self.is_public else "group"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "author": self.author,
            "type": self.type,
            "summary": self.summary,
            "description": self.description,
            "protocol": self.protocol,
            "dataType": self.data_type,
            "dataUrl": self.data_url,
            "tags": list(self.tags),
            "categories": list(self.categories),
            "isPrivate": self.is_private,
            "isPublic": self.is_public,
            "groupList": list(self.group_list),
            "status": self.status,
            "statusReason": self.status_reason,
            "useNumber": self.use_number,
            "starNumber": self.star_number,
            "createdAt": _iso(self.created_at),
            "updatedAt": _iso(self.updated_at),
        }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# JSON name -> attribute, for the fields a POST or PUT may set.
WRITABLE = {
    "name": "name",
    "type": "type",
    "summary": "summary",
    "description": "description",
    "protocol": "protocol",
    "dataType": "data_type",
    "dataUrl": "data_url",
    "tags": "tags",
    "categories": "categories",
    "isPrivate": "is_private",
    "isPublic": "is_public",
    "groupList": "group_list",
}
# What an item offers (its text, its job, its data): an author's change of any of these sends a
# public item back to review; who may see it (isPrivate, isPublic, groupList) is not content.
CONTENT = frozenset(
    {"name", "type", "summary", "description", "protocol", "dataType", "dataUrl", "tags", "categories"}
)
# Fields an item's JSON carries that a client may send back unchanged; they are ignored.
READ_ONLY = frozenset({"id", "author", "useNumber", "starNumber", "createdAt", "updatedAt"})
MODERATION = frozenset({"status", "statusReason"})
TEXT_LIMITS = {
    "name": LIMITS.name,
    "summary": LIMITS.summary,
    "description": LIMITS.description,
    "protocol": LIMITS.protocol,
    "dataUrl": LIMITS.data_url,
    "statusReason": LIMITS.status_reason,
}


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(name, f"{name} must be a string.")
    if "\x00" in value:
        raise FieldError(name, f"{name} contains a NUL character; remove it.")
    limit = TEXT_LIMITS.get(name)
    if limit is not None and len(value) > limit:
        raise FieldError(
            name, f"{name} has {len(value):,} characters, over the limit of {limit:,}; shorten it."
        )
    return value


def _flag(body: Mapping[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise FieldError(name, f"{name} must be true or false.")
    return value


def check_label(name: str, value: object, length: int = LIMITS.label_length) -> str:
    """One tag, category or group name: printable, no path characters, not too long."""
    if not isinstance(value, str) or not value.strip():
        raise FieldError(name, f"{name} must be a non-empty string.")
    text = value.strip()
    if len(text) > length:
        raise FieldError(
            name, f"{name} {text[:20]!r}... has {len(text)} characters, over {length}; shorten it."
        )
    if not LABEL.fullmatch(text):
        raise FieldError(name, f"{name} {text!r} may not contain control characters or / \\ ? # %.")
    return text


def _labels(body: Mapping[str, Any], name: str, most: int, length: int) -> tuple[str, ...] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(name, f"{name} must be a list of strings.")
    found: list[str] = []
    for entry in value:
        text = check_label(name, entry, length)
        if text not in found:
            found.append(text)
    if len(found) > most:
        raise FieldError(
            name, f"{name} has {len(found)} entries, over the limit of {most}; keep the most useful."
        )
    return tuple(found)


def read_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The writable fields present in a request body, checked one by one (attribute names)."""
    unknown = sorted(set(body) - set(WRITABLE) - READ_ONLY - MODERATION)
    if unknown:
        raise FieldError(
            unknown[0],
            f"{unknown[0]} is not an item field; the fields are {', '.join(sorted(WRITABLE))}.",
        )
    changes: dict[str, Any] = {}
    for name in ("name", "summary", "description", "protocol", "dataUrl"):
        text = _text(body, name)
        if text is not None:
            changes[WRITABLE[name]] = text
    if "name" in changes and not changes["name"].strip():
        raise FieldError("name", "name must not be empty; give the item a short title.")
    if "name" in changes:
        changes["name"] = changes["name"].strip()
    kind = _text(body, "type")
    if kind is not None:
        if kind not in ITEM_TYPES:
            raise FieldError("type", f"type must be one of {', '.join(ITEM_TYPES)}, not {kind!r}.")
        changes["type"] = kind
    data_type = _text(body, "dataType")
    if data_type is not None:
        if data_type not in (*DATA_TYPES, ""):
            raise FieldError(
                "dataType", f"dataType must be one of {', '.join(DATA_TYPES)}, not {data_type!r}."
            )
        changes["data_type"] = data_type
    for name in ("isPrivate", "isPublic"):
        flag = _flag(body, name)
        if flag is not None:
            changes[WRITABLE[name]] = flag
    for name in ("tags", "categories"):
        labels = _labels(body, name, LIMITS.labels, LIMITS.label_length)
        if labels is not None:
            changes[name] = labels
    groups = _labels(body, "groupList", LIMITS.groups, LIMITS.group_length)
    if groups is not None:
        changes["group_list"] = groups
    return changes


def read_moderation(body: Mapping[str, Any]) -> tuple[Status, str] | None:
    """``{"status": ..., "statusReason": ...}`` of an admin's PUT, or None when absent."""
    status = _text(body, "status")
    reason = _text(body, "statusReason")
    if status is None:
        if reason is not None:
            raise FieldError("status", "statusReason goes with status: send status 'rejected' too.")
        return None
    if status not in ("approved", "rejected", "pending"):
        raise FieldError(
            "status",
            f"status must be 'approved', 'rejected' or 'pending' (back to the queue), not {status!r}.",
        )
    return status, (reason or "").strip()  # type: ignore[return-value]  # checked just above


def check_protocol(text: str, limits: JobLimits) -> None:
    """A template's protocol passes the validator a submission passes, or 400 listing each problem."""
    if not text.strip():
        raise FieldError("protocol", "protocol is required for a template: the job protocol v2 YAML.")
    try:
        parse_job(text, limits)
    except JobProtocolError as exc:
        problems = [{"path": p.path, "message": p.message, "hint": p.hint} for p in exc.problems]
        raise FieldError(
            "protocol",
            f"protocol is not a valid job: {exc}. Fix the YAML (`pai job validate FILE` checks it).",
            problems,
        ) from None


def check_data_location(data_type: str, data_url: str) -> None:
    if data_type not in DATA_TYPES:
        raise FieldError("dataType", "a data item needs dataType: 'storage' or 'url'.")
    if data_type == "url":
        if not re.fullmatch(r"https?://[^\s]+", data_url):
            raise FieldError(
                "dataUrl", "dataUrl must be an http(s) URL for dataType 'url', e.g. https://host/data.tgz."
            )
        return
    config, sep, _path = data_url.partition("/")
    if not sep or not config or not LABEL.fullmatch(config):
        raise FieldError(
            "dataUrl",
            "dataUrl must be '<storageConfigName>/<path>' for dataType 'storage', "
            "e.g. confignfs/datasets/mnist.",
        )


def check_item(item: Item, limits: JobLimits) -> None:
    """Rules over the whole item once the fields are merged."""
    if not item.name:
        raise FieldError("name", "name is required; give the item a short title.")
    if item.is_private and item.is_public:
        raise FieldError("isPublic", "an item is either private (isPrivate) or public (isPublic), not both.")
    if not item.is_private and not item.is_public and not item.group_list:
        raise FieldError(
            "groupList",
            "a group item names its groups in groupList; or set isPrivate or isPublic to true.",
        )
    if item.type == "template":
        if item.data_type or item.data_url:
            raise FieldError("dataType", "a template has no dataType or dataUrl; use type 'data' for data.")
        check_protocol(item.protocol, limits)
    else:
        if item.protocol:
            raise FieldError("protocol", "a data item has no protocol; use type 'template' for a job.")
        check_data_location(item.data_type, item.data_url)


def check_groups(caller: Caller, groups: tuple[str, ...], existing: frozenset[str] | None) -> None:
    """The author belongs to every group named (an admin may name any group that exists)."""
    for group in groups:
        if caller.admin:
            if existing is not None and group not in existing:
                raise FieldError(
                    "groupList", f"groupList: no group {group!r}; `GET /api/v2/groups` lists the groups."
                )
        elif group not in caller.groups:
            mine = ", ".join(sorted(caller.groups)) or "none"
            raise FieldError(
                "groupList",
                f"groupList: {group!r} is not a group of yours (yours: {mine}); share with your own groups.",
            )


def new_item(
    item_id: str, caller: Caller, changes: Mapping[str, Any], now: datetime, limits: JobLimits
) -> Item:
    """The item a POST creates; a public one waits for an admin unless an admin wrote it."""
    if "name" not in changes:
        raise FieldError("name", "name is required; give the item a short title.")
    if "type" not in changes:
        raise FieldError("type", "type is required: 'template' (a job) or 'data'.")
    fields = dict(changes)
    fields.setdefault("is_private", False)
    fields.setdefault("is_public", False)
    item = Item(id=item_id, author=caller.username, created_at=now, updated_at=now, **fields)
    if item.is_public and not caller.admin:
        item = replace(item, status="pending")
    check_item(item, limits)
    return item


def may_see(caller: Caller, item: Item) -> bool:
    if caller.admin or item.author == caller.username:
        return True
    if item.is_private:
        return False
    if item.is_public:
        return item.status == "approved"
    return bool(caller.groups.intersection(item.group_list))


def may_edit(caller: Caller, item: Item) -> bool:
    return caller.admin or item.author == caller.username


@dataclass(frozen=True)
class Update:
    """What a PUT did: the new item, the fields it changed, and a moderation verdict if any."""

    item: Item
    changed: tuple[str, ...]
    moderated: Status | None = None


def update_item(
    item: Item,
    caller: Caller,
    changes: Mapping[str, Any],
    moderation: tuple[Status, str] | None,
    now: datetime,
    limits: JobLimits,
) -> Update:
    """Apply a PUT: the author's (or an admin's) field changes, an admin's moderation."""
    if not may_edit(caller, item):
        raise NotAllowed(f"Only the author ({item.author}) or an admin may change item {item.id}.")
    if moderation is not None and not caller.admin:
        raise NotAllowed("Only an admin approves or rejects items; leave status out of your change.")
    changed = tuple(
        name for name, attr in WRITABLE.items() if attr in changes and getattr(item, attr) != changes[attr]
    )
    updated = replace(item, **changes)
    if changed:
        updated = replace(updated, updated_at=now)
    became_public = updated.is_public and not item.is_public
    new_content = sorted(CONTENT.intersection(changed)) if updated.is_public else []
    if became_public and not caller.admin:
        updated = replace(updated, status="pending", status_reason="")
    elif new_content and not caller.admin:
        # What an admin approved is not what is offered now (a new dataUrl, another job): review
        # again, and say why to the author.
        updated = replace(
            updated,
            status="pending",
            status_reason=f"waiting for review again: {', '.join(new_content)} changed",
        )
    if not updated.is_public:
        updated = replace(updated, status="approved", status_reason="")
    moderated: Status | None = None
    if moderation is not None:
        status, reason = moderation
        if not updated.is_public:
            raise FieldError(
                "status", "only public items are moderated; private and group items are approved."
            )
        moderated = status
        updated = replace(
            updated, status=status, status_reason=reason if status == "rejected" else "", updated_at=now
        )
        changed = (*changed, "status")
    if changed or moderated:
        check_item(updated, limits)
    return Update(updated, changed, moderated)
