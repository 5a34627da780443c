"""The REST service on a real port in a background thread, for clients that block (the CLI)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from aiohttp import web

from services.rest.app import build_app
from services.rest.settings import RestSettings

T = TypeVar("T")


class ServerThread:
    """Runs the app with its own event loop; ``run`` executes a coroutine on that loop."""

    def __init__(self, settings: RestSettings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="rest-test-server", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(build_app(self.settings))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            raise RuntimeError(f"the REST test server did not start: {self._error!r}")
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
