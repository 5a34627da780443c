"""Submitting to a virtual cluster that does not exist: OpenPAI's 400 NoVirtualClusterError."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import SCHEDULER_CONFIG, ensure_topology, publish_event
from libs.protocol.subjects import JOBS_STREAM, VC_STATUS_RPC
from services.rest.adapters.accounts import create_user
from services.rest.adapters.auth import hash_password
from services.rest.adapters.vc_names import CONFIG_KEY, VC_NAMES, VirtualClusterNames
from services.rest.keys import ENGINE
from tests.rest.jobs import job_yaml
from tests.services.vc_support import GPU_NODES, ask, cluster_file, scheduler
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


def in_vc(name: str, vc: str | None) -> str:
    text = job_yaml(name, instances=1, gpu=1)
    return (
        text if vc is None else text.replace("type: job\n", f"type: job\ndefaults:\n  virtualCluster: {vc}\n")
    )


async def submit(
    api: Client, headers: dict[str, str], name: str, vc: str | None
) -> tuple[int, dict[str, Any]]:
    response = await api.post("/api/v2/jobs", data=in_vc(name, vc), headers={**headers, **YAML})
    return response.status, await response.json()


async def user_headers(api: Client, name: str) -> dict[str, str]:
    await create_user(api.app[ENGINE], name, hash_password(f"pw-{name}-123"), admin=False)
    response = await api.post(
        "/api/v2/authn/basic/login", data={"username": name, "password": f"pw-{name}-123"}
    )
    assert response.status == 200, await response.text()
    return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def stream_messages(bus: Bus) -> int:
    return int((await bus.js.stream_info(JOBS_STREAM)).state.messages)


def hived(*vcs: str) -> bytes:
    return json.dumps({"hived": {"virtualClusters": {vc: {} for vc in vcs}}, "userLimits": {}}).encode()


async def test_a_vc_the_scheduler_does_not_have_is_refused_naming_the_ones_it_has(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    await ensure_topology(bus.js)
    for node in GPU_NODES:
        await publish_event(bus.js, node)
    async with scheduler(nats_server.url, cluster_file(tmp_path)):  # VCs a and b
        await eventually(lambda: ask(bus, VC_STATUS_RPC), lambda answer: bool(answer["virtualClusters"]))
        before = await stream_messages(bus)
        status, body = await submit(api, admin_headers, "typo", "nosuch")
        assert status == 400, body
        assert body["code"] == "NoVirtualClusterError"
        assert body["message"] == "Virtual cluster nosuch is not found."
        assert "The virtual clusters are a, b" in body["hint"]
        assert body["virtualClusters"] == ["a", "b"]
        assert (await api.get("/api/v2/jobs/admin~typo", headers=admin_headers)).status == 404
        assert await stream_messages(bus) == before  # nothing announced

        status, body = await submit(api, admin_headers, "unnamed", None)
        assert status == 400
        assert body["message"] == "Virtual cluster default is not found."

        bob = await user_headers(api, "bob")  # the default group grants VC "default" only
        status, body = await submit(api, bob, "typo", "nosuch")
        assert status == 400
        assert body["hint"].endswith(
            "Set defaults.virtualCluster to one of them (ask an admin to grant you one)."
        )
        status, body = await submit(api, bob, "not-mine", "a")  # exists, but not bob's: the access check
        assert (status, body["code"]) == (403, "ForbiddenUserError")

        status, body = await submit(api, admin_headers, "fine", "a")
        assert status == 202, body

    # The scheduler is gone: the VCs it named are still used to judge.
    status, body = await submit(api, admin_headers, "typo-later", "nosuch")
    assert (status, body["virtualClusters"]) == (400, ["a", "b"])
    assert (await submit(api, admin_headers, "fine-later", "b"))[0] == 202


async def test_without_any_scheduler_answer_the_submission_is_accepted(
    api: Client, admin_headers: dict[str, str]
) -> None:
    # Nobody can tell which VCs exist: the scheduler will judge it and say so in the job's state.
    status, body = await submit(api, admin_headers, "hopeful", "anything")
    assert status == 202, body


async def test_the_stored_scheduler_config_is_followed_without_asking_the_scheduler(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    kv = await bus.js.key_value(SCHEDULER_CONFIG.bucket)
    names = api.app[VC_NAMES]
    await kv.put(CONFIG_KEY, hived("x", "y"))
    await eventually(lambda: names.names("z"), lambda known: known == frozenset({"x", "y"}))
    status, body = await submit(api, admin_headers, "j1", "z")
    assert (status, body["virtualClusters"]) == (400, ["x", "y"])
    assert (await submit(api, admin_headers, "j2", "x"))[0] == 202

    await kv.put(CONFIG_KEY, hived("x", "y", "z"))  # an admin added z
    await eventually(lambda: names.names("z"), lambda known: known is not None and "z" in known)
    assert (await submit(api, admin_headers, "j3", "z"))[0] == 202

    await kv.delete(CONFIG_KEY)  # back to the scheduler's own config, and no scheduler runs
    await eventually(lambda: names.names("w"), lambda known: known is None)
    assert (await submit(api, admin_headers, "j4", "w"))[0] == 202


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_schedulers_answer_is_kept_and_asked_again_for_a_missing_name(bus: Bus) -> None:
    answers = [["a"], ["a", "b"], []]
    asked: list[int] = []

    async def respond(msg: Msg) -> None:
        asked.append(1)
        vcs = answers[min(len(asked), len(answers)) - 1]
        await msg.respond(json.dumps({"virtualClusters": [{"name": vc} for vc in vcs]}).encode())

    sub = await bus.nc.subscribe(VC_STATUS_RPC, cb=respond)
    await bus.nc.flush()
    clock = FakeClock()
    names = VirtualClusterNames(bus.nc, None, keep_for=30.0, ask_again_after=1.0, clock=clock)

    assert await names.names("a") == frozenset({"a"})
    assert await names.names("a") == frozenset({"a"})
    clock.now += 0.5
    assert await names.names("b") == frozenset({"a"})  # asked less than a second ago: not again
    assert len(asked) == 1
    clock.now += 1.0
    assert await names.names("b") == frozenset({"a", "b"})  # a missing name asks again
    assert len(asked) == 2
    clock.now += 20.0
    assert await names.names("a") == frozenset({"a", "b"})  # present and fresh: kept
    clock.now += 20.0
    assert await names.names("a") == frozenset({"a", "b"})  # stale, and the scheduler knows none now: kept
    assert len(asked) == 3

    await sub.unsubscribe()
    clock.now += 60.0
    assert await names.names("c") == frozenset({"a", "b"})  # nobody answers: the last answer still judges
    fresh = VirtualClusterNames(bus.nc, None, clock=clock)
    assert await fresh.names("a") is None  # never answered: nobody can tell


async def test_many_submissions_at_once_ask_the_scheduler_once(bus: Bus) -> None:
    asked = asyncio.Event()
    count: list[int] = []

    async def respond(msg: Msg) -> None:
        count.append(1)
        asked.set()
        await msg.respond(json.dumps([{"name": "a"}]).encode())  # a scheduler without control

    await bus.nc.subscribe(VC_STATUS_RPC, cb=respond)
    await bus.nc.flush()
    names = VirtualClusterNames(bus.nc, None)
    answers = await asyncio.gather(*(names.names("a") for _ in range(20)))
    assert answers == [frozenset({"a"})] * 20
    assert asked.is_set()
    assert len(count) == 1


async def test_a_busy_scheduler_holds_a_submission_no_longer_than_the_ask_timeout(bus: Bus) -> None:
    async def ignore(msg: Msg) -> None:
        return None  # subscribed, never answers

    await bus.nc.subscribe(VC_STATUS_RPC, cb=ignore)
    await bus.nc.flush()
    names = VirtualClusterNames(bus.nc, None, ask_timeout=0.2)
    started = time.monotonic()
    assert await names.names("a") is None
    assert time.monotonic() - started < 2.0
