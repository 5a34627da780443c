"""The marketplace's tables beside rest's in one database: own history, own version table."""

from __future__ import annotations

from pathlib import Path

import httpx
import sqlalchemy as sa

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.sql import create_engine
from services.marketplace.adapters.storing import migrate as migrate_marketplace
from services.rest.adapters.database import migrate as migrate_rest
from tests.marketplace.support import marketplace, settings


async def test_both_histories_share_a_database_without_touching_each_other(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await migrate_rest(engine)
        for _ in range(2):  # a restart finds its schema current
            await migrate_marketplace(engine)
        await migrate_rest(engine)
        async with engine.connect() as connection:
            tables = set(await connection.run_sync(lambda sync: sa.inspect(sync).get_table_names()))
            rest_version = (
                await connection.execute(sa.text("SELECT version_num FROM alembic_version"))
            ).scalars()
            ours = await connection.execute(sa.text("SELECT version_num FROM marketplace_alembic_version"))
            assert list(ours.scalars()) == ["m0001"]
            assert not any(v.startswith("m") for v in rest_version)
        assert {"marketplace_items", "marketplace_stars", "marketplace_uses", "users", "jobs"} <= tables
    finally:
        await engine.dispose()


async def test_without_rest_the_marketplace_answers_503_not_a_stack_trace(
    topology: Bus, nats_server: EmbeddedNats, database_url: str, tmp_path: Path
) -> None:
    config = settings(nats_server.url, "http://127.0.0.1:9", database_url, tmp_path)
    async with marketplace(config) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/marketplace/api/items", headers={"Authorization": "Bearer alice"})
        assert response.status_code == 503
        assert response.json()["code"] == "ServiceUnavailableError"
        assert "retry" in response.json()["message"]
        missing = await client.get("/marketplace/api/nothing", headers={"Authorization": "Bearer alice"})
        assert missing.status_code == 404
        assert missing.json()["code"] == "NoApiError"
