"""The Kubernetes executor against a stateful API server, through the real kubernetes client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from services.orchestrator.adapters.executing import AlreadyRunningError, TaskExit
from services.orchestrator.adapters.k8s_pods import PodSettings, pod_name
from services.orchestrator.adapters.kubernetes import KubernetesExecutor
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.core.policies import STOP_EXIT_CODE
from tests.k8s.frameworks import JOB_ID, framework
from tests.support.k8s_api import FakeKubernetes, serving
from tests.support.waiting import eventually

NS = "pai-jobs"
KEY = TaskKey(0, "trainer", 0, 0)
NAME = pod_name(JOB_ID, KEY)
SECRETS = {"registry_password": "s3cret", "token": "abc"}


class Exits:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[TaskExit] = asyncio.Queue()

    async def __call__(self, exit_: TaskExit) -> None:
        await self.queue.put(exit_)

    async def next(self) -> TaskExit:
        return await asyncio.wait_for(self.queue.get(), 30)


async def job_secrets(_job_id: str) -> dict[str, Any] | None:
    return dict(SECRETS)


class Cluster:
    def __init__(self, fake: FakeKubernetes, url: str, data_dir: Path) -> None:
        self.fake = fake
        self.url = url
        self.data_dir = data_dir
        self.executors: list[KubernetesExecutor] = []

    async def executor(self, exits: Exits, **options: Any) -> KubernetesExecutor:
        config = Configuration()
        config.host = self.url
        ex = KubernetesExecutor(
            ApiClient(config),
            self.data_dir,
            exits,
            job_secrets,
            PodSettings(namespace=NS, shared_claim="pai-shared"),
            watch_timeout=options.pop("watch_timeout", 5),
            **options,
        )
        await ex.open()
        self.executors.append(ex)
        return ex

    async def kubelet(self, status: dict[str, Any], name: str = NAME) -> None:
        await self.fake.set_pod_status(NS, name, status)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    fake = FakeKubernetes()
    async with serving(fake) as url:
        c = Cluster(fake, url, tmp_path / "data")
        try:
            yield c
        finally:
            for ex in c.executors:
                await ex.close()


def terminated(code: int, reason: str) -> dict[str, Any]:
    state = {"terminated": {"exitCode": code, "reason": reason}}
    return {"name": "main", "image": "i", "imageID": "", "ready": False, "restartCount": 0, "state": state}


async def test_start_creates_the_pod_and_its_secrets_owned_by_it(cluster: Cluster) -> None:
    ex = await cluster.executor(Exits())
    pid, directory = await ex.start(framework(), KEY)
    assert pid == 0
    assert (directory / "spec.json").exists()
    pod = cluster.fake.pods(NS)[NAME]
    assert pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    secrets = cluster.fake.objects[("api/v1", "secrets", NS)]
    assert set(secrets) == {f"{NAME}-secrets", f"{NAME}-registry"}
    assert secrets[f"{NAME}-registry"]["type"] == "kubernetes.io/dockerconfigjson"
    for secret in secrets.values():
        assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert ex.probe(JOB_ID, KEY).status == "alive"


async def test_starting_the_same_task_attempt_twice_is_refused(cluster: Cluster) -> None:
    ex = await cluster.executor(Exits())
    await ex.start(framework(), KEY)
    with pytest.raises(AlreadyRunningError):
        await ex.start(framework(), KEY)
    assert len(cluster.fake.pods(NS)) == 1


@pytest.mark.parametrize(
    ("status", "code", "phrase"),
    [
        ({"phase": "Succeeded", "containerStatuses": [terminated(0, "Completed")]}, 0, None),
        ({"phase": "Failed", "containerStatuses": [terminated(3, "Error")]}, 3, "UndefinedPositiveExitCode"),
        (
            {"phase": "Failed", "containerStatuses": [terminated(137, "OOMKilled")]},
            137,
            "UserContainerDockerOOMKilled",
        ),
        ({"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}, -1000, "TaskEvicted"),
    ],
    ids=["succeeded", "failed", "oom killed", "evicted"],
)
async def test_pod_phases_become_task_exits(
    cluster: Cluster, status: dict[str, Any], code: int, phrase: str | None
) -> None:
    exits = Exits()
    ex = await cluster.executor(exits)
    await ex.start(framework(), KEY)
    await cluster.kubelet({"phase": "Running"})
    await cluster.kubelet(status)
    done = await exits.next()
    assert (done.job_id, done.key, done.exit_code) == (JOB_ID, KEY, code)
    assert (done.failure.phrase if done.failure else None) == phrase
    assert ex.probe(JOB_ID, KEY).status == "ended"


async def test_a_deleted_pod_fails_its_task_with_a_retryable_platform_failure(cluster: Cluster) -> None:
    exits = Exits()
    ex = await cluster.executor(exits)
    await ex.start(framework(), KEY)
    await cluster.kubelet({"phase": "Running"})
    await cluster.fake.delete_pod(NS, NAME)
    done = await exits.next()
    assert done.failure is not None
    assert (done.exit_code, done.failure.type) == (-300, "unknown")
    assert "deleted" in done.diagnostics
    assert ex.probe(JOB_ID, KEY).status == "absent"
    # The owned secrets went with the pod, and the retried task attempt gets a pod of its own.
    assert not cluster.fake.objects[("api/v1", "secrets", NS)]
    await ex.start(framework(), TaskKey(0, "trainer", 0, 1))
    assert pod_name(JOB_ID, TaskKey(0, "trainer", 0, 1)) in cluster.fake.pods(NS)


async def test_a_stuck_image_pull_fails_the_task_with_its_reason_after_the_timeout(cluster: Cluster) -> None:
    exits = Exits()
    ex = await cluster.executor(exits, pull_timeout=0.3)
    await ex.start(framework(), KEY)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    await cluster.kubelet(
        {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "i",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": waiting,
                }
            ],
        }
    )
    done = await exits.next()
    assert done.failure is not None
    failure = (done.exit_code, done.failure.phrase, done.failure.type)
    assert failure == (254, "ContainerImageNotExists", "permanent")
    assert "ImagePullBackOff" in done.diagnostics
    await eventually(lambda: _async(NAME in cluster.fake.pods(NS)), lambda present: not present)
    assert exits.queue.empty()  # the deletion that follows is not a second exit


async def test_stop_deletes_the_pod_and_reports_a_stop(cluster: Cluster) -> None:
    exits = Exits()
    ex = await cluster.executor(exits)
    await ex.start(framework(), KEY)
    await cluster.kubelet({"phase": "Running"})
    await ex.stop(JOB_ID, KEY)
    done = await exits.next()
    assert (done.exit_code, done.failure) == (STOP_EXIT_CODE, None)
    assert NAME not in cluster.fake.pods(NS)


async def test_a_restarted_executor_probes_adopts_and_reports(cluster: Cluster) -> None:
    first = await cluster.executor(Exits())
    fw = framework()
    running, ended = TaskKey(0, "trainer", 0, 0), TaskKey(0, "trainer", 1, 0)
    await first.start(fw, running)
    await first.start(fw, ended)
    await cluster.kubelet({"phase": "Running"}, pod_name(JOB_ID, running))
    await first.close()
    await cluster.kubelet(
        {"phase": "Failed", "containerStatuses": [terminated(2, "Error")]}, pod_name(JOB_ID, ended)
    )

    exits = Exits()
    second = await cluster.executor(exits)
    assert second.probe(JOB_ID, running).status == "alive"
    assert second.probe(JOB_ID, ended).status == "ended"
    assert second.probe(JOB_ID, TaskKey(0, "trainer", 0, 9)).status == "absent"
    assert exits.queue.empty()  # nothing is reported unless asked or adopted
    await second.report(JOB_ID, ended)
    assert (await exits.next()).exit_code == 2
    second.adopt(JOB_ID, running, 0, Path())
    await cluster.kubelet({"phase": "Succeeded"}, pod_name(JOB_ID, running))
    done = await exits.next()
    assert (done.key, done.exit_code) == (running, 0)


async def test_a_watch_expired_by_compaction_lists_again_and_sees_the_deletion(cluster: Cluster) -> None:
    exits = Exits()
    ex = await cluster.executor(exits, watch_timeout=1)
    await ex.start(framework(), KEY)
    await cluster.kubelet({"phase": "Running"})
    await eventually(lambda: _async(ex.probe(JOB_ID, KEY).status), lambda s: s == "alive")
    await cluster.fake.pause_watches()
    await cluster.fake.delete_pod(NS, NAME)
    cluster.fake.compact()
    lists_before = _lists(cluster)
    await cluster.fake.resume_watches()
    done = await exits.next()
    assert done.failure is not None
    assert done.exit_code == -300
    assert cluster.fake.watch_errors == 1
    assert _lists(cluster) > lists_before


def _lists(cluster: Cluster) -> int:
    return sum(1 for method, path in cluster.fake.requests if method == "GET" and path.endswith("/pods"))


async def _async(value: Any) -> Any:
    return value


async def test_the_task_output_is_read_from_the_pod_log(cluster: Cluster) -> None:
    ex = await cluster.executor(Exits())
    assert await ex.pod_log(JOB_ID, KEY) == ""  # no pod yet
    await ex.start(framework(), KEY)
    cluster.fake.logs[NAME] = "".join(f"line {i}\n" for i in range(10))
    assert await ex.pod_log(JOB_ID, KEY, tail_lines=2) == "line 8\nline 9\n"


async def test_a_pod_whose_secrets_cannot_be_created_is_removed(cluster: Cluster) -> None:
    ex = await cluster.executor(Exits())
    await cluster.fake.put(("api/v1", "secrets", NS), {"metadata": {"name": f"{NAME}-secrets"}})
    with pytest.raises(ApiException):
        await ex.start(framework(), KEY)
    assert NAME not in cluster.fake.pods(NS)
