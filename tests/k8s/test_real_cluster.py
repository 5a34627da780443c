"""End to end on a real cluster: a task pod runs the runtime and its exit comes back; a bad image fails.

Runs only when a kubeconfig is present ($KUBECONFIG or ~/.kube/config); see k8s/README.md for
a kind cluster and the runtime image it needs (PAI_E2E_RUNTIME_IMAGE, default pai/runtime:dev).
Each test works in a namespace of its own, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from libs.protocol.events import JobScheduled, JobSubmitted, TaskPlacement
from libs.protocol.jobs import stored_job
from services.orchestrator.adapters.executing import TaskExit
from services.orchestrator.adapters.k8s_nodes import node_report
from services.orchestrator.adapters.k8s_pods import PodSettings
from services.orchestrator.adapters.kubernetes import KubernetesExecutor
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework, TaskKey
from tests.k8s.frameworks import job_config
from tests.orchestrator.sim import T0

KUBECONFIG = Path(os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))).expanduser()
pytestmark = pytest.mark.skipif(
    not KUBECONFIG.is_file(), reason=f"no kubeconfig at {KUBECONFIG}: the real-cluster test needs a cluster"
)
RUNTIME_IMAGE = os.environ.get("PAI_E2E_RUNTIME_IMAGE", "pai/runtime:dev")
JOB = """\
protocolVersion: 2
name: e2e
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: IMAGE}
taskRoles:
  worker:
    instances: 1
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands:
      - echo hello from $PAI_CURRENT_TASK_ROLE_NAME; exit 0
"""


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


def placed(image: str, node: str) -> Framework:
    cfg = stored_job(job_config(JOB.replace("IMAGE", image)))
    job_id = f"e2e-{uuid.uuid4().hex[:8]}"
    fw = decide(
        None,
        JobSubmitted(job_id=job_id, user="e2e", name="e2e", virtual_cluster="default", config=cfg),
        Context(T0),
    ).framework
    placement = TaskPlacement(role="worker", index=0, node=node, node_address="127.0.0.1")
    fw = decide(fw, JobScheduled(job_id=job_id, attempt=0, placements=(placement,)), Context(T0)).framework
    assert fw is not None
    return fw


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Any, str, str]]:
    from kubernetes import config as kube_config
    from kubernetes.client import CoreV1Api, V1Namespace, V1ObjectMeta

    api = kube_config.new_client_from_config(config_file=str(KUBECONFIG))  # type: ignore[no-untyped-call]
    core = CoreV1Api(api)
    namespace = f"pai-e2e-{uuid.uuid4().hex[:6]}"
    nodes = await asyncio.to_thread(core.list_node)
    ready = [node_report(n).name for n in nodes.items if node_report(n).healthy]
    if not ready:
        pytest.skip("the cluster has no ready node")
    await asyncio.to_thread(core.create_namespace, V1Namespace(metadata=V1ObjectMeta(name=namespace)))
    try:
        yield api, namespace, ready[0]
    finally:
        await asyncio.to_thread(core.delete_namespace, namespace)


async def run_one(cluster: tuple[Any, str, str], tmp_path: Path, image: str, **options: Any) -> TaskExit:
    api, namespace, node = cluster
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()

    async def on_exit(exit_: TaskExit) -> None:
        await exits.put(exit_)

    settings = PodSettings(namespace=namespace, runtime_image=RUNTIME_IMAGE, host_shared_dir="/tmp/pai-e2e")
    executor = KubernetesExecutor(api, tmp_path, on_exit, no_secrets, settings, **options)
    await executor.open()
    try:
        await executor.start(placed(image, node), TaskKey(0, "worker", 0, 0))
        return await asyncio.wait_for(exits.get(), 110)
    finally:
        await executor.close()


async def test_a_task_pod_runs_the_runtime_and_reports_success(
    cluster: tuple[Any, str, str], tmp_path: Path
) -> None:
    done = await run_one(cluster, tmp_path, "debian:bookworm-slim")
    assert (done.exit_code, done.failure) == (0, None), done.diagnostics


async def test_an_image_that_cannot_be_pulled_fails_the_task(
    cluster: tuple[Any, str, str], tmp_path: Path
) -> None:
    done = await run_one(cluster, tmp_path, "registry.invalid/nothing:0", pull_timeout=30.0)
    assert done.failure is not None
    assert done.failure.phrase == "ContainerImageNotExists"


def test_the_kubeconfig_is_readable() -> None:
    assert yaml.safe_load(KUBECONFIG.read_text())["clusters"]
