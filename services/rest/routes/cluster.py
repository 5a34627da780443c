"""The cluster's nodes and pods in Kubernetes' shape (GET /api/v2/kubernetes/nodes and /pods).

OpenPAI passes these through from Kubernetes for its admin pages; both need an admin, as
its API reference says. Nodes are folded from the node facts on ``PAI_NODES``; pods are the
live tasks of the read model (``core/kubernetes.py`` builds both shapes).
"""

from __future__ import annotations

from aiohttp import web

from libs.protocol.subjects import NODE_SUBJECTS, NODES_STREAM
from services.rest.adapters.auth import require_admin
from services.rest.adapters.history import HistoryUnavailableError, read_events
from services.rest.adapters.running import live_tasks
from services.rest.core.errors import unavailable
from services.rest.core.kubernetes import node_list, pod_list
from services.rest.keys import READ_ENGINE
from services.rest.routes.availability import connected_bus

routes = web.RouteTableDef()


@routes.get("/v2/kubernetes/nodes")
async def get_kubernetes_nodes(request: web.Request) -> web.Response:
    """The cluster's nodes as a Kubernetes v1 NodeList (admin only)."""
    require_admin(request)
    try:
        history = await read_events(
            connected_bus(request, "Reading the node inventory").bus.js, NODES_STREAM, NODE_SUBJECTS
        )
    except HistoryUnavailableError:
        raise unavailable(
            "The node inventory cannot be read now (the message bus did not answer); retry."
        ) from None
    return web.json_response(node_list(history))


@routes.get("/v2/kubernetes/pods")
async def get_kubernetes_pods(request: web.Request) -> web.Response:
    """Live tasks as a Kubernetes v1 PodList (admin only); ``namespace`` filters."""
    require_admin(request)
    namespace = request.query.get("namespace") or None
    return web.json_response(pod_list(await live_tasks(request.app[READ_ENGINE]), namespace))
