"""What the monitor and its readers exchange over core NATS: heartbeats and metric samples.

Neither is a lifecycle fact worth keeping, so both travel on plain subjects, not on a stream:
a heartbeat missed is simply a heartbeat late, and a sample is replaced by the next one.
`pai.health.<service>` carries a service's heartbeat; `pai.metrics.<node id>` a batch of
samples with OpenPAI's metric names (the alerter evaluates rules on them).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from libs.protocol.subjects import ROOT, check_id

HEALTH_SUBJECTS = f"{ROOT}.health.*"
METRICS_SUBJECTS = f"{ROOT}.metrics.*"


def health_subject(service: str) -> str:
    return f"{ROOT}.health.{check_id(service, 'service name')}"


def metrics_subject(node_id: str) -> str:
    return f"{ROOT}.metrics.{check_id(node_id, 'node id')}"


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Heartbeat(_Message):
    service: str
    instance: str
    sent_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class MetricSample(_Message):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float


class MetricBatch(_Message):
    node: str
    samples: tuple[MetricSample, ...] = ()
