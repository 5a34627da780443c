"""A small, stateful Kubernetes API server for tests, spoken to by the real kubernetes client.

It keeps objects of any kind in memory, under the same URL layout as the real API
(/api/v1/namespaces/NS/pods/NAME, /apis/apps/v1/namespaces/NS/deployments, /api/v1/nodes, ...),
and implements what clients rely on:

- one resourceVersion counter for every write, set on each object and on list responses;
- create (409 AlreadyExists), get, list with an equality labelSelector, replace (PUT),
  delete (404 NotFound), all answering with the real Status bodies;
- watch=true: ADDED/MODIFIED/DELETED events as JSON lines, starting after the resourceVersion
  given (or with the current objects as ADDED when none is given), ended by timeoutSeconds;
  a resourceVersion older than the kept history gets the ERROR event with a 410 Status,
  exactly as a compacted etcd answers, so clients must relist;
- owner references: deleting an object deletes the objects it owns (as the garbage collector).

Tests play the kubelet through `set_pod_status`, and the scheduler of etcd through `compact`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

Collection = tuple[str, str, str | None]
"""(api prefix such as 'api/v1' or 'apis/apps/v1', plural, namespace or None)."""

POD_KIND_DEFAULTS = {"pods": ("v1", "Pod")}


@dataclass
class _Event:
    rv: int
    type: str
    collection: Collection
    obj: dict[str, Any]


@dataclass
class FakeKubernetes:
    """The state of the fake cluster; `app()` serves it."""

    objects: dict[Collection, dict[str, dict[str, Any]]] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)
    rv: int = 1
    compacted: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    watch_errors: int = 0
    logs: dict[str, str] = field(default_factory=dict)
    """Container output per pod name, served by the pod's /log."""
    paused: bool = False
    _changed: asyncio.Condition | None = None

    # -- state changes -------------------------------------------------------------------

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _emit(self, kind: str, collection: Collection, obj: dict[str, Any]) -> None:
        self.history.append(_Event(self.rv, kind, collection, copy.deepcopy(obj)))
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)

    async def put(self, collection: Collection, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (what create and PUT do), emitting the event."""
        items = self.objects.setdefault(collection, {})
        meta = obj.setdefault("metadata", {})
        name = meta["name"]
        existed = items.get(name)
        if existed is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if collection[1] == "pods":
                obj.setdefault("status", {"phase": "Pending"})
        else:
            meta["uid"] = existed["metadata"]["uid"]
            meta["creationTimestamp"] = existed["metadata"]["creationTimestamp"]
        if collection[2] is not None:
            meta["namespace"] = collection[2]
        self._bump(obj)
        items[name] = obj
        await self._emit("ADDED" if existed is None else "MODIFIED", collection, obj)
        return obj

    async def remove(self, collection: Collection, name: str) -> dict[str, Any] | None:
        obj = self.objects.get(collection, {}).pop(name, None)
        if obj is None:
            return None
        self._bump(obj)
        await self._emit("DELETED", collection, obj)
        uid = obj["metadata"]["uid"]
        for other, items in list(self.objects.items()):
            for other_name, item in list(items.items()):
                owners = item["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    await self.remove(other, other_name)
        return obj

    def get(self, collection: Collection, name: str) -> dict[str, Any] | None:
        return self.objects.get(collection, {}).get(name)

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        return self.objects.get(("api/v1", "pods", namespace), {})

    async def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Play the kubelet: replace a pod's status."""
        collection = ("api/v1", "pods", namespace)
        pod = copy.deepcopy(self.objects[collection][name])
        pod["status"] = status
        await self.put(collection, pod)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self.remove(("api/v1", "pods", namespace), name)

    async def pause_watches(self) -> None:
        """End every open watch; new ones wait until `resume_watches` (a network partition)."""
        self.paused = True
        cond = self._condition()
        async with cond:
            cond.notify_all()

    async def resume_watches(self) -> None:
        self.paused = False
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def compact(self) -> None:
        """Forget the history: any watch from an older resourceVersion now gets 410 Gone."""
        self.compacted = self.rv
        self.history.clear()

    # -- HTTP ----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        parsed = _parse(request.path)
        if parsed is None:
            return _status(
                404, "NotFound", f"the server could not find the requested resource {request.path}"
            )
        collection, name = parsed
        if request.method == "GET" and name is None:
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(request, collection)
            return self._list(request, collection)
        if request.method == "GET" and request.path.endswith("/log"):
            obj = self.get(collection, name or "")
            if obj is None:
                return _not_found(collection, name)
            lines = self.logs.get(name or "", "").splitlines(keepends=True)
            tail = int(request.query.get("tailLines", "0") or 0)
            return web.Response(text="".join(lines[-tail:] if tail else lines), content_type="text/plain")
        if request.method == "GET":
            obj = self.get(collection, name or "")
            return _json(obj) if obj is not None else _not_found(collection, name)
        if request.method == "POST" and name is None:
            body = await request.json()
            if self.get(collection, body.get("metadata", {}).get("name", "")) is not None:
                return _status(
                    409, "AlreadyExists", f'{collection[1]} "{body["metadata"]["name"]}" already exists'
                )
            return _json(await self.put(collection, _with_kind(collection, body)), 201)
        if request.method == "PUT" and name is not None:
            body = await request.json()
            if self.get(collection, name) is None:
                return _not_found(collection, name)
            return _json(await self.put(collection, _with_kind(collection, body)))
        if request.method == "DELETE" and name is not None:
            obj = await self.remove(collection, name)
            return _json(obj) if obj is not None else _not_found(collection, name)
        return _status(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _selected(self, request: web.Request, collection: Collection) -> list[dict[str, Any]]:
        selector = _selector(request.query.get("labelSelector", ""))
        groups = [c for c in self.objects if c[:2] == collection[:2] and collection[2] in (None, c[2])]
        return [
            obj
            for c in groups
            for obj in self.objects[c].values()
            if all(obj["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
        ]

    def _list(self, request: web.Request, collection: Collection) -> web.Response:
        items = self._selected(request, collection)
        return _json(
            {
                "kind": "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, collection: Collection) -> web.StreamResponse:
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: not self.paused)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        selector = _selector(request.query.get("labelSelector", ""))
        timeout = float(request.query.get("timeoutSeconds", "30"))
        deadline = time.monotonic() + timeout
        since = request.query.get("resourceVersion", "")

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await response.write((json.dumps({"type": kind, "object": obj}) + "\n").encode())

        if since in ("", "0"):
            for obj in self._selected(request, collection):
                await send("ADDED", obj)
            cursor = self.rv
        elif int(since) < self.compacted:
            self.watch_errors += 1
            await send(
                "ERROR", _status_body(410, "Expired", f"too old resource version: {since} ({self.compacted})")
            )
            return response
        else:
            cursor = int(since)
        while not self.paused:
            for event in [e for e in self.history if e.rv > cursor]:
                cursor = event.rv
                c = event.collection
                if c[:2] != collection[:2] or collection[2] not in (None, c[2]):
                    continue
                labels = event.obj["metadata"].get("labels", {})
                if all(labels.get(k) == v for k, v in selector.items()):
                    await send(event.type, event.obj)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return response
            async with cond:
                if not self.paused and not any(e.rv > cursor for e in self.history):
                    try:
                        await asyncio.wait_for(cond.wait(), remaining)
                    except TimeoutError:
                        return response
        return response


def _parse(path: str) -> tuple[Collection, str | None] | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "api/v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = "/".join(parts[:3]), parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        return (prefix, rest[2], rest[1]), (rest[3] if len(rest) > 3 else None)
    if 1 <= len(rest) <= 2:
        return (prefix, rest[0], None), (rest[1] if len(rest) > 1 else None)
    return None


def _selector(text: str) -> dict[str, str]:
    pairs = [p.split("=", 1) for p in text.split(",") if "=" in p]
    return {k.strip(): v.strip() for k, v in pairs}


def _with_kind(collection: Collection, body: dict[str, Any]) -> dict[str, Any]:
    api_version, kind = POD_KIND_DEFAULTS.get(collection[1], ("", ""))
    if api_version:
        body.setdefault("apiVersion", api_version)
        body.setdefault("kind", kind)
    return body


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status)


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    return _json(_status_body(code, reason, message), code)


def _not_found(collection: Collection, name: str | None) -> web.Response:
    return _status(404, "NotFound", f'{collection[1]} "{name}" not found')


@asynccontextmanager
async def serving(fake: FakeKubernetes) -> AsyncIterator[str]:
    """Serve the fake on a free loopback port; yields its base URL."""
    runner = web.AppRunner(fake.app(), shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
