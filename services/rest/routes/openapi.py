"""Our own OpenAPI document, generated from the router at request time so it cannot drift.

Every route the application serves under ``/api`` appears with its method, its path
parameters (typed, and constrained by the route's own pattern), the handler's docstring as
summary and the error shape every route shares (OpenPAI's ``{code, message}``). What a route
reads beyond its path (query parameters, a body) is declared once in ``INPUTS`` below, so a
client or a fuzzer generating requests from this document reaches the handler's real logic;
a route without an entry is still listed, with its path parameters only. The same operations
are served under ``/rest-server/api``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from libs.protocol.jobs import NAME_PATTERN
from libs.protocol.limits import MIN_TASK_MEMORY_MB
from services.rest.adapters.jobs_store import MAX_LIMIT, ORDER_FIELDS
from services.rest.core.storages import TYPES as STORAGE_TYPES
from services.rest.routes.logs import LOG_FILES, MAX_LOG_LIMIT

routes = web.RouteTableDef()

PATH_PARAMETER = re.compile(r"{(\w+)(?::[^}]*)?}")
# A named group of the route's compiled pattern: its name and its expression (one level of nesting).
ROUTE_GROUP = re.compile(r"\(\?P<(\w+)>((?:[^()\\]|\\.|\([^()]*\))*)\)")
ERROR = {
    "type": "object",
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        # This platform's: what to do next, and the body field an error is about.
        "hint": {"type": "string"},
        "field": {"type": "string"},
    },
    "required": ["code", "message"],
}

STRING: dict[str, Any] = {"type": "string"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
NAMES: dict[str, Any] = {"type": "array", "items": STRING}
OBJECT: dict[str, Any] = {"type": "object"}
# Path parameters the handlers read as numbers or from a fixed set, whatever route they are in.
PATH_TYPES: dict[str, dict[str, Any]] = {
    "attempt": COUNT,
    "index": COUNT,
    "task_attempt": COUNT,
    "file": {"type": "string", "enum": list(LOG_FILES)},
}


@dataclass(frozen=True)
class Inputs:
    """What one operation reads besides its path: query parameters and request bodies by media type."""

    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    body: dict[str, dict[str, Any]] = field(default_factory=dict)


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _json(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"application/json": schema}


CREDENTIALS = _object(
    {"username": STRING, "password": STRING, "expiration": {"type": "integer", "minimum": 60}},
    "username",
    "password",
)
# OpenPAI's job protocol v2, the part that decides whether a job is accepted (the protocol's
# own tests cover the rest); sent as YAML.
JOB = _object(
    {
        "protocolVersion": {"enum": [2, "2"]},
        "name": {"type": "string", "pattern": NAME_PATTERN, "maxLength": 255},
        "type": {"enum": ["job"]},
        "jobRetryCount": COUNT,
        "secrets": {"type": "object", "additionalProperties": STRING},
        "defaults": _object({"virtualCluster": STRING}),
        "prerequisites": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "name": {"type": "string", "pattern": NAME_PATTERN},
                    "type": {"enum": ["dockerimage", "script", "output", "data"]},
                    "uri": STRING,
                },
                "name",
                "type",
            ),
        },
        "taskRoles": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": _object(
                {
                    "instances": {"type": "integer", "minimum": 1},
                    "dockerImage": STRING,
                    "taskRetryCount": COUNT,
                    "resourcePerInstance": _object(
                        {
                            "cpu": COUNT,  # 0: no CPU reserved
                            "memoryMB": {"type": "integer", "minimum": MIN_TASK_MEMORY_MB},
                            "gpu": COUNT,
                        },
                        "cpu",
                        "memoryMB",
                        "gpu",
                    ),
                    "commands": {"type": "array", "minItems": 1, "items": STRING},
                },
                "dockerImage",
                "resourcePerInstance",
                "commands",
            ),
        },
    },
    "protocolVersion",
    "name",
    "type",
    "taskRoles",
)
FAILURE_RULES = _object(
    {
        "version": STRING,
        "spec": {
            "type": "array",
            "items": _object(
                {
                    "code": {"type": "integer"},
                    "phrase": {"type": "string", "pattern": r"^\S+$"},
                    "reason": STRING,
                    "solution": NAMES,
                    "pattern": _object(
                        {
                            "runtimeContainerPatterns": {
                                "type": "array",
                                "items": _object({"exitCode": {"type": "integer"}, "userLogRegex": STRING}),
                            }
                        }
                    ),
                },
                "code",
                "phrase",
            ),
        },
    },
    "spec",
)
DURATION = {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$"}
LABELS = {"type": "object", "additionalProperties": STRING}
# The alerting configuration (libs/alerting), Alertmanager's field names; sent as YAML.
ALERT_RULES = _object(
    {
        "settings": _object({"evaluation_interval": DURATION, "status_change_keep": DURATION}),
        "rules": {
            "type": "array",
            "items": _object(
                {
                    "alert": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                    "expr": STRING,
                    "for": DURATION,
                    "labels": LABELS,
                    "annotations": LABELS,
                },
                "alert",
                "expr",
            ),
        },
        "route": _object({"receiver": STRING, "group_by": NAMES, "group_wait": DURATION}),
        "receivers": {"type": "array", "items": _object({"name": STRING}, "name")},
    }
)
VC_CONFIG = _object(
    {
        "virtualClusters": {
            "type": "object",
            "additionalProperties": _object(
                {
                    "virtualCells": {
                        "type": "array",
                        "items": _object({"cellType": STRING, "cellNumber": COUNT}, "cellType", "cellNumber"),
                    }
                }
            ),
        },
        "userLimits": {
            "type": "object",
            "additionalProperties": _object({"maxGpusPerUser": COUNT}),
        },
    }
)
ACLS = _object({"acls": _object({"admin": BOOLEAN, "virtualClusters": NAMES, "storageConfigs": NAMES})})
USER_NAME = {"type": "string", "pattern": r"^[\w.-]+$"}
PASSWORD = {"type": "string", "minLength": 6}
USER_FIELDS = {
    "email": STRING,
    "admin": BOOLEAN,
    "virtualCluster": NAMES,
    "extension": OBJECT,
}
GROUP_FIELDS = {"description": STRING, "externalName": STRING, "extension": ACLS}
GROUPNAME = _json(_object({"groupname": STRING}, "groupname"))
TAG = _json(_object({"value": {"type": "string", "minLength": 1}}, "value"))

# Keyed by method and path under the prefix; a trailing slash variant shares its entry.
INPUTS: dict[tuple[str, str], Inputs] = {
    ("POST", "/v2/authn/basic/login"): Inputs(
        body={"application/x-www-form-urlencoded": CREDENTIALS, "application/json": CREDENTIALS}
    ),
    ("POST", "/v1/token"): Inputs(
        body={"application/x-www-form-urlencoded": CREDENTIALS, "application/json": CREDENTIALS}
    ),
    ("POST", "/v2/jobs"): Inputs(query={"dryRun": BOOLEAN}, body={"text/yaml": JOB}),
    ("GET", "/v2/jobs"): Inputs(
        query={
            "username": STRING,
            "vc": STRING,
            "state": STRING,
            "keyword": STRING,
            "tagsContain": STRING,
            "tagsNotContain": STRING,
            "jobPriority": STRING,
            "offset": COUNT,
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
            "order": {
                "type": "string",
                "pattern": rf"^({'|'.join(ORDER_FIELDS)})(,(ASC|DESC|asc|desc))?$",
            },
            "withTotalCount": BOOLEAN,
        }
    ),
    ("PUT", "/v2/jobs/{user}~{job}/executionType"): Inputs(
        body=_json(_object({"value": {"enum": ["STOP", "START"]}}, "value"))
    ),
    ("PUT", "/v2/jobs/{user}~{job}/tag"): Inputs(body=TAG),
    ("DELETE", "/v2/jobs/{user}~{job}/tag"): Inputs(body=TAG),
    (
        "GET",
        "/v2/jobs/{user}~{job}/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}"
        "/attempts/{task_attempt}/logs/{file}",
    ): Inputs(
        query={
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_LIMIT},
            "offset": COUNT,
            "tailMode": BOOLEAN,
        }
    ),
    ("GET", "/v2/jobs/{user}~{job}/events"): Inputs(query={"type": STRING}),
    ("GET", "/v2/storages"): Inputs(query={"default": BOOLEAN}),
    ("PUT", "/v2/storages/{storage}"): Inputs(
        body=_json(
            _object(
                {
                    "type": {"type": "string", "enum": list(STORAGE_TYPES)},
                    "data": _object({"path": STRING, "mountPath": STRING}),
                    "default": BOOLEAN,
                    "share": BOOLEAN,
                    "volumeName": STRING,
                    "readOnly": BOOLEAN,
                    "mountOptions": NAMES,
                }
            )
        )
    ),
    ("GET", "/v2/kubernetes/pods"): Inputs(query={"namespace": STRING}),
    ("GET", "/v2/usage"): Inputs(
        query={
            "from": {**STRING, "description": "ISO-8601 time, or a time before now such as 7d, 24h"},
            "to": {**STRING, "description": "ISO-8601 time, a time before now, or now (the default)"},
            "by": {"type": "string", "enum": ["user", "vc"]},
        }
    ),
    ("GET", "/v2/authn/oidc/return"): Inputs(
        query={"code": STRING, "state": STRING, "error": STRING, "error_description": STRING}
    ),
    ("PUT", "/v2/failure-rules"): Inputs(body={"text/yaml": FAILURE_RULES}),
    ("PUT", "/v2/alert-rules"): Inputs(body={"text/yaml": ALERT_RULES}),
    ("GET", "/v2/cluster/sku-types"): Inputs(query={"vc": STRING}),
    ("PUT", "/v2/virtual-clusters/config"): Inputs(query={"force": BOOLEAN}, body={"text/yaml": VC_CONFIG}),
    ("PUT", "/v2/virtual-clusters/{vc}"): Inputs(
        query={"force": BOOLEAN},
        body=_json(
            _object(
                {
                    "gpus": COUNT,
                    "model": STRING,
                    "cells": {"type": "object", "additionalProperties": COUNT},
                    "cpu": COUNT,
                    "memoryMB": COUNT,
                }
            )
        ),
    ),
    ("DELETE", "/v2/virtual-clusters/{vc}"): Inputs(query={"force": BOOLEAN}),
    ("POST", "/v2/users"): Inputs(
        body=_json(
            _object({"username": USER_NAME, "password": PASSWORD, **USER_FIELDS}, "username", "password")
        )
    ),
    ("PUT", "/v2/users"): Inputs(
        body=_json(
            _object(
                {
                    "data": _object({"username": USER_NAME, "password": PASSWORD, **USER_FIELDS}, "username"),
                    "patch": BOOLEAN,
                },
                "data",
            )
        )
    ),
    ("PUT", "/v2/users/me"): Inputs(
        body=_json(
            _object(
                {
                    "data": _object(
                        {
                            "username": USER_NAME,
                            "email": STRING,
                            "oldPassword": STRING,
                            "newPassword": PASSWORD,
                            "extension": OBJECT,
                        }
                    ),
                    "patch": BOOLEAN,
                },
                "data",
            )
        )
    ),
    ("POST", "/v2/tokens/application"): Inputs(
        body=_json(
            _object(
                {
                    "name": {"type": "string", "maxLength": 64},
                    "expiration": {"type": "integer", "minimum": 60, "maximum": 10 * 366 * 86400},
                }
            )
        )
    ),
    ("PUT", "/v2/users/{user}/group"): Inputs(body=GROUPNAME),
    ("DELETE", "/v2/users/{user}/group"): Inputs(body=GROUPNAME),
    ("PUT", "/v2/users/{user}/grouplist"): Inputs(body=_json(_object({"grouplist": NAMES}, "grouplist"))),
    ("POST", "/v2/groups"): Inputs(
        body=_json(_object({"groupname": USER_NAME, **GROUP_FIELDS}, "groupname"))
    ),
    ("PUT", "/v2/groups"): Inputs(
        body=_json(
            _object(
                {"data": _object({"groupname": STRING, **GROUP_FIELDS}, "groupname"), "patch": BOOLEAN},
                "data",
            )
        )
    ),
}


def _path_parameters(resource: web.AbstractResource, path: str) -> list[dict[str, Any]]:
    """Each path parameter, typed when its handler parses it, else bound by the route's pattern."""
    pattern = resource.get_info().get("pattern")
    expressions = dict(ROUTE_GROUP.findall(pattern.pattern)) if pattern is not None else {}
    parameters = []
    for name in PATH_PARAMETER.findall(path):
        schema = PATH_TYPES.get(name)
        if schema is None:
            expression = expressions.get(name, "[^{}/]+")
            schema = {"type": "string", "pattern": f"^{expression}$"}
        parameters.append({"name": name, "in": "path", "required": True, "schema": schema})
    return parameters


