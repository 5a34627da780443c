"""Run the events gateway: `python -m services.events`."""

import asyncio

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from services.events.app import serve
from services.events.settings import EventsSettings

settings = EventsSettings()
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await serve(settings, stop)


run_service(_main, settings)
