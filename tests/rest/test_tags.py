"""Job tags: the owner or an admin adds and removes them; the list filters on them."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobTagged, decode_event
from libs.protocol.subjects import JOBS_STREAM
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import names, submit
from tests.rest.test_users_groups import answer, create_user
from tests.support.waiting import eventually

Client = TestClient[Any, Any]


async def test_owner_and_admin_tag_jobs_and_the_list_filters_on_tags(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    carol = await create_user(api, admin_headers, "carol")
    await submit(api, bob, job_yaml("first"))
    await submit(api, bob, job_yaml("second"))
    tag = "/api/v2/jobs/bob~first/tag"

    added = await api.put(tag, json={"value": "gold"}, headers=bob)
    assert (added.status, await added.json()) == (
        200,
        {"message": "Add tag gold for job first successfully."},
    )
    assert (await api.put(tag, json={"value": "gold"}, headers=bob)).status == 200  # idempotent
    assert (await api.put(tag, json={"value": "silver"}, headers=admin_headers)).status == 200
    assert await answer(await api.put(tag, json={"value": "x"}, headers=carol)) == (403, "ForbiddenUserError")
    assert await answer(await api.put(tag, json={"value": ""}, headers=bob)) == (
        400,
        "InvalidParametersError",
    )
    assert await answer(await api.put(tag, json={"value": "x"})) == (401, "UnauthorizedUserError")
    assert await answer(await api.put("/api/v2/jobs/bob~none/tag", json={"value": "x"}, headers=bob)) == (
        404,
        "NoJobError",
    )

    detail = await (await api.get("/api/v2/jobs/bob~first", headers=bob)).json()
    assert detail["tags"] == ["gold", "silver"]
    assert await names(api, bob, "tagsContain=gold") == ["first"]
    assert await names(api, bob, "tagsNotContain=gold") == ["second"]
    assert await names(api, bob, "tagsContain=silver,bronze") == ["first"]

    removed = await api.delete(tag, json={"value": "gold"}, headers=bob)
    assert (removed.status, await removed.json()) == (
        200,
        {"message": "Delete tag gold from job first successfully."},
    )
    assert await answer(await api.delete(tag, json={"value": "gold"}, headers=bob)) == (404, "NoTagError")
    assert await names(api, bob, "tagsContain=gold") == []


async def test_tags_are_facts_on_the_bus_and_an_alerts_tag_reaches_the_job(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    submitted = await api.post(
        "/api/v2/jobs", data=job_yaml("tagged"), headers={**admin_headers, "Content-Type": "text/yaml"}
    )
    job_id = (await submitted.json())["jobId"]
    tag = "/api/v2/jobs/admin~tagged/tag"
    assert (await api.put(tag, json={"value": "gold"}, headers=admin_headers)).status == 200
    fact = decode_event((await bus.js.get_last_msg(JOBS_STREAM, f"pai.job.{job_id}.job.tagged")).data or b"")
    assert isinstance(fact, JobTagged)
    assert (fact.tag, fact.by, fact.removed) == ("gold", "admin", False)

    await publish_event(bus.js, JobTagged(job_id=job_id, tag="low-gpu-utilisation", by="alerter"))

    async def tags() -> list[str]:
        return list((await (await api.get("/api/v2/jobs/admin~tagged")).json())["tags"])

    assert await eventually(tags, lambda t: "low-gpu-utilisation" in t) == ["gold", "low-gpu-utilisation"]