def _operation(
    route: web.AbstractRoute, resource: web.AbstractResource, path: str, operation_id: str
) -> dict[str, Any]:
    doc = (route.handler.__doc__ or "").strip()
    summary = doc.splitlines()[0] if doc else f"{route.method} {path}"
    error = {"$ref": "#/components/responses/Error"}
    inputs = INPUTS.get((route.method, path.removeprefix("/api").rstrip("/")), Inputs())
    query = [{"name": name, "in": "query", "schema": schema} for name, schema in inputs.query.items()]
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [path.split("/")[3] if path.count("/") >= 3 else "api"],
        "parameters": _path_parameters(resource, path) + query,
        "responses": {"2XX": {"description": "Succeeded"}, "4XX": error, "5XX": error},
    }
    if inputs.body:
        operation["requestBody"] = {
            "required": True,
            "content": {media: {"schema": schema} for media, schema in inputs.body.items()},
        }
    return operation


def document(app: web.Application) -> dict[str, Any]:
    """The OpenAPI 3.0 document of every route ``app`` serves under ``/api``."""
    paths: dict[str, dict[str, Any]] = {}
    used: set[str] = set()
    for route in app.router.routes():
        if route.resource is None or route.method == "HEAD":
            continue
        path = route.resource.canonical
        if not path.startswith("/api/"):
            continue
        name = getattr(route.handler, "__name__", "operation")
        operation_id = name if name not in used else f"{name}_{len(used)}"
        used.add(operation_id)
        paths.setdefault(path, {})[route.method.lower()] = _operation(
            route, route.resource, path, operation_id
        )
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "REST API v2 (OpenPAI-compatible)",
            "version": "2.2.7",
            "description": "Every operation is also served under the /rest-server/api prefix.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {"Error": ERROR},
            "responses": {
                "Error": {
                    "description": "An error in OpenPAI's shape",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "basicAuth": {"type": "http", "scheme": "basic", "description": "user:application-token"},
            },
        },
        "security": [{"bearerAuth": []}, {"basicAuth": []}, {}],
    }


@routes.get("/v2/openapi.json")
async def openapi_document(request: web.Request) -> web.Response:
    """This API's OpenAPI document."""
    return web.json_response(document(request.app))
