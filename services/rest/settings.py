"""The REST service's settings: the shared backbone ones plus where it listens and stores.

Loaded once in ``__main__`` from ``PAI_*`` variables and passed down, so tests build them
explicitly. The admin password comes from the caller (``pai up`` passes it); when it is
absent one is generated at first start and written next to the database for the operator.
"""

from __future__ import annotations

from pathlib import Path

from libs.backbone.settings import BackboneSettings

DEFAULT_PORT = 9186


class RestSettings(BackboneSettings):
    """Settings of the REST service (environment prefix ``PAI_``)."""

    service_name: str = "rest"
    rest_host: str = "127.0.0.1"
    rest_port: int = DEFAULT_PORT
    # None means an embedded SQLite file in the data dir.
    database_url: str | None = None
    admin_user: str = "admin"
    admin_password: str | None = None
    # Login tokens last a week unless the login request asks for less.
    token_ttl_seconds: int = 7 * 24 * 3600
    # How long a log request waits for the orchestrator before answering 503.
    logs_timeout_seconds: float = 5.0
    # How long a successful token check is remembered; writes to accounts on this instance forget
    # it at once, other instances within this time. 0 checks the database on every request.
    auth_cache_seconds: float = 1.0
    # Where the JWT signing secret is kept; None means <data dir>/rest-jwt.secret.
    jwt_secret_file: Path | None = None

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir.resolve() / 'rest.db'}"

    def resolved_jwt_secret_file(self) -> Path:
        return self.jwt_secret_file or self.data_dir / "rest-jwt.secret"
