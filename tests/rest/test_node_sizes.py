"""A task larger than the largest node is refused at submission, naming the node and its size.

The rule (services/rest/core/node_fit.py) is checked on its own first; then through the API with
a real scheduler that learns its nodes from node reports, as the monitor sends them (offered
capacity, overcommit included), and with the nodes unknown, where the job is accepted.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol import parse_job
from libs.protocol.capacity import CPU_RESERVE, read_machine, reserve_for, tasks_memory_mb
from libs.protocol.events import NodeReported
from libs.protocol.limits import MIN_TASK_MEMORY_MB
from libs.protocol.subjects import JOBS_STREAM, VC_STATUS_RPC
from services.monitor.adapters.inventory import detect_resources
from services.rest.adapters.node_sizes import NodeSizes
from services.rest.core.node_fit import NodeSize, oversized, sizes_in_status
from tests.services.vc_support import ask, scheduler
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}
WORKER = "taskRoles.worker.resourcePerInstance"


def job_text(name: str, *, cpu: int = 1, memory: int = 512, gpu: int = 0) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11}}
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: {cpu}, memoryMB: {memory}, gpu: {gpu}}}
    commands: [echo hello]
"""


NODES = (
    NodeSize("small", cpu=8, memory_mb=32768, gpus=4),
    NodeSize("wide", cpu=64, memory_mb=16384, gpus=0),
    NodeSize("deep", cpu=4, memory_mb=262144, gpus=0),
)


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param(
            {"memory": 300_000},
            [
                (
                    f"{WORKER}.memoryMB",
                    "300000 MB is more than the largest node has (node deep: 262144 MB)",
                    "ask for at most 262144",
                )
            ],
            id="memory over the node with the most",
        ),
        pytest.param(
            {"cpu": 65},
            [
                (
                    f"{WORKER}.cpu",
                    "65 CPUs is more than the largest node has (node wide: 64 CPUs)",
                    "ask for at most 64",
                )
            ],
            id="cpu over the node with the most",
        ),
        pytest.param(
            {"gpu": 8},
            [
                (
                    f"{WORKER}.gpu",
                    "8 GPUs is more than the largest node has (node small: 4 GPUs)",
                    "ask for at most 4",
                )
            ],
            id="gpu over the node with the most",
        ),
        pytest.param(
            {"cpu": 64, "memory": 262144},
            [
                (
                    WORKER,
                    "no node has 64 CPUs, 262144 MB, 0 GPUs at once (the largest: node wide: 64 CPUs, "
                    "16384 MB, 0 GPUs; node deep: 4 CPUs, 262144 MB, 0 GPUs; node small: 8 CPUs, "
                    "32768 MB, 4 GPUs)",
                    "ask for what one node has",
                )
            ],
            id="each fits some node, none holds them together",
        ),
        pytest.param({"cpu": 64}, [], id="the most CPUs one node has"),
        pytest.param({"memory": 262144}, [], id="the most memory one node has"),
        pytest.param({"cpu": 8, "memory": 32768, "gpu": 4}, [], id="a whole node"),
        pytest.param({"cpu": 0}, [], id="cpu 0 reserves nothing"),
    ],
)
def test_a_task_is_judged_against_the_largest_node_of_each_resource(
    resources: dict[str, int], expected: list[tuple[str, str, str]]
) -> None:
    job = parse_job(job_text("j", **resources))
    found = [(p.path, p.message, p.hint) for p in oversized(job, NODES)]
    assert found == expected


def test_a_gpu_task_on_a_cluster_without_gpus_is_told_there_are_none() -> None:
    [problem] = oversized(parse_job(job_text("j", gpu=1)), NODES[1:])
    assert problem.message == "1 GPU is more than the largest node has (node deep: 0 GPUs)"
    assert problem.hint.startswith("ask for gpu: 0; no node of this cluster has a GPU")


def test_nothing_is_judged_without_nodes() -> None:
    assert oversized(parse_job(job_text("j", memory=10**6)), ()) == []
    assert sizes_in_status({"virtualClusters": [], "nodes": []}) is None
    assert sizes_in_status({"error": "unavailable", "message": "rebuilding"}) is None


