"""The marketplace's settings, read once in ``__main__`` (``PAI_`` environment variables)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from libs.backbone.settings import BackboneSettings
from libs.web.addresses import socket_path

DEFAULT_PORT = 9189


class MarketplaceSettings(BackboneSettings):
    service_name: str = "marketplace"
    marketplace_host: str = "127.0.0.1"
    marketplace_port: int = DEFAULT_PORT
    # A Unix socket to serve on instead of the port (the embedded platform: rest passes
    # /marketplace/api/ to it, and no TCP port stands between them; libs/web/addresses.py).
    marketplace_socket: Path | None = None
    # The public REST API, asked who a token stands for, which groups exist and the job limits:
    # http(s)://, or unix:/// REST's socket on this machine.
    rest_url: str = "http://127.0.0.1:9186"
    identity_cache_seconds: float = Field(default=5.0, ge=0)
    # The platform's SQL database (the marketplace keeps its own tables there); None means the
    # embedded SQLite file in the data dir, the one rest uses.
    database_url: str | None = None
    # Starter templates seeded at start; None: the ones packaged with the service.
    marketplace_starters_dir: Path | None = None
    marketplace_seed: bool = True

    @field_validator("rest_url")
    @classmethod
    def _usable_url(cls, url: str) -> str:
        socket_path(url)  # refused at start, saying which forms there are
        return url

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir.resolve() / 'rest.db'}"
