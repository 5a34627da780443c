"""Submitting jobs: accepted, refused with every problem, refused as a duplicate, never half-made."""

from __future__ import annotations

from typing import Any

import nats.js.errors
import pytest
from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.sealing import KEY_FILE, SecretsCipher, key_from_file
from libs.protocol.events import JobSubmitted, decode_event
from libs.protocol.subjects import JOBS_STREAM
from services.rest.settings import RestSettings
from tests.rest.jobs import job_yaml

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


async def stream_messages(bus: Bus) -> int:
    return int((await bus.js.stream_info(JOBS_STREAM)).state.messages)


async def test_a_valid_job_is_accepted_stored_and_announced(
    api: Client, admin_headers: dict[str, str], bus: Bus, rest_settings: RestSettings
) -> None:
    response = await api.post(
        "/api/v2/jobs", data=job_yaml("train", secret="s3cr3t"), headers={**admin_headers, **YAML}
    )
    assert response.status == 202, await response.text()
    body = await response.json()
    job_id = body["jobId"]
    assert len(job_id) == 32
    assert int(job_id, 16) >= 0
    assert body["name"] == "train"
    assert body["username"] == "admin"

    msg = await bus.js.get_last_msg(JOBS_STREAM, f"pai.job.{job_id}.job.submitted")
    event = decode_event(msg.data or b"")
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == event.event_id
    assert event.type == "job.submitted"
    assert (event.job_id, event.user, event.name, event.virtual_cluster) == (
        job_id,
        "admin",
        "train",
        "default",
    )
    assert "s3cr3t" not in (msg.data or b"").decode()
    assert isinstance(event, JobSubmitted)
    assert (event.config.secrets or {})["token"] != "s3cr3t"

    secrets = await bus.js.key_value("PAI_SECRETS")
    entry = await secrets.get(job_id)
    assert b"s3cr3t" not in (entry.value or b"")  # sealed at rest
    cipher = SecretsCipher(key_from_file(rest_settings.data_dir / KEY_FILE))
    assert cipher.open(entry.value or b"") == {"token": "s3cr3t"}

    detail = await api.get("/api/v2/jobs/admin~train")
    assert detail.status == 200
    status = (await detail.json())["jobStatus"]
    assert (status["state"], status["totalTaskNumber"], status["totalGpuNumber"]) == ("WAITING", 2, 2)


async def test_a_second_job_with_the_same_name_is_a_conflict(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    first = await api.post("/api/v2/jobs", data=job_yaml("dup"), headers={**admin_headers, **YAML})
    assert first.status == 202
    second = await api.post(
        "/api/v2/jobs", data=job_yaml("dup", instances=1), headers={**admin_headers, **YAML}
    )
    assert second.status == 409
    body = await second.json()
    assert body["code"] == "ConflictJobError"
    assert "admin~dup" in body["message"]
    assert await stream_messages(bus) == 1


async def test_an_invalid_job_lists_every_problem_and_creates_nothing(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    bad = (
        job_yaml("broken", secret="x").replace("instances: 2", "instances: 0").replace("cpu: 1", "cpu: lots")
    )
    response = await api.post("/api/v2/jobs", data=bad, headers={**admin_headers, **YAML})
    assert response.status == 400
    body = await response.json()
    assert body["code"] == "InvalidProtocolError"  # OpenPAI's code for a job config it refuses
    paths = [problem["path"] for problem in body["problems"]]
    assert "taskRoles.worker.instances" in paths
    assert "taskRoles.worker.resourcePerInstance.cpu" in paths
    assert all(problem["message"] for problem in body["problems"])
    assert "taskRoles.worker.instances" in body["message"]

    assert (await api.get("/api/v2/jobs/admin~broken")).status == 404
    assert await stream_messages(bus) == 0
    secrets = await bus.js.key_value("PAI_SECRETS")
    with pytest.raises(nats.js.errors.NoKeysError):
        await secrets.keys()


async def test_an_empty_body_is_refused_with_a_hint(api: Client, admin_headers: dict[str, str]) -> None:
    response = await api.post("/api/v2/jobs", data="", headers={**admin_headers, **YAML})
    assert response.status == 400
    assert "text/yaml" in (await response.json())["message"]


async def test_when_the_bus_refuses_the_event_the_job_is_removed(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    await bus.js.delete_stream(JOBS_STREAM)
    response = await api.post(
        "/api/v2/jobs", data=job_yaml("lost", secret="v"), headers={**admin_headers, **YAML}
    )
    assert response.status == 503
    assert response.headers["Retry-After"]
    body = await response.json()
    assert body["code"] == "ServiceUnavailableError"
    assert "was not done: the message bus did not confirm it" in body["message"]
    assert (await api.get("/api/v2/jobs/admin~lost")).status == 404
    secrets = await bus.js.key_value("PAI_SECRETS")
    assert list(await _keys(secrets)) == []


async def _keys(kv: Any) -> list[str]:
    try:
        return list(await kv.keys())
    except nats.js.errors.NoKeysError:
        return []


async def test_submitting_needs_a_token(api: Client) -> None:
    response = await api.post("/api/v2/jobs", data=job_yaml("anon"), headers=YAML)
    assert response.status == 401
    assert (await response.json())["code"] == "UnauthorizedUserError"


@pytest.mark.parametrize("value", [".nan", ".inf", "-.Inf", "1e999"])
async def test_a_number_json_cannot_hold_is_refused_by_its_path(
    api: Client, admin_headers: dict[str, str], bus: Bus, value: str
) -> None:
    """NaN and infinities have no JSON form: PostgreSQL's json refuses them and a browser cannot
    parse them, so the job is refused, naming where the value is and how to keep it."""
    text = job_yaml("odd") + f"parameters:\n  rates: [0.1, {value}]\nextras:\n  limit: 1\n"
    response = await api.post("/api/v2/jobs", data=text, headers={**admin_headers, **YAML})
    assert response.status == 400, await response.text()
    body = await response.json()
    assert body["code"] == "InvalidProtocolError"
    (problem,) = body["problems"]
    assert problem["path"] == "parameters.rates[1]"
    assert "quote" in problem["hint"]
    assert await stream_messages(bus) == 0
    quoted = text.replace(f"[0.1, {value}]", f"[0.1, '{value}']")
    assert (await api.post("/api/v2/jobs", data=quoted, headers={**admin_headers, **YAML})).status == 202