async def submit(api: Client, headers: dict[str, str], text: str) -> tuple[int, dict[str, Any]]:
    response = await api.post("/api/v2/jobs", data=text, headers={**headers, **YAML})
    return response.status, await response.json()


async def stream_messages(bus: Bus) -> int:
    return int((await bus.js.stream_info(JOBS_STREAM)).state.messages)


def node(name: str, cpu: int, memory_mb: int, gpus: int = 0) -> NodeReported:
    return NodeReported(
        node_id=name,
        name=name,
        address="127.0.0.1",
        cpu=cpu,
        memory_mb=memory_mb,
        gpus=gpus,
        gpu_model="A100" if gpus else None,
    )


async def nodes_known(bus: Bus, count: int) -> None:
    await eventually(lambda: ask(bus, VC_STATUS_RPC), lambda answer: len(answer["nodes"]) == count)


async def test_a_task_larger_than_the_largest_node_is_refused_naming_the_node(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: EmbeddedNats
) -> None:
    await ensure_topology(bus.js)
    await publish_event(bus.js, node("n1", cpu=8, memory_mb=32768, gpus=4))
    await publish_event(bus.js, node("n2", cpu=4, memory_mb=16384))
    async with scheduler(nats_server.url, None):
        await nodes_known(bus, 2)
        before = await stream_messages(bus)
        status, body = await submit(api, admin_headers, job_text("huge", memory=100_000))
        assert (status, body["code"]) == (400, "InvalidProtocolError"), body
        assert body["problems"] == [
            {
                "path": f"{WORKER}.memoryMB",
                "message": "100000 MB is more than the largest node has (node n1: 32768 MB)",
                "hint": "ask for at most 32768",
            }
        ]
        assert body["message"] == (
            f"{WORKER}.memoryMB: 100000 MB is more than the largest node has (node n1: 32768 MB) "
            "(ask for at most 32768)"
        )
        for name, resources, field in [
            ("many-cpus", {"cpu": 9}, "cpu"),
            ("many-gpus", {"gpu": 5}, "gpu"),
        ]:
            status, body = await submit(api, admin_headers, job_text(name, **resources))
            assert (status, [p["path"] for p in body["problems"]]) == (400, [f"{WORKER}.{field}"]), body
        assert (await api.get("/api/v2/jobs/admin~huge", headers=admin_headers)).status == 404
        assert await stream_messages(bus) == before  # nothing announced

        status, body = await submit(api, admin_headers, job_text("whole-node", cpu=8, memory=32768, gpu=4))
        assert status == 202, body


async def test_the_nodes_size_is_what_the_monitor_offers_with_overcommit(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: EmbeddedNats
) -> None:
    # As the suite runs `pai up`'s monitor (tests/conftest.py): 16 times the cores it keeps for
    # tasks, 4 times the memory.
    cpu, memory_mb, _gpus, _model = detect_resources(cpu_overcommit=16, memory_overcommit=4)
    machine = read_machine()
    assert cpu == math.floor((machine.cores - CPU_RESERVE) * 16)
    assert memory_mb == 4 * tasks_memory_mb(machine, reserve_for(machine))
    await ensure_topology(bus.js)
    await publish_event(bus.js, node("laptop", cpu=cpu, memory_mb=memory_mb))
    async with scheduler(nats_server.url, None):
        await nodes_known(bus, 1)
        status, body = await submit(api, admin_headers, job_text("all-offered", cpu=cpu, memory=memory_mb))
        assert status == 202, body
        status, body = await submit(api, admin_headers, job_text("one-more", cpu=cpu + 1))
        assert status == 400, body
        assert body["problems"][0]["message"] == (
            f"{cpu + 1} CPUs is more than the largest node has (node laptop: {cpu} CPUs)"
        )


async def test_without_known_nodes_any_size_is_accepted_and_left_to_the_scheduler(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: EmbeddedNats
) -> None:
    # No scheduler: nobody can tell how large the nodes are.
    status, body = await submit(api, admin_headers, job_text("before-any-scheduler", memory=10**6))
    assert status == 202, body
    # A scheduler that no node has reported to yet: it lists none.
    await ensure_topology(bus.js)
    async with scheduler(nats_server.url, None):
        await nodes_known(bus, 0)
        status, body = await submit(api, admin_headers, job_text("before-any-node", cpu=1000))
        assert status == 202, body


