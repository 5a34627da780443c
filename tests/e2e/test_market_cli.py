"""`pai market` against the embedded platform: list, show, use, publish and star."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.platform import ADMIN_PASSWORD, Cli, Platform, running_platform
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(240)

MINE = """\
protocolVersion: 2
name: my-probe
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: python:3.11-slim}
taskRoles:
  main:
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
    commands: [echo probing]
"""


async def _item(platform: Platform, name: str) -> dict[str, Any]:
    response = await platform.api.get("/marketplace/api/items", params={"keyword": name})
    assert response.status_code == 200, response.text
    [item] = [i for i in response.json() if i["name"] == name]
    return dict(item)


async def _logged_in(platform: Platform, tmp_path: Path) -> Cli:
    cli = Cli(platform.info.api_url, tmp_path / "config")
    code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
    assert code == 0, err
    return cli


async def test_using_a_seeded_template_submits_a_job_that_succeeds_and_counts_one_use(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        cli = await _logged_in(platform, tmp_path)
        seeded = await eventually(lambda: _item(platform, "Hello world"), lambda item: item is not None)
        assert seeded["useNumber"] == 0

        code, out, err = await cli.run("market", "list", "--tag", "starter")
        assert code == 0, err
        assert "Hello world" in out
        assert "PyTorch DDP" in out

        code, out, err = await cli.run("market", "use", "Hello world", "--submit", "--wait")
        assert code == 0, out + err
        assert "submitted admin~hello-world-" in out
        assert "SUCCEEDED" in out

        counted = await eventually(
            lambda: _item(platform, "Hello world"), lambda item: item["useNumber"] >= 1, within=30
        )
        assert counted["useNumber"] == 1
        code, out, err = await cli.run("market", "show", seeded["id"])
        assert code == 0, err
        assert "uses       1" in out
        assert "visible to public" in out


async def test_use_writes_the_job_with_its_origin_and_publish_and_star_work_by_name(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        cli = await _logged_in(platform, tmp_path)
        (tmp_path / "mine.yaml").write_text(MINE)
        (tmp_path / "mine.md").write_text("# My probe\n\nPrints *probing*.\n")

        code, out, err = await cli.run(
            "market", "publish", str(tmp_path / "mine.yaml"), "--summary", "a probe",
            "--tag", "probe", "--category", "Testing", "--description", str(tmp_path / "mine.md"),
        )  # fmt: skip
        assert code == 0, err
        assert "published my-probe" in out
        assert "visible to private" in out

        code, _, err = await cli.run("market", "use", "my-probe", "-o", str(tmp_path / "job.yaml"))
        assert code == 0, err
        item = await _item(platform, "my-probe")
        job = yaml.safe_load((tmp_path / "job.yaml").read_text())
        assert job["name"] == "my-probe"
        assert job["extras"]["submitFrom"] == item["id"]

        code, out, err = await cli.run("market", "star", "my-probe")
        assert code == 0, err
        assert "it has 1 stars" in out
        code, _, err = await cli.run("market", "star", "my-probe")
        assert code == 1
        assert "already starred" in err
        code, out, err = await cli.run("market", "star", "my-probe", "--undo")
        assert code == 0, err
        assert "it has 0 stars" in out

        code, out, err = await cli.run(
            "market", "publish", "--type", "data", "--name", "weather", "--data-type", "url",
            "--data-url", "https://example.org/weather.csv", "--group", "default", "--tag", "csv",
        )  # fmt: skip
        assert code == 0, err
        assert "visible to group default" in out
        code, out, err = await cli.run("market", "list", "--type", "data", "--json")
        assert code == 0, err
        [data] = json.loads(out)
        assert (data["name"], data["dataUrl"], data["groupList"]) == (
            "weather",
            "https://example.org/weather.csv",
            ["default"],
        )
        code, out, err = await cli.run("market", "use", "weather")
        assert code == 0, err
        assert "https://example.org/weather.csv" in out
        assert yaml.safe_load(out)["extras"]["submitFrom"] == data["id"]

        code, _, err = await cli.run("market", "show", "no-such-item")
        assert code == 1
        assert "no marketplace item has the id or name 'no-such-item'" in err
        (tmp_path / "bad.yaml").write_text(MINE.replace("cpu: 1", "cpu: lots"))
        code, _, err = await cli.run("market", "publish", str(tmp_path / "bad.yaml"), "--public")
        assert code in (1, 2)
        assert "cpu" in err
        assert "Traceback" not in err
