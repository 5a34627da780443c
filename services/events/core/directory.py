"""Which job an event belongs to: owner, name and virtual cluster from the job's own submission.

Job and task events carry only the job id; ``job.submitted`` names the owner, the job and the
VC. Alerts carry the job id when they are about a job (``alert.fired``); their resolution names
only the alert, so the directory remembers which job each alert was about. Filled from the
stream, never from another service's tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.events.core.filters import JobInfo


@dataclass(frozen=True)
class Located:
    """An event reduced to what routing needs."""

    type: str
    job_id: str | None  # the job the event is about, when it is about one


class JobDirectory:
    def __init__(self) -> None:
        self._jobs: dict[str, JobInfo] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._alerts: dict[str, str] = {}

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


def locate(data: dict[str, object], directory: JobDirectory) -> Located:
    """Read an event's type and job from its decoded JSON, teaching the directory as it goes."""
    event_type = str(data.get("type", ""))
    kind = event_type.split(".", 1)[0]
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
