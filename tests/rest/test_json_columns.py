"""JSON columns are read by orjson, and what only Python's json reads still comes back whole."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.sql import read_json
from libs.protocol.events import JobSubmitted
from services.rest.adapters.database import create_read_engine
from services.rest.adapters.jobs_store import find_job
from services.rest.adapters.tables import jobs
from services.rest.core.totals import job_row_from_config
from tests.support.jobs import job_model


def test_values_python_wrote_that_orjson_refuses_are_read_by_python() -> None:
    assert read_json('{"a": [1, 2.5, null, "x"]}') == {"a": [1, 2.5, None, "x"]}
    assert read_json('{"big": 1180591620717411303425}') == {"big": 2**70 + 1}  # orjson: a float
    assert read_json('{"id": "x1180591620717411303425"}') == {"id": "x1180591620717411303425"}
    assert math.isnan(read_json('{"n": NaN}')["n"])
    with pytest.raises(ValueError, match="Expecting value"):
        read_json("not json")


async def test_a_config_with_a_huge_integer_and_nan_reads_back_as_written(
    engine: AsyncEngine, database_url: str
) -> None:
    extras: dict[str, float] = {"seed": 2**70 + 1}
    nan = database_url.startswith("sqlite")  # PostgreSQL's json type refuses NaN on the way in
    if nan:
        extras["lr"] = float("nan")
    config = {"taskRoles": {"w": {"instances": 1}}, "extras": extras}
    submitted = JobSubmitted(
        job_id="j1", user="alice", name="odd", virtual_cluster="default", config=job_model(config)
    )
    row = job_row_from_config(submitted, 1)
    row["config"]["extras"].update(extras)  # NaN as written: a JSON dump of the model says null
    async with engine.begin() as conn:
        await conn.execute(insert(jobs).values(**row))
    for reader in (engine, create_read_engine(database_url, engine)):
        found = await find_job(reader, "alice", "odd")
        assert found is not None
        read = found["config"]["extras"]
        assert read["seed"] == 2**70 + 1
        assert math.isnan(read["lr"]) if nan else "lr" not in read
        if reader is not engine:
            await reader.dispose()