async def test_a_node_reported_later_makes_room_for_a_task_refused_before(
    api: Client, admin_headers: dict[str, str], bus: Bus, nats_server: EmbeddedNats
) -> None:
    await ensure_topology(bus.js)
    await publish_event(bus.js, node("n1", cpu=4, memory_mb=8192))
    async with scheduler(nats_server.url, None):
        await nodes_known(bus, 1)
        status, _ = await submit(api, admin_headers, job_text("big", memory=65536))
        assert status == 400
        await publish_event(bus.js, node("n2", cpu=16, memory_mb=65536))
        await nodes_known(bus, 2)
        # REST keeps the nodes it was told of; a task that does not fit them asks again (at most
        # once a second), so it is accepted once the scheduler knows the new node.
        status, body = await eventually(
            lambda: submit(api, admin_headers, job_text("big", memory=65536)), lambda answer: answer[0] == 202
        )
        assert status == 202, body


async def test_the_least_memory_is_refused_through_the_api_naming_the_minimum(
    api: Client, admin_headers: dict[str, str]
) -> None:
    status, body = await submit(api, admin_headers, job_text("tiny", memory=16))
    assert (status, body["code"]) == (400, "InvalidProtocolError"), body
    [problem] = body["problems"]
    assert problem["path"] == f"{WORKER}.memoryMB"
    assert problem["message"].startswith(f"16 MB is less than the {MIN_TASK_MEMORY_MB} MB every task needs")
    least = MIN_TASK_MEMORY_MB
    assert problem["hint"] == f"ask for at least {least}: `memoryMB: {least}` or more"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def status_of(*nodes: NodeSize) -> bytes:
    listed = [{"name": n.name, "cpu": n.cpu, "memoryMb": n.memory_mb, "gpus": n.gpus} for n in nodes]
    return json.dumps({"virtualClusters": [], "nodes": listed}).encode()


async def test_the_nodes_are_kept_and_asked_again_for_a_task_that_does_not_fit(bus: Bus) -> None:
    answers = [status_of(NODES[0]), status_of(*NODES)]
    asked: list[int] = []

    async def respond(msg: Msg) -> None:
        asked.append(1)
        await msg.respond(answers[min(len(asked), len(answers)) - 1])

    await bus.nc.subscribe(VC_STATUS_RPC, cb=respond)
    await bus.nc.flush()
    clock = FakeClock()
    sizes = NodeSizes(bus.nc, keep_for=30.0, ask_again_after=1.0, clock=clock)

    def fits(known: tuple[NodeSize, ...]) -> bool:
        return max(n.memory_mb for n in known) >= 100_000

    assert await sizes.sizes(lambda _: True) == NODES[:1]
    clock.now += 0.5
    assert await sizes.sizes(fits) == NODES[:1]  # asked less than a second ago: not again
    assert len(asked) == 1
    clock.now += 1.0
    assert await sizes.sizes(fits) == NODES  # a task the kept nodes cannot hold asks again
    clock.now += 20.0
    assert await sizes.sizes(fits) == NODES  # it fits, and the answer is fresh: kept
    assert len(asked) == 2
    clock.now += 20.0
    assert await sizes.sizes(fits) == NODES  # stale: asked again
    assert len(asked) == 3


async def test_a_silent_scheduler_holds_one_submission_not_every_one(bus: Bus) -> None:
    heard = asyncio.Event()

    async def ignore(msg: Msg) -> None:
        heard.set()  # subscribed, never answers

    await bus.nc.subscribe(VC_STATUS_RPC, cb=ignore)
    await bus.nc.flush()
    clock = FakeClock()
    sizes = NodeSizes(bus.nc, ask_timeout=0.2, keep_for=30.0, clock=clock)
    assert await sizes.sizes(lambda _: True) is None
    assert heard.is_set()
    heard.clear()
    clock.now += 10.0
    assert await sizes.sizes(lambda _: True) is None  # not asked: the last question went unanswered
    await bus.nc.flush()
    assert not heard.is_set()
    clock.now += 30.0
    assert await sizes.sizes(lambda _: True) is None
    assert heard.is_set()  # asked again once keep_for has passed
