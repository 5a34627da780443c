"""Virtual clusters through the API: status in OpenPAI's shape, SKU types, run-time config.

The scheduler alone knows cells and allocations, so every route asks it over request/reply
(`pai.rpc.scheduler.*`) and shapes the answer. OpenPAI's VirtualCluster fields are filled from
HiveD facts: capacity and usedCapacity are percentages of the cluster's GPUs, resourcesTotal of
a VC is its guaranteed cells (HiveD has no elastic total per VC), maxCapacity is 100 because
opportunistic jobs may use any free cell, and dedicated is always false (HiveD does not
dedicate nodes to VCs). nodeList names every node the scheduler knows: HiveD binds a VC's cells
to nodes only as they are used, and jobs without GPUs go to any node. Fields OpenPAI does not
have ride along under their own names: `nodes` (each node's CPU, memory and GPUs, what this VC
uses there and what every job there uses), `cluster` (the nodes' totals), per-user use and
limits, jobs waiting or running without their guarantee, a VC's CPU and memory quota, and the
notes of a node change that moved cells between VCs.

Admins change VCs whole (`PUT .../config` with a HiveD config) or one at a time
(`PUT .../virtual-clusters/NAME` with `{gpus}`, `{cells}` or `{cpu, memoryMB}`, `DELETE` to
remove one), and read the config in force (`GET .../config`, JSON with the same config as YAML);
the scheduler decides each (services/scheduler/core/vc_admin.py).
"""

from __future__ import annotations

import json
from typing import Any

import nats.errors
import yaml
from aiohttp import web

from libs.protocol.subjects import RECONFIGURE_RPC, SCHEDULER_CONFIG_RPC, VC_STATUS_RPC
from libs.protocol.yamlsource import YamlTooLargeError, safe_load_bounded
from services.rest.adapters.auth import Principal, require_interactive, require_user
from services.rest.core.errors import (
    CONFLICT_VIRTUAL_CLUSTER,
    NO_VIRTUAL_CLUSTER,
    NON_ADMIN,
    ApiError,
    invalid_parameters,
    unavailable,
)
from services.rest.routes.availability import connected_bus
from services.rest.routes.bodies import read_json

routes = web.RouteTableDef()

STATUS_SUBJECT = VC_STATUS_RPC
RECONFIGURE_SUBJECT = RECONFIGURE_RPC
STATUS_TIMEOUT = 5.0
# Re-adding every running job into a new policy takes longer on a big cluster than a status read.
RECONFIGURE_TIMEOUT = 30.0


async def _ask(request: web.Request, subject: str, payload: dict[str, Any], wait: float) -> dict[str, Any]:
    try:
        reply = await connected_bus(request, "Asking the scheduler").bus.nc.request(
            subject, json.dumps(payload).encode(), timeout=wait
        )
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        raise unavailable(
            f"The scheduler did not answer within {wait:g}s; check that it is running "
            "(`pai up` starts it) and retry."
        ) from None
    answer = json.loads(reply.data or b"{}")
    if not isinstance(answer, dict):
        raise unavailable("The scheduler answered in an older format; upgrade it to this version.")
    if subject in (STATUS_SUBJECT, SCHEDULER_CONFIG_RPC) and "error" in answer:
        # Right after a start the scheduler replays the job stream before it reports.
        raise unavailable(f"The scheduler cannot report yet: {answer.get('message')}.")
    return answer


def _resources(cpu: float, memory: float, gpu: int) -> dict[str, int]:
    return {"cpu": int(cpu), "vCores": int(cpu), "memory": int(memory), "gpu": gpu, "GPUs": gpu}


def _percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def _node(node: dict[str, Any], vc: dict[str, Any]) -> dict[str, Any]:
    """A node as a VC sees it: what it offers, what runs there in all, and this VC's part."""
    nothing = {"cpu": 0, "memoryMb": 0, "gpus": 0}
    mine = (node.get("usedByVc") or {}).get(vc["name"], nothing)
    return {
        "name": node["name"],
        "usedGpus": int(vc["nodes"].get(node["name"], mine["gpus"])),
        "gpus": int(node.get("gpus", 0)),
        "healthy": bool(node.get("healthy", False)),
        "address": node.get("address"),
        "gpuModel": node.get("gpuModel"),
        "cpu": node.get("cpu", 0),
        "memoryMb": int(node.get("memoryMb", 0)),
        "usedCpu": mine["cpu"],
        "usedMemoryMb": int(mine["memoryMb"]),
        "used": dict(node.get("used") or nothing),
    }


