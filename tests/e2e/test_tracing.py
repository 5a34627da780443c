"""A job's trace crosses the services: with an exporter set, each one records its spans of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.platform import job_yaml, running_platform

pytestmark = pytest.mark.timeout(180)

# The console exporter prints each span as indented JSON: its name, then its context.
SPAN = re.compile(r'"name": "([^"]+)",\s*"context": \{\s*"trace_id": "0x([0-9a-f]{32})"')


def spans(log: Path) -> list[tuple[str, str]]:
    """(span name, trace id) of every span a service's log shows."""
    return SPAN.findall(log.read_text(encoding="utf-8", errors="replace"))


async def test_every_service_a_job_crosses_records_its_spans(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with running_platform(data, env={"PAI_OTEL_EXPORTER": "console"}) as platform:
        job_id = await platform.submit(job_yaml("traced", {"worker": {"commands": ["true"]}}))
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
    # Stopped: every service flushed what it recorded.
    logs = data / "logs"
    assert "send pai.job.*.job.submitted" in {name for name, _ in spans(logs / "rest.log")}
    # The scheduler decides for everything that arrived at once, so its announcement starts the
    # trace that the job's placement, its tasks and the read model's updates then share.
    placed = {t for name, t in spans(logs / "scheduler.log") if name == "send pai.job.*.job.scheduled"}
    assert len(placed) == 1, spans(logs / "scheduler.log")
    [trace] = placed
    orchestrator = {name for name, t in spans(logs / "orchestrator.log") if t == trace}
    assert {"process pai.job.*.job.scheduled", "send pai.job.*.task.started"} <= orchestrator, orchestrator
    rest = {name for name, t in spans(logs / "rest.log") if t == trace}
    assert "process pai.job.*.task.started" in rest, rest
