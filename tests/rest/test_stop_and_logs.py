"""Stopping jobs (an event, idempotent, owner or admin only) and reading task logs via the orchestrator."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobScheduled, JobState, TaskPlacement, decode_event
from libs.protocol.subjects import JOBS_STREAM
from services.rest.adapters import accounts
from services.rest.adapters.auth import hash_password
from services.rest.keys import ENGINE
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}
STOP = {"value": "STOP"}


async def submit(api: Client, headers: dict[str, str], name: str) -> str:
    response = await api.post("/api/v2/jobs", data=job_yaml(name), headers={**headers, **YAML})
    assert response.status == 202, await response.text()
    job_id: str = (await response.json())["jobId"]
    return job_id


async def messages(bus: Bus) -> int:
    return int((await bus.js.stream_info(JOBS_STREAM)).state.messages)


async def test_stop_publishes_one_stop_request_however_often_asked(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await submit(api, admin_headers, "long")
    for _ in range(2):
        response = await api.put("/api/v2/jobs/admin~long/executionType", json=STOP, headers=admin_headers)
        assert response.status == 202
        assert (await response.json())["message"] == "execute job long successfully"
    msg = await bus.js.get_last_msg(JOBS_STREAM, f"pai.job.{job_id}.job.stop_requested")
    event = decode_event(msg.data or b"")
    assert event.type == "job.stop_requested"
    assert (event.job_id, event.by) == (job_id, "admin")
    assert await messages(bus) == 2  # submitted + one stop request
    status = await eventually(lambda: _status(api, "admin~long"), lambda st: st["executionType"] == "STOP")
    assert status["state"] == "STOPPING"


async def _status(api: Client, ref: str) -> dict[str, Any]:
    result: dict[str, Any] = (await (await api.get(f"/api/v2/jobs/{ref}")).json())["jobStatus"]
    return result


async def test_stopping_a_finished_job_changes_nothing(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await submit(api, admin_headers, "done")
    await publish_event(bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0))
    await eventually(lambda: _status(api, "admin~done"), lambda st: st["state"] == "SUCCEEDED")
    before = await messages(bus)
    response = await api.put("/api/v2/jobs/admin~done/executionType", json=STOP, headers=admin_headers)
    assert response.status == 202
    assert await messages(bus) == before


async def test_start_is_accepted_in_every_state_and_changes_nothing(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    """OpenPAI's rest-server answers START with 202 whatever the state and runs nothing again."""
    start = {"value": "START"}
    job_id = await submit(api, admin_headers, "again")
    path = "/rest-server/api/v2/jobs/admin~again/executionType"
    waiting = await api.put(path, json=start, headers=admin_headers)
    assert (waiting.status, await waiting.json()) == (202, {"message": "execute job again successfully"})
    assert (await api.put(path, json=STOP, headers=admin_headers)).status == 202
    stopping = await eventually(lambda: _status(api, "admin~again"), lambda st: st["state"] == "STOPPING")
    await publish_event(bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.STOPPED, exit_code=-1))
    await eventually(lambda: _status(api, "admin~again"), lambda st: st["state"] == "STOPPED")
    before = await messages(bus)
    for _ in range(2):
        stopped = await api.put(path, json=start, headers=admin_headers)
        assert (stopped.status, await stopped.json()) == (202, {"message": "execute job again successfully"})
    assert await messages(bus) == before  # no event: nothing is started again
    status = await _status(api, "admin~again")
    assert (status["state"], status["executionType"], status["attemptId"]) == ("STOPPED", "STOP", 0)
    assert stopping["executionType"] == "STOP"
    eve = await _user(api, "eve")
    refused = await api.put(path, json=start, headers=eve)
    assert await refused.json() == {
        "code": "ForbiddenUserError",
        "message": "User eve is not allowed to execute job admin~again.",
    }
    missing = await api.put("/api/v2/jobs/admin~none/executionType", json=start, headers=admin_headers)
    assert (missing.status, (await missing.json())["code"]) == (404, "NoJobError")


async def _user(api: Client, name: str) -> dict[str, str]:
    await accounts.create_user(api.app[ENGINE], name, hash_password(f"{name}-password"))
    form = {"username": name, "password": f"{name}-password"}
    login = await api.post("/api/v2/authn/basic/login", data=form)
    return {"Authorization": f"Bearer {(await login.json())['token']}"}


