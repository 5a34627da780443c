"""A list-then-watch loop over the managed pods, with the API server's watch semantics.

Kept apart from the executor because it is the part that must be exactly right about
Kubernetes: the list gives a resourceVersion, the watch resumes from the last one seen
(ADDED/MODIFIED/DELETED), a watch that times out is simply resumed, and an ERROR event with a
410 Status (the history was compacted) forces a fresh list in which pods that vanished meanwhile
are delivered as DELETED. Every call blocks (urllib3), so it runs in a worker thread; lines are
handed to the event loop one by one, and `close` shuts the open response down so no thread
outlives the watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from typing import Any

import structlog
import urllib3.exceptions
from kubernetes.client import ApiClient, CoreV1Api, V1Pod
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = structlog.get_logger(__name__)

EventHandler = Callable[[str, V1Pod], None]
_lines: Callable[[Any], Iterable[str]] = iter_resp_lines


class _Gone(Exception):
    """The watch's resourceVersion is older than the API server keeps: list again."""


class PodWatch:
    def __init__(
        self, api: ApiClient, namespace: str, selector: str, on_event: EventHandler, *, timeout: int = 60
    ) -> None:
        self._api = api
        self._core = CoreV1Api(api)
        self._namespace = namespace
        self._selector = selector
        self._on_event = on_event
        self._timeout = timeout
        self._known: dict[str, V1Pod] = {}
        self._rv: str | None = None
        self._closed = False
        self._response: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """List once (every pod is delivered before this returns), then watch in the background."""
        await self.relist()
        self._task = asyncio.ensure_future(self._forever())

    async def close(self) -> None:
        self._closed = True
        self._shutdown()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _shutdown(self) -> None:
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, urllib3.exceptions.HTTPError):
                response.shutdown()

    def _deliver(self, kind: str, pod: V1Pod) -> None:
        name = pod.metadata.name if pod.metadata is not None else None
        if name is None:
            return
        if kind == "DELETED":
            self._known.pop(name, None)
        else:
            self._known[name] = pod
        self._on_event(kind, pod)

    async def relist(self) -> None:
        listed = await asyncio.to_thread(
            self._core.list_namespaced_pod, self._namespace, label_selector=self._selector
        )
        present = {pod.metadata.name: pod for pod in listed.items if pod.metadata is not None}
        for name in [n for n in self._known if n not in present]:
            self._deliver("DELETED", self._known[name])
        for pod in present.values():
            self._deliver("MODIFIED", pod)
        self._rv = listed.metadata.resource_version if listed.metadata is not None else None

    def _is_closed(self) -> bool:
        return self._closed

    async def _forever(self) -> None:
        backoff = 0.1
        while not self._closed:
            try:
                if self._rv is None:
                    await self.relist()
                await self._once()
                backoff = 0.1
            except _Gone:
                log.info("pod watch expired; listing again")
                self._rv = None
            except (ApiException, urllib3.exceptions.HTTPError, OSError, TimeoutError, ValueError):
                # The API away, a connection cut, a line that is not JSON: list and watch again.
                if self._is_closed():
                    return
                log.exception("pod watch failed; retrying", delay=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _once(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def stream() -> None:
            try:
                response: Any = self._core.list_namespaced_pod(
                    self._namespace,
                    label_selector=self._selector,
                    watch=True,
                    resource_version=self._rv,
                    timeout_seconds=self._timeout,
                    _preload_content=False,
                )
                self._response = response
                try:
                    for line in _lines(response):
                        if self._closed:
                            break
                        loop.call_soon_threadsafe(lines.put_nowait, line)
                finally:
                    self._response = None
                    response.release_conn()
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, None)

        reader = asyncio.ensure_future(asyncio.to_thread(stream))
        try:
            while (line := await lines.get()) is not None:
                self._line(line)
        finally:
            if not reader.done():
                self._shutdown()
            await asyncio.gather(reader, return_exceptions=True)
        error = reader.exception()
        if error is not None and not self._is_closed():
            raise error

    def _line(self, line: str) -> None:
        event = json.loads(line)
        kind, raw = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise _Gone(raw.get("message", ""))
            raise RuntimeError(f"pod watch error: {raw.get('message', raw)}")
        if kind == "BOOKMARK":
            self._rv = (raw.get("metadata") or {}).get("resourceVersion") or self._rv
            return
        pod: V1Pod = self._api.deserialize(json.dumps(raw), "V1Pod", "application/json")
        if pod.metadata is not None and pod.metadata.resource_version:
            self._rv = pod.metadata.resource_version
        self._deliver(str(kind), pod)
