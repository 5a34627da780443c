"""REST's background task that raises stops REST, with the error's traceback in its log, and
`pai up`'s supervisor starts it again; the platform then runs jobs as before.

The bug is planted in the real service, started by the real supervisor: a `sitecustomize` on
REST's PYTHONPATH replaces the VC names' watch (one of its background tasks) with one that
raises, in its first life only. Without the task group, the watch's task would fail unseen and
REST go on answering with VC names that no longer follow the scheduler's config, never restarted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.platform import EXAMPLES, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)

PLANT = """
import os

if os.environ.get("PAI_SERVICE_NAME") == "rest":
    marker = os.environ["PAI_TEST_PLANTED_ONCE"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        from services.rest.adapters.vc_names import VirtualClusterNames

        async def watch(self):
            raise LookupError("a bug planted in the VC names' watch")

        VirtualClusterNames.watch = watch
"""


async def test_a_rest_background_task_that_raises_stops_rest_and_pai_up_restarts_it(tmp_path: Path) -> None:
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(PLANT)
    marker = tmp_path / "planted"
    env = {"PYTHONPATH": str(plant), "PAI_TEST_PLANTED_ONCE": str(marker)}
    async with running_platform(tmp_path / "data", env=env) as platform:
        rest = platform.child("rest")
        await eventually(polled(lambda: rest.restarts), lambda restarts: restarts >= 1, within=60)
        assert marker.exists()
        log_text = (tmp_path / "data" / "logs" / "rest.log").read_text()
        assert "Traceback (most recent call last)" in log_text
        assert "LookupError: a bug planted in the VC names' watch" in log_text
        job_id = await platform.submit((EXAMPLES / "hello.yaml").read_text())
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        assert rest.restarts == 1  # its second life runs on
