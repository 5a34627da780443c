"""The starter templates: each validates, seeding adds each once, a broken one is skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol import parse_job
from services.marketplace.adapters.seeding import STARTERS, read_starter
from services.marketplace.core.jobs import job_for
from tests.marketplace.support import Market, marketplace, settings

FOLDERS = sorted(p for p in STARTERS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_every_starter_validates_as_a_submission_would(folder: Path) -> None:
    item = read_starter(folder)  # raises, naming the file and field, when it does not
    assert (item.author, item.status, item.is_public) == ("pai", "approved", True)
    assert item.summary
    assert item.description.startswith("#")
    job = parse_job(job_for(item))
    assert job.extras is not None
    assert job.extras.submit_from == item.id


async def test_seeding_adds_each_starter_once_and_skips_a_broken_one(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, database_url: str, tmp_path: Path
) -> None:
    starters = tmp_path / "starters"
    shutil.copytree(STARTERS / "hello-world", starters / "hello-world")
    broken = starters / "broken"
    broken.mkdir()
    (broken / "item.yaml").write_text("name: Broken\nsummary: no job\n")
    (broken / "job.yaml").write_text("protocolVersion: 2\nname: broken\n")
    (broken / "README.md").write_text("# Broken\n")
    config = settings(
        nats_server.url,
        rest_url,
        database_url,
        tmp_path,
        marketplace_seed=True,
        marketplace_starters_dir=starters,
    )
    for _ in range(2):  # a restart adds nothing twice
        async with marketplace(config) as url, httpx.AsyncClient(base_url=url) as client:
            market = Market(client)
            listed = (await market.call("GET", "/items", "bob")).json()
            assert [(i["id"], i["name"], i["author"], i["status"]) for i in listed] == [
                ("hello-world", "Hello world", "pai", "approved")
            ]
            assert (await market.call("GET", "/items", "bob", params={"tag": "beginner"})).json()[0][
                "isPublic"
            ]
