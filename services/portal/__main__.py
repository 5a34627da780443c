"""``python -m services.portal``: read settings, set up logs, serve the portal until SIGTERM."""

from __future__ import annotations

import sys

from aiohttp import web
from pydantic import ValidationError

from libs.backbone.logging import configure_logging, get_logger
from libs.backbone.running import new_event_loop
from libs.web.serving import inherited_socket
from services.portal.app import build_app
from services.portal.settings import PortalSettings


def main() -> None:
    try:
        settings = PortalSettings()
    except ValidationError as exc:
        problems = [
            "PAI_" + "_".join(str(p) for p in e["loc"]).upper() + ": " + e["msg"] for e in exc.errors()
        ]
        sys.exit("invalid portal settings; fix these environment variables:\n  " + "\n  ".join(problems))
    configure_logging(settings)
    log = get_logger("services.portal")
    log.info(
        "portal starting", host=settings.portal_host, port=settings.portal_port, rest=settings.portal_rest_url
    )
    web.run_app(
        build_app(settings),
        **(
            {"sock": inherited_socket(settings.portal_fd)}
            if settings.portal_fd is not None
            else {"host": settings.portal_host, "port": settings.portal_port}
        ),
        print=None,
        loop=new_event_loop(),
    )


if __name__ == "__main__":
    main()
