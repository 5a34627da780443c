"""Run the scheduler service: `python -m services.scheduler`."""

import asyncio

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from services.scheduler.app import SchedulerSettings, main

settings = SchedulerSettings()
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await main(settings, stop)


run_service(_main, settings)
