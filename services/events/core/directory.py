"""Which job an event belongs to: owner, name and virtual cluster from the job's own submission.

Job and task events carry only the job id; ``job.submitted`` names the owner, the job and the
VC. Alerts carry the job id when they are about a job (``alert.fired``); their resolution names
only the alert, so the directory remembers which job each alert was about. Marketplace events
name their item's author; only ``marketplace.item.created`` says who may see it (private, group,
public) and the created, updated, approved and rejected events its status, so the directory
keeps each item's visibility and status as the latest of its events (by stream sequence, so a
replayed old event changes nothing); a change of ``isPrivate``, ``isPublic`` or ``groupList``
(the event does not say to what) makes it unknown, i.e. not public. Filled from the stream,
never from another service's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.events.core.filters import ItemInfo, JobInfo

VISIBILITY_FIELDS = frozenset({"isPrivate", "isPublic", "groupList"})


@dataclass(frozen=True)
class Located:
    """An event reduced to what routing needs."""

    type: str
    job_id: str | None  # the job the event is about, when it is about one
    item_id: str | None = None  # the marketplace item it is about, when it is about one


@dataclass
class _ItemState:
    author: str
    visibility: str | None  # private, group, public; None: unknown
    status: str | None
    sequence: int


class JobDirectory:
    def __init__(self) -> None:
        self._jobs: dict[str, JobInfo] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._alerts: dict[str, str] = {}
        self._items: dict[str, _ItemState] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def submitted(self, job_id: str, user: str, name: str, vc: str) -> None:
        info = JobInfo(user, name, vc)
        self._jobs[job_id] = info
        self._by_name[(user, name)] = job_id

    def alert(self, alert_id: str, job_id: str | None) -> str | None:
        """Remember (or recall, when ``job_id`` is None) the job an alert is about."""
        if job_id:
            self._alerts[alert_id] = job_id
            return job_id
        return self._alerts.get(alert_id)

    def job(self, job_id: str | None) -> JobInfo | None:
        return self._jobs.get(job_id) if job_id else None

    def job_id(self, user: str, name: str) -> str | None:
        return self._by_name.get((user, name))

    def item_event(self, item_id: str, data: dict[str, object], sequence: int) -> None:
        """Learn an item's author, visibility and status from one of its events at ``sequence``."""
        event_type = str(data.get("type", ""))
        state = self._items.get(item_id)
        if state is not None and sequence and sequence <= state.sequence:
            return  # an event older than what is known (a replay): it changes nothing
        if state is None:
            state = self._items[item_id] = _ItemState(str(data.get("author", "")), None, None, 0)
        state.sequence = max(state.sequence, sequence)
        state.author = str(data.get("author", state.author))
        if event_type == "marketplace.item.created":
            state.visibility = str(data.get("visibility", "")) or None
            state.status = str(data.get("status", "")) or None
        elif event_type == "marketplace.item.updated":
            state.status = str(data.get("status", "")) or None
            changed = data.get("changed")
            if isinstance(changed, list) and VISIBILITY_FIELDS & {str(c) for c in changed}:
                state.visibility = None
        elif event_type == "marketplace.item.approved":
            state.status = "approved"
        elif event_type == "marketplace.item.rejected":
            state.status = "rejected"

    def item(self, item_id: str | None) -> ItemInfo | None:
        state = self._items.get(item_id) if item_id else None
        if state is None:
            return None
        return ItemInfo(state.author, state.visibility == "public" and state.status == "approved")


def locate(data: dict[str, object], directory: JobDirectory, sequence: int = 0) -> Located:
    """Read an event's type and job (or item) from its decoded JSON, teaching the directory as it
    goes; ``sequence`` is its stream sequence (0: unknown)."""
    event_type = str(data.get("type", ""))
    kind = event_type.split(".", 1)[0]
    if kind == "marketplace":
        item_id = data.get("item_id")
        if not isinstance(item_id, str) or not item_id:
            return Located(event_type, None)
        directory.item_event(item_id, data, sequence)
        return Located(event_type, None, item_id)
    job_id = data.get("job_id")
    job = str(job_id) if isinstance(job_id, str) else None
    if event_type == "job.submitted" and job:
        directory.submitted(
            job, str(data.get("user")), str(data.get("name")), str(data.get("virtual_cluster"))
        )
    if kind == "alert":
        job = directory.alert(str(data.get("alert_id")), job)
    elif kind == "node":
        job = None
    return Located(event_type, job)
