"""Our own OpenAPI document, generated from the router at request time so it cannot drift.

Every route the application serves under ``/api`` appears with its method, its path
parameters, the handler's docstring as summary and the error shape every route shares
(OpenPAI's ``{code, message}``). The same operations are served under ``/rest-server/api``.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

routes = web.RouteTableDef()

PATH_PARAMETER = re.compile(r"{(\w+)(?::[^}]*)?}")
ERROR = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
    "required": ["code", "message"],
}


def _operation(method: str, path: str, handler: Any, operation_id: str) -> dict[str, Any]:
    doc = (handler.__doc__ or "").strip()
    summary = doc.splitlines()[0] if doc else f"{method} {path}"
    error = {"$ref": "#/components/responses/Error"}
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [path.split("/")[3] if path.count("/") >= 3 else "api"],
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in PATH_PARAMETER.findall(path)
        ],
        "responses": {"2XX": {"description": "Succeeded"}, "4XX": error, "5XX": error},
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
            route.method, path, route.handler, operation_id
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