async def test_only_the_owner_or_an_admin_may_stop(api: Client, admin_headers: dict[str, str]) -> None:
    await submit(api, admin_headers, "mine")
    await accounts.create_user(api.app[ENGINE], "eve", hash_password("eve-password"))
    login = await api.post("/api/v2/authn/basic/login", data={"username": "eve", "password": "eve-password"})
    eve = {"Authorization": f"Bearer {(await login.json())['token']}"}
    response = await api.put("/api/v2/jobs/admin~mine/executionType", json=STOP, headers=eve)
    assert response.status == 403
    assert (await response.json())["code"] == "ForbiddenUserError"
    bad = await api.put(
        "/api/v2/jobs/admin~mine/executionType", json={"value": "PAUSE"}, headers=admin_headers
    )
    assert (bad.status, (await bad.json())["code"]) == (400, "InvalidParametersError")


async def placed(api: Client, headers: dict[str, str], bus: Bus, name: str) -> str:
    job_id = await submit(api, headers, name)
    placements = (TaskPlacement(role="worker", index=0, node="n1", node_address="10.1.1.1"),)
    await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placements))
    await eventually(lambda: _first_task(api, name), lambda task: task["containerNodeName"] == "n1")
    return job_id


async def _first_task(api: Client, name: str) -> dict[str, Any]:
    detail = await (await api.get(f"/api/v2/jobs/admin~{name}")).json()
    task: dict[str, Any] = detail["taskRoles"]["worker"]["taskStatuses"][0]
    return task


LOGS = "/api/v2/jobs/admin~{name}/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs"


async def test_log_content_comes_from_the_orchestrator(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    job_id = await placed(api, admin_headers, bus, "talky")
    asked: list[dict[str, Any]] = []

    async def orchestrator(msg: Msg) -> None:
        query = json.loads(msg.data)
        asked.append(query)
        text = "hello\nworld\n"
        piece = text[query["offset"] : query["offset"] + query["limit"]]
        # An orchestrator of before `nextOffset`: REST tells where the next read starts.
        await msg.respond(
            json.dumps({"content": piece, "offset": query["offset"], "size": len(text)}).encode()
        )

    sub = await bus.nc.subscribe("pai.rpc.orchestrator.logs", cb=orchestrator)
    await bus.nc.flush()
    try:
        locations = await (await api.get(LOGS.format(name="talky"), headers=admin_headers)).json()
        assert [loc["name"] for loc in locations["locations"]] == ["all", "stdout", "stderr"]
        uri = locations["locations"][1]["uri"]
        assert uri == LOGS.format(name="talky") + "/stdout"
        response = await api.get(uri + "?offset=6&limit=100", headers=admin_headers)
        assert response.status == 200
        assert await response.json() == {"content": "world\n", "offset": 6, "nextOffset": 12, "size": 12}
    finally:
        await sub.unsubscribe()
    assert asked == [
        {
            "job_id": job_id,
            "attempt": 0,
            "role": "worker",
            "index": 0,
            "file": "stdout",
            "offset": 6,
            "limit": 100,
        }
    ]


async def test_log_requests_without_an_orchestrator_answer_503(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    await placed(api, admin_headers, bus, "silent")
    response = await api.get(LOGS.format(name="silent") + "/all", headers=admin_headers)
    assert response.status == 503
    assert "orchestrator did not answer" in (await response.json())["message"]


async def test_an_orchestrator_error_is_a_missing_log(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    await placed(api, admin_headers, bus, "nolog")

    async def orchestrator(msg: Msg) -> None:
        await msg.respond(json.dumps({"error": "no such log file"}).encode())

    sub = await bus.nc.subscribe("pai.rpc.orchestrator.logs", cb=orchestrator)
    await bus.nc.flush()
    try:
        response = await api.get(LOGS.format(name="nolog") + "/stderr", headers=admin_headers)
    finally:
        await sub.unsubscribe()
    assert response.status == 404
    body = await response.json()
    assert body["code"] == "NoTaskLogError"
    assert body["message"] == "Log of task is not found."
    assert "no such log file" in body["hint"]
    unknown = await api.get(
        LOGS.format(name="nolog").replace("taskIndex/0", "taskIndex/7"), headers=admin_headers
    )
    # OpenPAI's log routes answer a missing task as a missing log (its swagger documents only that).
    assert (unknown.status, (await unknown.json())["code"]) == (404, "NoTaskLogError")
