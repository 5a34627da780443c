"""``python -m services.rest``: read settings, set up logs and traces, serve until SIGTERM."""

from __future__ import annotations

import sys

from aiohttp import web
from pydantic import ValidationError

from libs.backbone.logging import configure_logging, get_logger
from libs.backbone.running import arm_exit_watchdog, new_event_loop
from libs.backbone.tracing import configure_tracing
from libs.web.serving import inherited_socket
from services.rest.app import build_app
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


async def _bounded_stop(app: web.Application) -> None:
    """A stop never hangs: with the bus down a drain can wait on nobody (libs/backbone/running.py)."""
    arm_exit_watchdog()


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
        # run_app handles SIGTERM/SIGINT: stops accepting, runs the cleanup contexts in reverse.
        app = build_app(settings)
        app.on_shutdown.append(_bounded_stop)
        web.run_app(
            app,
            **(
                {"sock": inherited_socket(settings.rest_fd)}
                if settings.rest_fd is not None
                else {"host": settings.rest_host, "port": settings.rest_port}
            ),
            # Beside the TCP port, the socket the platform's own services use (libs/web/addresses.py).
            path=str(settings.rest_socket) if settings.rest_socket else None,
            print=None,
            # Requests still running at a stop get a second; `pai up` kills at 2.5 s anyway.
            shutdown_timeout=1.0,
            loop=new_event_loop(),
        )
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