def openpai_vc(vc: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """One VC in OpenPAI's VirtualCluster shape, plus our per-node and per-user detail."""
    cluster_gpus = sum(int(v["guaranteedGpus"]) for v in status["virtualClusters"])
    nodes = {n["name"]: n for n in status["nodes"]}
    # Nodes the scheduler knows, and any a VC still uses that it no longer reports.
    listed = [nodes.get(name, {"name": name}) for name in sorted(set(nodes) | set(vc["nodes"]))]
    guaranteed = _resources(vc["guaranteedCpu"], vc["guaranteedMemoryMb"], int(vc["guaranteedGpus"]))
    return {
        "capacity": _percent(int(vc["guaranteedGpus"]), cluster_gpus),
        "usedCapacity": _percent(int(vc["usedGpus"]), cluster_gpus),
        "maxCapacity": 100.0 if cluster_gpus else 0.0,
        "dedicated": False,
        "status": "RUNNING",
        "resourcesUsed": _resources(vc["usedCpu"], vc["usedMemoryMb"], int(vc["usedGpus"])),
        "resourcesGuaranteed": guaranteed,
        "resourcesTotal": dict(guaranteed),
        "nodeList": [node["name"] for node in listed],
        "nodes": [_node(node, vc) for node in listed],
        "cluster": {
            "nodes": len(nodes),
            "cpu": sum(n.get("cpu", 0) for n in nodes.values()),
            "memoryMb": sum(int(n.get("memoryMb", 0)) for n in nodes.values()),
            "gpus": sum(int(n.get("gpus", 0)) for n in nodes.values()),
        },
        "guaranteedGpusBySkuType": vc["guaranteedByType"],
        "runningJobs": vc["runningJobs"],
        "waitingJobs": vc["waitingJobs"],
        "usedGpusByUser": vc["users"],
        "userLimits": vc["userLimits"],
        "jobsWithoutGuarantee": vc["demotedJobs"],
        # GPUs shared by tasks asking a fraction (extras.gpuShare): each device, what is in use of
        # it in thousandths, and who holds how much.
        "sharedGpus": vc.get("sharedGpus", []),
        # CPU and memory its tasks without GPUs may hold at once (shared by the VCs without a
        # quota); null where no VC has one.
        "quota": vc.get("quota"),
        # What a node change did to the VCs an admin set (new GPUs to the default VC, ...).
        "notes": status.get("notes", []),
    }


def no_vc(name: str, known: list[str]) -> ApiError:
    return NO_VIRTUAL_CLUSTER(f"The virtual clusters are: {', '.join(known) or 'none yet'}.", vc=name)


@routes.get("/v2/virtual-clusters")
async def list_virtual_clusters(request: web.Request) -> web.Response:
    require_user(request)
    status = await _ask(request, STATUS_SUBJECT, {}, STATUS_TIMEOUT)
    return web.json_response({vc["name"]: openpai_vc(vc, status) for vc in status["virtualClusters"]})


def _admin(request: web.Request) -> Principal:
    principal = require_interactive(request)  # an application token serves job operations only
    if not principal.admin:
        raise NON_ADMIN("Only admins change virtual clusters.")
    return principal


@routes.get("/v2/virtual-clusters/config")
async def get_config(request: web.Request) -> web.Response:
    """The scheduler config in force (admin only): HiveD's cells and VCs (with their quotas) and
    the user limits, as data (`config`) and as YAML to edit (`yaml`); where the cells come from
    (`cells`: `nodes` or `config`), and notes of what a node change did to the VCs."""
    _admin(request)
    answer = await _ask(request, SCHEDULER_CONFIG_RPC, {}, STATUS_TIMEOUT)
    config = answer.get("config") or {}
    return web.json_response(
        {
            "source": answer.get("source"),
            "cells": answer.get("cells"),
            "config": config,
            "yaml": yaml.safe_dump(config, sort_keys=False, default_flow_style=False),
            "notes": answer.get("notes", []),
        }
    )


@routes.get("/v2/virtual-clusters/{vc}")
async def get_virtual_cluster(request: web.Request) -> web.Response:
    require_user(request)
    name = request.match_info["vc"]
    status = await _ask(request, STATUS_SUBJECT, {}, STATUS_TIMEOUT)
    for vc in status["virtualClusters"]:
        if vc["name"] == name:
            return web.json_response(openpai_vc(vc, status))
    raise no_vc(name, [vc["name"] for vc in status["virtualClusters"]])


@routes.get("/v2/cluster/sku-types")
async def sku_types(request: web.Request) -> web.Response:
    """Per-device CPU, memory (MB) and GPU of each SKU type; `?vc=` keeps the VC's types only."""
    require_user(request)
    status = await _ask(request, STATUS_SUBJECT, {}, STATUS_TIMEOUT)
    skus: dict[str, Any] = status["skuTypes"]
    vc_name = request.query.get("vc")
    if vc_name:
        vc = next((v for v in status["virtualClusters"] if v["name"] == vc_name), None)
        if vc is None:
            raise no_vc(vc_name, [v["name"] for v in status["virtualClusters"]])
        skus = {name: sku for name, sku in skus.items() if vc["guaranteedByType"].get(name)}
    return web.json_response(
        {
            name: {"cpu": round(sku["cpu"], 2), "memory": int(sku["memory"]), "gpu": int(sku["gpu"])}
            for name, sku in skus.items()
        }
    )


def _forced(request: web.Request) -> bool:
    return request.query.get("force", "").lower() in ("1", "true", "yes")


async def _changed(request: web.Request, payload: dict[str, Any], done: str) -> web.Response:
    """Ask the scheduler for a change and answer as OpenPAI would: 400, 409 naming the harmed
    jobs, 503, or what is in force now."""
    answer = await _ask(request, RECONFIGURE_SUBJECT, payload, RECONFIGURE_TIMEOUT)
    details = {k: answer.get(k, {}) for k in ("killed", "downgraded", "jobVirtualClusters")}
    error = answer.get("error")
    if error == "invalid":
        raise invalid_parameters(str(answer.get("message")))
    if error == "conflict":
        raise CONFLICT_VIRTUAL_CLUSTER(reason=str(answer.get("message")), **details)
    if error is not None:
        raise unavailable(str(answer.get("message")))
    harmed = len(details["killed"]) + len(details["downgraded"])
    message = str(answer.get("message") or done)
    if harmed:
        message += f" Forced: {harmed} running job(s) were harmed, listed in downgraded and killed."
    return web.json_response(
        {"message": message, "virtualClusters": answer.get("virtualClusters", []), **details}
    )


@routes.put("/v2/virtual-clusters/{vc}")
async def set_virtual_cluster(request: web.Request) -> web.Response:
    """Create or resize one VC (admin only): `{"gpus": N}` (and `model`), `{"cells": {TYPE: N}}`,
    `{"cpu": N, "memoryMB": M}`; GPUs come from the default VC. Refused, naming what is free,
    when it does not fit; 409 when it would harm running jobs, unless `?force=true`."""
    _admin(request)
    body = await read_json(request, '{"gpus": 2}')
    if not isinstance(body, dict):
        raise invalid_parameters('body: expected a JSON object such as {"gpus": 2}.')
    name = request.match_info["vc"]
    return await _changed(
        request, {"set": {**body, "name": name}, "force": _forced(request)}, f"VC {name} was set."
    )


@routes.delete("/v2/virtual-clusters/{vc}")
async def remove_virtual_cluster(request: web.Request) -> web.Response:
    """Remove one VC (admin only); its GPUs go back to the default VC. 409 when it would harm
    running jobs, unless `?force=true`."""
    _admin(request)
    name = request.match_info["vc"]
    return await _changed(request, {"remove": name, "force": _forced(request)}, f"VC {name} was removed.")


@routes.put("/v2/virtual-clusters/config")
async def set_config(request: web.Request) -> web.Response:
    """Replace VCs, cells or per-user limits (admin only), refused if it harms running jobs."""
    _admin(request)
    force = _forced(request)
    text = await request.text()
    try:
        document = safe_load_bounded(text)
    except YamlTooLargeError as err:
        raise invalid_parameters(f"body: {err}; flatten the config.") from None
    except yaml.YAMLError as err:
        raise invalid_parameters(f"body: not valid YAML ({err}); send the HiveD config as YAML.") from None
    if not isinstance(document, dict):
        raise invalid_parameters(
            "body: expected a YAML mapping with virtualClusters (and physicalCluster, userLimits)."
        )
    return await _changed(
        request, {"document": document, "force": force}, "The new virtual cluster config is in force."
    )


def register(app: web.Application, prefixes: tuple[str, ...]) -> None:
    for prefix in prefixes:
        for route in routes:
            if isinstance(route, web.RouteDef):
                app.router.add_route(route.method, prefix + route.path, route.handler)
