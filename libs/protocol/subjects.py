"""Subject names on the bus, built from ids only.

Job and user names may contain dots and other characters NATS gives meaning to, so subjects
carry opaque ids (`[A-Za-z0-9_-]`), never names. One stream per kind of fact keeps retention
separate: job lifecycle history is kept long, node reports briefly.
"""

from __future__ import annotations

import re

ROOT = "pai"
JOBS_STREAM = "PAI_JOBS"
NODES_STREAM = "PAI_NODES"
ALERTS_STREAM = "PAI_ALERTS"
MARKETPLACE_STREAM = "PAI_MARKETPLACE"

JOB_SUBJECTS = f"{ROOT}.job.>"
NODE_SUBJECTS = f"{ROOT}.node.>"
ALERT_SUBJECTS = f"{ROOT}.alert.>"
MARKETPLACE_SUBJECTS = f"{ROOT}.marketplace.>"

_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class SubjectError(ValueError):
    """An id that cannot appear in a subject token."""


def check_id(value: str, what: str = "id") -> str:
    if not _ID.fullmatch(value):
        raise SubjectError(f"{what} {value!r} may only use letters, digits, '_' and '-' (1-128 characters)")
    return value


def job_subject(job_id: str, event_type: str) -> str:
    """`pai.job.<job_id>.<event type>`, e.g. pai.job.4f2c.task.completed."""
    return f"{ROOT}.job.{check_id(job_id, 'job id')}.{event_type}"


def node_subject(node_id: str, event_type: str) -> str:
    return f"{ROOT}.node.{check_id(node_id, 'node id')}.{event_type}"


def alert_subject(alert_id: str, event_type: str) -> str:
    return f"{ROOT}.alert.{check_id(alert_id, 'alert id')}.{event_type}"


def marketplace_subject(item_id: str, event_type: str) -> str:
    """`pai.marketplace.<item id>.<event type>`, e.g. pai.marketplace.3f9a.marketplace.item.created."""
    return f"{ROOT}.marketplace.{check_id(item_id, 'item id')}.{event_type}"


def job_id_of(subject: str) -> str | None:
    """The job id inside a job subject, or None for any other subject."""
    parts = subject.split(".")
    if len(parts) >= 4 and parts[0] == ROOT and parts[1] == "job":
        return parts[2]
    return None


def node_token(node_name: str) -> str:
    """A subject-safe id for a node name (names are often IP addresses, full of dots)."""
    if _ID.fullmatch(node_name):
        return node_name
    import hashlib

    return "n" + hashlib.sha256(node_name.encode()).hexdigest()[:20]


# Request/reply subjects (core NATS, not streams): answers that are not lifecycle facts.
LOGS_RPC = f"{ROOT}.rpc.orchestrator.logs"
VC_STATUS_RPC = f"{ROOT}.rpc.scheduler.virtual-clusters"
RECONFIGURE_RPC = f"{ROOT}.rpc.scheduler.reconfigure"
# The scheduler config in force (`pai vc config`), and a waiting job's place in its VC's queue.
SCHEDULER_CONFIG_RPC = f"{ROOT}.rpc.scheduler.config"
QUEUE_RPC = f"{ROOT}.rpc.scheduler.queue"
ALERTS_RPC = f"{ROOT}.rpc.alerter.alerts"
# Alerts resolved lately, and the alerting rules in effect (the alerter keeps both).
RECENT_ALERTS_RPC = f"{ROOT}.rpc.alerter.recent"
ALERT_RULES_RPC = f"{ROOT}.rpc.alerter.rules"
# The use of nodes and tasks over the last hours (every monitor keeps it; one answers).
METRICS_HISTORY_RPC = f"{ROOT}.rpc.monitor.metrics"
