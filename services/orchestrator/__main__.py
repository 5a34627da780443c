"""Run the orchestrator service: `python -m services.orchestrator`."""

import asyncio
import sys

from pydantic import ValidationError

from libs.backbone.logging import configure_logging
from libs.backbone.running import run_service
from libs.backbone.settings import ENV_PREFIX
from services.orchestrator.app import OrchestratorSettings, main

try:
    settings = OrchestratorSettings()
except ValidationError as exc:
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        print(f"{ENV_PREFIX}{field.upper()}: {error['msg']} (got {error.get('input')!r})", file=sys.stderr)
    print("invalid orchestrator settings: fix or unset the environment variables above", file=sys.stderr)
    sys.exit(2)
configure_logging(settings)


async def _main(stop: asyncio.Event) -> None:
    await main(settings, stop)


run_service(_main, settings)
