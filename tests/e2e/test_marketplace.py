"""The marketplace on the embedded platform: a seeded template used through the API's address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from libs.protocol.events import JobState
from libs.protocol.subjects import JOBS_STREAM
from services.marketplace.adapters.counting import DURABLE
from tests.e2e.platform import running_platform
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(240)
ITEM = "/marketplace/api/items/hello-world"


async def test_a_seeded_template_submitted_with_its_origin_succeeds_and_counts_one_use(
    tmp_path: Path,
) -> None:
    async with running_platform(tmp_path / "data") as platform:
        api = platform.api

        async def item() -> dict[str, Any]:
            response = await api.get(ITEM)
            assert response.status_code == 200, response.text
            return dict(response.json())

        seeded = await item()  # `pai up` returns once the marketplace has seeded its starters
        assert (seeded["author"], seeded["status"], seeded["useNumber"]) == ("pai", "approved", 0)
        listed = await api.get("/marketplace/api/items", params={"tag": "hello-world"})
        assert [found["id"] for found in listed.json()] == ["hello-world"]
        assert (await api.get("/marketplace/api/items", headers={"Authorization": ""})).status_code == 401

        text = (await api.get(f"{ITEM}/job")).json()["protocol"]
        assert yaml.safe_load(text)["extras"]["submitFrom"] == "hello-world"
        job_id = await platform.submit(text)
        completed = await platform.completed(job_id)
        assert completed.state == JobState.SUCCEEDED

        used = await eventually(item, lambda found: found.get("useNumber") == 1, within=30)
        assert used["useNumber"] == 1
        # Every job.submitted was handled by now, so the count is final: one job, one use.
        js = platform.nc.jetstream()

        async def pending() -> int:
            info = await js.consumer_info(JOBS_STREAM, DURABLE)
            return int(info.num_pending + info.num_ack_pending)

        await eventually(pending, lambda n: n == 0, within=30)
        assert (await item())["useNumber"] == 1
