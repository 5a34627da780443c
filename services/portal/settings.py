"""The portal's settings: where it listens, where the REST API is, how sessions are sealed."""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator

from libs.backbone.settings import BackboneSettings
from libs.web.addresses import socket_path

DEFAULT_PORT = 9187


class PortalSettings(BackboneSettings):
    """Settings of the portal (environment prefix ``PAI_``)."""

    service_name: str = "portal"
    portal_host: str = "127.0.0.1"
    portal_port: int = DEFAULT_PORT
    # A listening socket inherited from the supervisor, served instead of host and port (`pai up`
    # holds the portal's port while it restarts; libs/web/serving.py).
    portal_fd: int | None = None
    # The REST API the portal speaks for its users (and proxies under /api/v2 and /rest-server/api/v2):
    # http(s)://, or unix:/// REST's socket on this machine (`pai up`; libs/web/addresses.py).
    portal_rest_url: str = "http://127.0.0.1:9186"
    # The key sealing session cookies; None means <data dir>/portal-session.key (made at first start).
    # Replicas behind one address share it (a Kubernetes Secret).
    portal_secret_file: Path | None = None
    # Cookies only over HTTPS: on behind a TLS Ingress.
    portal_secure_cookies: bool = False
    # A session lasts as long as the REST login token it holds, at most this.
    portal_session_seconds: int = 7 * 24 * 3600
    # Live updates without the event gateway: how often the portal asks REST what changed.
    portal_poll_seconds: float = 0.5
    # Job lists less often: REST allows each user 60 job lists a minute.
    portal_list_poll_seconds: float = 5.0
    # Show "Sign in with OpenID Connect" (REST must have PAI_OIDC_* set too).
    oidc_issuer: str | None = None
    oidc_discovery_url: str | None = None

    @field_validator("portal_rest_url")
    @classmethod
    def _usable_url(cls, url: str) -> str:
        socket_path(url)  # refused at start, saying which forms there are
        return url
