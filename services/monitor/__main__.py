"""Run the monitor service: `python -m services.monitor`."""

import asyncio

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from services.monitor.app import main
from services.monitor.settings import MonitorSettings

settings = MonitorSettings()
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await main(settings, stop)


run_service(_main, settings)
