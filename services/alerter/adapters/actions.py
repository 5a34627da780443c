"""What an alert may do to jobs and nodes: stop a job, tag it, cordon a node.

Actions sit behind `JobActions` so the dispatcher does not care how they happen. The bus
implementation stops a job with the same `job.stop_requested` event a user's stop publishes,
with an event id derived from the alert. That id only guards against a repeat within the
streams' duplicate window (two minutes); what keeps an alert from asking twice over hours and
restarts is the service calling an action once per alert, when a group first notifies it (the
notification log carries that across restarts). Tagging publishes `job.tagged`, which the
REST read model applies; cordoning publishes `node.cordoned`, which the scheduler honours
until someone uncordons the node (the node's own reports do not undo it).
"""

from __future__ import annotations

from typing import Protocol

import structlog
from nats.js import JetStreamContext

from libs.backbone.topology import publish_event
from libs.protocol.events import JobStopRequested, JobTagged, NodeCordoned, NodeReported
from libs.protocol.subjects import node_token

log = structlog.get_logger(__name__)


class JobActions(Protocol):
    async def stop_job(self, job_id: str, *, alert_id: str, reason: str) -> None: ...

    async def tag_job(self, job_id: str, tag: str, *, alert_id: str) -> None: ...

    async def cordon_node(self, node_name: str, *, alert_id: str, reason: str) -> None: ...


class BusActions:
    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.tags: dict[str, set[str]] = {}
        self.last_reports: dict[str, NodeReported] = {}

    def remember(self, report: NodeReported) -> None:
        self.last_reports[report.name] = report

    async def stop_job(self, job_id: str, *, alert_id: str, reason: str) -> None:
        event = JobStopRequested(event_id=f"alert-{alert_id}-stop", job_id=job_id, by="alerter")
        await publish_event(self.js, event)
        log.info("job stop requested by alert", job_id=job_id, alert_id=alert_id, reason=reason)

    async def tag_job(self, job_id: str, tag: str, *, alert_id: str) -> None:
        self.tags.setdefault(job_id, set()).add(tag)
        event = JobTagged(event_id=f"alert-{alert_id}-tag-{job_id}", job_id=job_id, tag=tag, by="alerter")
        await publish_event(self.js, event)
        log.info("job tagged by alert", job_id=job_id, tag=tag, alert_id=alert_id)

    async def cordon_node(self, node_name: str, *, alert_id: str, reason: str) -> None:
        last = self.last_reports.get(node_name)
        node_id = last.node_id if last is not None else node_token(node_name)
        event = NodeCordoned(
            event_id=f"alert-{alert_id}-cordon", node_id=node_id, name=node_name, reason=reason, by="alerter"
        )
        await publish_event(self.js, event)
        log.info("node cordoned by alert", node=node_name, alert_id=alert_id)
