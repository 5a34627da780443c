"""The monitor's settings (PAI_* environment variables), read once in __main__ and passed down."""

from __future__ import annotations

import socket

from pydantic import Field

from libs.backbone.settings import BackboneSettings


class MonitorSettings(BackboneSettings):
    service_name: str = "monitor"
    node_name: str = socket.gethostname()
    # This replica's name in the cluster view's lease.
    instance: str = socket.gethostname()
    node_address: str = "127.0.0.1"
    report_every: float = 15.0
    cpu_overcommit: float = Field(default=1.0, gt=0)
    memory_overcommit: float = Field(default=1.0, gt=0)
    # What an admin declares the node offers, in place of the machine less the reserve.
    node_cpus: int | None = Field(default=None, ge=1)
    node_memory_mb: int | None = Field(default=None, ge=64)
    # What the platform keeps of the machine (libs/protocol/capacity.py has the defaults).
    reserve_cpus: float | None = Field(default=None, ge=0)
    reserve_memory_mb: int | None = Field(default=None, ge=0)
    metrics_port: int = 9102  # 0: any free port; -1: no Prometheus endpoint
    # A listening socket inherited from the supervisor, served instead of the port (`pai up`
    # holds the metrics port while the monitor restarts; libs/web/serving.py).
    metrics_fd: int | None = None
    metrics_every: float = 15.0
    node_lost_after: float = 60.0
    service_down_after: float = 30.0
    heartbeat_every: float = 5.0
    # `N` or `N:MODEL`: GPUs declared on a machine that has none (`pai up --gpus`).
    simulated_gpus: str = ""
    # The metrics history: one averaged point per step (seconds), kept this many hours.
    metrics_history_step: float = 60.0
    metrics_history_hours: float = 6.0
