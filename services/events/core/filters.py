"""What a subscriber asked for and what it may see, decided without any I/O.

A subscription's filters come from query parameters (SSE) or a JSON body (webhooks): ``job``
(``USER~NAME``), ``username``, ``vc`` and ``types`` (catalog names). Rights follow the REST
API's: a user sees the events of their own jobs and the alerts about them, an admin sees
everything, node events are an admin's (REST serves nodes to admins only). The job a job or
task event belongs to is known from that job's own ``job.submitted`` (``JobDirectory``).
Marketplace events follow the marketplace's rule as far as the events tell it (``may_see_item``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

from libs.protocol.events import Event

KIND_STREAMS = {
    "job": "jobs",
    "task": "jobs",
    "node": "nodes",
    "alert": "alerts",
    "marketplace": "marketplace",
}
# Every event type the catalog names on the streams the gateway serves, read from the union
# itself so a new event is known at once.
CATALOG_TYPES: frozenset[str] = frozenset(
    name
    for model in typing.get_args(typing.get_args(Event)[0])
    for name in typing.get_args(model.model_fields["type"].annotation)
)
EVENT_TYPES: frozenset[str] = frozenset(
    name for name in CATALOG_TYPES if name.split(".", 1)[0] in KIND_STREAMS
)
JOB_KINDS = frozenset({"job", "task"})
STREAMS = ("jobs", "nodes", "alerts", "marketplace")
# What a subscription naming no types follows: the marketplace only when its types are asked
# for, so the cursors of unfiltered streams keep their three parts (jobs-nodes-alerts).
DEFAULT_STREAMS = ("jobs", "nodes", "alerts")
MARKETPLACE_TYPES = frozenset(name for name in EVENT_TYPES if name.startswith("marketplace."))


class FilterError(ValueError):
    """A filter the gateway cannot use; ``field`` names the parameter, the message the fix."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class Caller:
    """Who subscribes, as the REST API knows them."""

    username: str
    admin: bool = False


@dataclass(frozen=True)
class JobInfo:
    """What a job's ``job.submitted`` tells about it: owner, name, virtual cluster."""

    user: str
    name: str
    vc: str


@dataclass(frozen=True)
class ItemInfo:
    """What the marketplace's events tell about an item: its author, and whether everyone
    signed in may see it (public and approved, as far as the events say)."""

    author: str
    public: bool = False


@dataclass(frozen=True)
class EventFilter:
    """The filters of one subscription; empty ones match everything."""

    job: tuple[str, str] | None = None
    username: str | None = None
    vc: str | None = None
    types: frozenset[str] = field(default_factory=frozenset)

    @property
    def about_jobs(self) -> bool:
        """Whether the subscription names jobs (then node events never match)."""
        return self.job is not None or self.username is not None or self.vc is not None

    def streams(self) -> tuple[str, ...]:
        """The streams whose events this subscription can match, in a fixed order."""
        if self.types:
            wanted = {KIND_STREAMS[t.split(".", 1)[0]] for t in self.types}
        elif self.about_jobs:
            wanted = {"jobs"}  # alerts about a job only when their types are asked for
        else:
            wanted = set(DEFAULT_STREAMS)
        if self.about_jobs:
            wanted.discard("nodes")
        return tuple(s for s in STREAMS if s in wanted) or ("jobs",)

    def to_query(self) -> dict[str, str]:
        """The filters as the query parameters they were parsed from."""
        query: dict[str, str] = {}
        if self.job:
            query["job"] = f"{self.job[0]}~{self.job[1]}"
        if self.username:
            query["username"] = self.username
        if self.vc:
            query["vc"] = self.vc
        if self.types:
            query["types"] = ",".join(sorted(self.types))
        return query


def _text(value: object, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise FilterError(name, f"{name} must be a string.")
    if any(ch in value for ch in "\x00\r\n"):
        raise FilterError(name, f"{name} must be printable text.")
    return value


def parse_types(value: object) -> frozenset[str]:
    """``types`` as a comma-separated string or a list of catalog names."""
    if value is None or value == "":
        return frozenset()
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value]
    else:
        raise FilterError("types", "types must be a comma-separated list of event types.")
    unknown = sorted(set(items) - EVENT_TYPES)
    if unknown:
        raise FilterError(
            "types",
            f"types: unknown event type {', '.join(map(repr, unknown))}; the catalog's types are "
            f"{', '.join(sorted(EVENT_TYPES))}.",
        )
    return frozenset(items)


def parse_filter(values: Mapping[str, object]) -> EventFilter:
    """The filters in query parameters or a webhook body; ``FilterError`` names a bad one."""
    job_text = _text(values.get("job"), "job")
    job = None
    if job_text is not None:
        user, sep, name = job_text.partition("~")
        if not sep or not user or not name:
            raise FilterError("job", f"job must be USER~NAME (e.g. alice~train-1), got {job_text!r}.")
        job = (user, name)
    flt = EventFilter(
        job=job,
        username=_text(values.get("username"), "username"),
        vc=_text(values.get("vc"), "vc"),
        types=parse_types(values.get("types")),
    )
    market = sorted(flt.types & MARKETPLACE_TYPES)
    if market and flt.about_jobs:
        raise FilterError(
            "types",
            f"types: {', '.join(map(repr, market))} are about marketplace items, not jobs: they "
            f"cannot be combined with job, username or vc (open a separate subscription for them).",
        )
    return flt


def may_see(caller: Caller, kind: str, job: JobInfo | None) -> bool:
    """The REST API's rights: own jobs (and alerts about them), admins everything, nodes admins."""
    if caller.admin:
        return True
    if kind == "node":
        return False
    return job is not None and job.user == caller.username


def may_see_item(caller: Caller, item: ItemInfo | None) -> bool:
    """The marketplace's rule as far as its events tell it: a public, approved item's events go to
    everyone signed in; any other item's to its author and admins. The events do not carry an
    item's ``groupList``, so a group item's members do not receive them (the marketplace's API
    still shows them the item)."""
    if caller.admin:
        return True
    return item is not None and (item.public or item.author == caller.username)


def refused_filter(caller: Caller, flt: EventFilter) -> str | None:
    """Why ``caller`` may not subscribe with ``flt`` (a filter naming another user's jobs, which
    could never deliver anything), or None. Answered 403 rather than a stream that stays empty."""
    if caller.admin:
        return None
    for field_name, owner in (("job", flt.job[0] if flt.job else None), ("username", flt.username)):
        if owner is not None and owner != caller.username:
            return (
                f"{field_name} names {owner}'s jobs: you receive the events of your own jobs only "
                f"({caller.username}'s; an admin receives everyone's)."
            )
    return None


def matches(flt: EventFilter, event_type: str, job: JobInfo | None) -> bool:
    """Whether an event of ``event_type`` about ``job`` (None: no job or unknown) passes the filters."""
    if flt.types and event_type not in flt.types:
        return False
    if not flt.about_jobs:
        return True
    if job is None:
        return False
    if flt.job is not None and (job.user, job.name) != flt.job:
        return False
    if flt.username is not None and job.user != flt.username:
        return False
    return not (flt.vc is not None and job.vc != flt.vc)


def wanted(
    caller: Caller, flt: EventFilter, event_type: str, job: JobInfo | None, item: ItemInfo | None = None
) -> bool:
    """Both: the caller may see the event and asked for it (``item``: a marketplace event's item)."""
    kind = event_type.split(".", 1)[0]
    if kind == "marketplace":
        return may_see_item(caller, item) and matches(flt, event_type, None)
    return may_see(caller, kind, job) and matches(flt, event_type, job)
