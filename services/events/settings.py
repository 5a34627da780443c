"""The gateway's settings, read once in ``__main__`` (``PAI_`` environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from libs.backbone.settings import BackboneSettings
from libs.web.addresses import socket_path

DEFAULT_PORT = 9188
DAY = 24 * 3600.0


class EventsSettings(BackboneSettings):
    service_name: str = "events"
    events_host: str = "127.0.0.1"
    events_port: int = DEFAULT_PORT
    # A Unix socket to serve on instead of the port (the embedded platform: rest passes the
    # gateway's paths to it, and no TCP port stands between them; libs/web/addresses.py).
    events_socket: Path | None = None
    # The public REST API, asked who a token stands for (GET /api/v2/users/me): http(s)://, or
    # unix:/// REST's socket on this machine.
    rest_url: str = "http://127.0.0.1:9186"
    identity_cache_seconds: float = Field(default=5.0, ge=0)
    # A comment line on idle streams, so proxies and browsers keep them open.
    events_keepalive_seconds: float = Field(default=15.0, gt=0)
    # Events queued for one subscriber before it is closed as too slow (it resumes by its id).
    events_subscriber_buffer: int = Field(default=10_000, ge=1)
    # Webhooks: exponential backoff from the first delay to the largest, for at least the window.
    webhook_backoff_first_seconds: float = Field(default=1.0, gt=0)
    webhook_backoff_max_seconds: float = Field(default=3600.0, gt=0)
    webhook_retry_window_seconds: float = Field(default=DAY, gt=0)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    # Address ranges receivers may not be in (comma-separated CIDRs); the Kubernetes manifests
    # forbid loopback, link-local, private and the cluster's ranges; the embedded platform none,
    # so local receivers work. Addresses are normalised first (IPv4-mapped IPv6, 0.0.0.0, ...).
    webhook_forbidden_networks: str = ""
    # Ranges an admin allows although a forbidden range holds them (comma-separated CIDRs).
    webhook_allowed_networks: str = ""
    # This platform's own listening ports (comma-separated), never reachable on any address of
    # this machine: the embedded platform passes its API, portal, metrics and NATS ports.
    webhook_forbidden_ports: str = ""
    # Deliveries in flight at once per subscription: its own queue, its own budget.
    webhook_concurrency: int = Field(default=8, ge=1)
    # A 4xx answer (but 408, 429): retried up to webhook_client_error_attempts attempts, then
    # the subscription is marked failing ("retry"); failing at once ("fail"); or recorded and
    # the next event sent ("drop").
    webhook_client_errors: Literal["retry", "fail", "drop"] = "retry"
    webhook_client_error_attempts: int = Field(default=3, ge=1)
    # Delivery attempts kept per subscription for GET .../deliveries.
    webhook_deliveries_kept: int = Field(default=100, ge=1)

    @field_validator("rest_url")
    @classmethod
    def _usable_url(cls, url: str) -> str:
        socket_path(url)  # refused at start, saying which forms there are
        return url
