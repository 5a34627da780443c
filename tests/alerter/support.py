"""What the alerter's service tests share: an SMTP server that keeps mail, a webhook
receiver, and the alerter itself running on a real bus with a fake clock.

Other suites use it too (tests/rest/test_contacts.py mails a user registered through the
REST API), so it lives outside any one test module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from aiosmtpd.smtp import SMTP, Envelope, Session

from libs.alerting.config import load_config
from libs.backbone.connecting import Bus
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter


class Mailbox:
    """An aiosmtpd handler that keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content or b""
        self.messages.append(
            (list(envelope.rcpt_tos), content.encode() if isinstance(content, str) else content)
        )
        return "250 Message accepted for delivery"


@asynccontextmanager
async def smtp_server() -> AsyncIterator[tuple[Mailbox, int]]:
    mailbox = Mailbox()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(mailbox, hostname="localhost"), "127.0.0.1", 0)
    try:
        yield mailbox, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def webhook_server() -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield received, str(server.make_url("/hook"))
    finally:
        await server.close()


@asynccontextmanager
async def running_alerter(bus: Bus, config_text: str, clock: FakeClock) -> AsyncIterator[Alerter]:
    stop = asyncio.Event()
    alerter = Alerter(bus, config=load_config(config_text), clock=clock)
    await alerter.start(stop, watch=False)
    try:
        yield alerter
    finally:
        stop.set()
        await alerter.close()
