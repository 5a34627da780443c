"""A service whose background task raises stops, with the error's traceback in its log, and
`pai up`'s supervisor starts it again; the platform then runs jobs as before.

The bug is planted in the real service, started by the real supervisor: a `sitecustomize` on
the service's PYTHONPATH replaces one of its background tasks (the orchestrator's failure rules'
watch, REST's VC names' watch) with one that raises, in its first life only. Without a task
group, the task would fail unseen and the service go on without following those changes (REST
answering with VC names that no longer follow the scheduler's config), never restarted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.platform import EXAMPLES, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)

PLANT = """
import os

if os.environ.get("PAI_SERVICE_NAME") == "{service}":
    marker = os.environ["PAI_TEST_PLANTED_ONCE"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        from {module} import {holder}

        async def watch(self):
            raise LookupError("{message}")

        {holder}.watch = watch
"""


@pytest.mark.parametrize(
    ("service", "module", "holder", "message"),
    [
        (
            "orchestrator",
            "services.orchestrator.adapters.rules",
            "RulesKeeper",
            "a bug planted in the failure rules' watch",
        ),
        (
            "rest",
            "services.rest.adapters.vc_names",
            "VirtualClusterNames",
            "a bug planted in the VC names' watch",
        ),
    ],
)
async def test_a_background_task_that_raises_stops_its_service_and_pai_up_restarts_it(
    tmp_path: Path, service: str, module: str, holder: str, message: str
) -> None:
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(
        PLANT.format(service=service, module=module, holder=holder, message=message)
    )
    marker = tmp_path / "planted"
    env = {"PYTHONPATH": str(plant), "PAI_TEST_PLANTED_ONCE": str(marker)}
    async with running_platform(tmp_path / "data", env=env) as platform:
        child = platform.child(service)
        await eventually(polled(lambda: child.restarts), lambda restarts: restarts >= 1, within=60)
        assert marker.exists()
        log_text = (tmp_path / "data" / "logs" / f"{service}.log").read_text()
        assert "Traceback (most recent call last)" in log_text
        assert f"LookupError: {message}" in log_text
        job_id = await platform.submit((EXAMPLES / "hello.yaml").read_text())
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        assert child.restarts == 1  # its second life runs on
