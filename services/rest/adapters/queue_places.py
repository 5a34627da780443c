"""A waiting job's place in its VC's queue, for its detail (`jobStatus.queue`).

The scheduler alone knows the queue: which jobs wait in each VC and the order it would place
them in (priority, then fair share: services/scheduler/core/fair_share.py). Places change with
every placement, so they are not facts on the job stream: the detail of a waiting job asks the
scheduler (`pai.rpc.scheduler.queue`), briefly, and shows nothing when no answer comes.
"""

from __future__ import annotations

import json
from typing import Any

import nats.errors
from aiohttp import web

from libs.protocol.subjects import QUEUE_RPC
from services.rest.keys import BUS

# The detail is read often (the portal follows a job): an absent scheduler must not slow it.
ASK_TIMEOUT = 0.5


async def queue_place(request: web.Request, job_id: str) -> dict[str, Any] | None:
    """`{position, of, virtualCluster}` of a waiting job, or None when it is not waiting (or the
    scheduler does not say)."""
    nc = request.app[BUS].bus.nc
    if not nc.is_connected:
        return None
    try:
        reply = await nc.request(QUEUE_RPC, json.dumps({"jobId": job_id}).encode(), timeout=ASK_TIMEOUT)
        answer = json.loads(reply.data or b"{}")
    except (TimeoutError, nats.errors.Error, ValueError):
        return None
    if not isinstance(answer, dict) or not answer.get("waiting"):
        return None
    try:
        return {
            "position": int(answer["position"]),
            "of": int(answer["of"]),
            "virtualCluster": str(answer["virtualCluster"]),
        }
    except (KeyError, TypeError, ValueError):
        return None
