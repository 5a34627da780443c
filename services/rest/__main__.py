"""``python -m services.rest``: read settings, set up logs and traces, serve until SIGTERM."""

from __future__ import annotations

import asyncio
import functools
import sys

from pydantic import ValidationError

from libs.backbone.logging import configure_logging, get_logger
from libs.backbone.running import new_event_loop, run_until_stopped
from libs.backbone.tracing import configure_tracing
from services.rest.app import serve
from services.rest.settings import RestSettings


def load() -> RestSettings:
    try:
        return RestSettings()
    except ValidationError as exc:
        # A field read under several names (OpenPAI's too) reports the PAI_ one as its location.
        names = ["_".join(str(p) for p in error["loc"]).upper() for error in exc.errors()]
        problems = [
            f"{name if name.startswith('PAI_') else 'PAI_' + name}: {error['msg']}"
            for name, error in zip(names, exc.errors(), strict=True)
        ]
        sys.exit("invalid REST settings; fix these environment variables:\n  " + "\n  ".join(problems))


def main() -> None:
    settings = load()
    configure_logging(settings)
    provider = configure_tracing(settings)
    log = get_logger("services.rest")
    log.info(
        "rest service starting",
        host=settings.rest_host,
        port=settings.rest_port,
        socket=str(settings.rest_socket) if settings.rest_socket else None,
    )
    try:
        # SIGTERM/SIGINT set the stop: no new requests, the cleanup contexts in reverse, and a
        # stop that hangs is cut short (libs/backbone/running.py). A background task that raises
        # ends the service with its error instead, for `pai up` or Kubernetes to restart it.
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(run_until_stopped(functools.partial(serve, settings)))
    except asyncio.CancelledError:
        sys.exit(130)
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
