"""Typed, immutable settings shared by every service.

Settings are read from the environment (prefix ``PAI_``) once, in a service's ``__main__``,
and passed down as a value: nothing below the composition root reads the environment, so
tests build settings explicitly and two services in one process never share hidden state.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

LogFormat = Literal["json", "console", "auto"]
LogLevel = Literal["debug", "info", "warning", "error"]
OtelExporter = Literal["none", "console", "otlp"]

ENV_PREFIX = "PAI_"


class SettingsError(ValueError):
    """Raised when the environment holds a value the platform cannot use; says which and how to fix."""


class BackboneSettings(BaseSettings):
    """What every service needs to reach the bus and report on itself."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    # The authority the bus's certificate is verified against (libs/backbone/bustls.py): with it,
    # a client speaks TLS first and sends its password to the real server only. None: plain
    # TCP (Kubernetes and docker-compose, where the bus is another pod).
    nats_ca: Path | None = None
    # The service's own NATS user and password (libs/backbone/busauth.py); None: no authentication
    # (a development server). Given to services only, never to a task.
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    service_name: str = "pai"
    # Copies of every stream and KV bucket (PAI_STREAM_REPLICAS): 3 on a three-node NATS cluster;
    # None creates them with one (the embedded bus) and never changes what exists.
    stream_replicas: int | None = Field(default=None, ge=1, le=5)
    # How often the client pings its server, and how many unanswered pings drop the connection
    # (then it reconnects to another server of the cluster): a frozen server is noticed in about
    # interval x (outstanding + 1) seconds. nats-py's default, 120 s, suits one server.
    nats_ping_interval: float = Field(default=120.0, gt=0)
    # "auto" picks console output on a terminal and JSON lines everywhere else.
    log_format: LogFormat = "auto"
    log_level: LogLevel = "info"
    otel_exporter: OtelExporter = "none"
    # OTLP over HTTP; None lets the exporter use OTEL_EXPORTER_OTLP_* or its default.
    otel_endpoint: str | None = None
    data_dir: Path = Path(".pai")

    def resolved_log_format(self) -> Literal["json", "console"]:
        """The renderer to use, deciding "auto" by whether stderr is a terminal."""
        if self.log_format == "auto":
            return "console" if sys.stderr.isatty() else "json"
        return self.log_format


def load_settings(**overrides: object) -> BackboneSettings:
    """Read settings from the environment, turning validation errors into one readable message.

    Keyword overrides win over the environment (a CLI flag, for example).
    """
    try:
        return BackboneSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            variable = f"{ENV_PREFIX}{field.upper()}"
            problems.append(f"{variable}: {error['msg']} (got {error.get('input')!r})")
        raise SettingsError(
            "invalid platform settings; fix or unset these environment variables:\n  " + "\n  ".join(problems)
        ) from None
