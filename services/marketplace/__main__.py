"""Run the marketplace: `python -m services.marketplace`."""

import asyncio

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from services.marketplace.app import serve
from services.marketplace.settings import MarketplaceSettings

settings = MarketplaceSettings()
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await serve(settings, stop)


run_service(_main, settings)
