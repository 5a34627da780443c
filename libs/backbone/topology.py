"""The platform's streams and KV buckets, declared once for every service.

Every service calls `ensure_topology` at start; provisioning is idempotent, so the first
service up creates everything and the others find it as declared.
"""

from __future__ import annotations

import functools

from nats.js import JetStreamContext
from nats.js.api import PubAck

from libs.backbone.connecting import patiently
from libs.backbone.fencing import FENCES_BUCKET
from libs.backbone.provisioning import KVSpec, StreamSpec, ensure_kv, ensure_stream
from libs.backbone.publishing import publish
from libs.protocol.events import EventBase
from libs.protocol.subjects import (
    ALERT_SUBJECTS,
    ALERTS_STREAM,
    JOB_SUBJECTS,
    JOBS_STREAM,
    MARKETPLACE_STREAM,
    MARKETPLACE_SUBJECTS,
    NODE_SUBJECTS,
    NODES_STREAM,
)

DAY = 24 * 3600.0

JOBS = StreamSpec(
    JOBS_STREAM,
    (JOB_SUBJECTS,),
    description="job and task lifecycle events; the source every service rebuilds its state from",
)
NODES = StreamSpec(
    NODES_STREAM,
    (NODE_SUBJECTS,),
    max_msgs_per_subject=1,
    description="the latest report of every node",
)
ALERTS = StreamSpec(
    ALERTS_STREAM, (ALERT_SUBJECTS,), max_age=30 * DAY, description="alerts fired and resolved"
)

MARKETPLACE = StreamSpec(
    MARKETPLACE_STREAM,
    (MARKETPLACE_SUBJECTS,),
    max_age=30 * DAY,
    description="marketplace items created, changed, moderated, starred and deleted",
)

SECRETS = KVSpec("PAI_SECRETS", description="job secrets by job id; never copied into events or logs")
FRAMEWORKS = KVSpec("PAI_FRAMEWORKS", description="the orchestrator's framework state by job id")
# Three renewals (libs/backbone/leasing.py): a standby takes over a crashed leader within about 7 s.
LEASES = KVSpec("PAI_LEASES", ttl=6.0, description="leader leases of single-active services")
FENCES = KVSpec(
    FENCES_BUCKET,
    description="scheduler leader epochs and where each began in the job stream (libs/protocol/fencing.py)",
)
FAILURE_RULES = KVSpec(
    "PAI_FAILURE_RULES",
    history=5,
    description="the operator's failure rules (YAML, key current); absent: the packaged defaults",
)
ALERT_RULES = KVSpec(
    "PAI_ALERT_RULES",
    history=5,
    description="the alerting configuration (YAML, key config), stored by rest; absent: the built-in one",
)
SCHEDULER_CONFIG = KVSpec(
    "PAI_SCHEDULER_CONFIG",
    history=5,
    description="the scheduler's HiveD cells, VCs and per-user limits (key hived)",
)
NOTIFICATION_LOG = KVSpec(
    "PAI_ALERTER_NFLOG",
    ttl=5 * DAY,
    description="the alerter's notification log: what each alert group last sent, and when",
)

USER_CONTACTS = KVSpec(
    "PAI_USER_CONTACTS",
    description="each user's registered e-mail address, written by rest from its users table; "
    "the alerter reads it to address job notifications",
)

STREAMS = (JOBS, NODES, ALERTS, MARKETPLACE)
# Every service provisions these at start. PAI_SECRETS is not among them: only the services
# allowed to touch it (rest, orchestrator; libs/backbone/busauth.py) provision and open it.
BUCKETS = (
    FRAMEWORKS,
    LEASES,
    FENCES,
    SCHEDULER_CONFIG,
    FAILURE_RULES,
    ALERT_RULES,
    NOTIFICATION_LOG,
    USER_CONTACTS,
)


async def ensure_topology(js: JetStreamContext, replicas: int | None = None) -> None:
    """Every stream and bucket, with `replicas` copies each (PAI_STREAM_REPLICAS: 3 on a NATS
    cluster of three; None keeps what exists and creates with one, as the embedded bus has).

    A call the cluster does not answer now (a server lost, a group electing its leader) is made
    again: a service starting meanwhile waits for the cluster rather than exiting."""
    for stream in STREAMS:
        await patiently(functools.partial(ensure_stream, js, stream, replicas=replicas))
    for bucket in BUCKETS:
        await patiently(functools.partial(ensure_kv, js, bucket, replicas=replicas))


async def publish_event(
    js: JetStreamContext, event: EventBase, *, ack_timeout: float | None = None
) -> PubAck:
    """Publish on the event's own subject with its id as Nats-Msg-Id (duplicates are dropped)."""
    return await publish(js, event.subject(), event, msg_id=event.event_id, ack_timeout=ack_timeout)
