"""Run the alerter service: `python -m services.alerter`."""

import asyncio

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from services.alerter.app import AlerterSettings, main

settings = AlerterSettings()
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await main(settings, stop)


run_service(_main, settings)
