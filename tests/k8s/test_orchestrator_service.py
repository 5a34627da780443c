"""The orchestrator service with PAI_EXECUTOR=kubernetes: a scheduled job becomes pods, and the
pods' ends become the job's end, against the stateful API server through a kubeconfig."""

from __future__ import annotations

import asyncio
from pathlib import Path

from libs.backbone.connecting import Bus
from libs.protocol.events import NodeReported, decode_event
from libs.protocol.jobs import stored_job
from libs.protocol.subjects import NODES_STREAM
from services.orchestrator.adapters.k8s_pods import pod_name
from services.orchestrator.app import OrchestratorSettings, main
from services.orchestrator.core.frameworks import TaskKey
from tests.k8s.frameworks import job_config
from tests.k8s.test_nodes import node_dict
from tests.orchestrator.service_support import submit, watch_jobs
from tests.support.k8s_api import FakeKubernetes, serving
from tests.support.waiting import eventually, polled

NS = "pai-jobs"


def kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: fake, user: {token: fake}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    return path


async def test_a_scheduled_job_runs_as_pods_and_completes_when_they_succeed(
    bus: Bus, nats_server: object, tmp_path: Path
) -> None:
    fake = FakeKubernetes()
    await fake.put(("api/v1", "nodes", None), node_dict("gpu-a"))
    async with serving(fake) as url:
        settings = OrchestratorSettings(
            nats_url=getattr(nats_server, "url"),  # noqa: B009 - the fixture's type is the backbone's
            data_dir=tmp_path / "data",
            executor="kubernetes",
            kubeconfig=kubeconfig(tmp_path / "kubeconfig", url),
            jobs_namespace=NS,
            shared_claim="pai-shared",
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        service = asyncio.create_task(main(settings, stop, ready=ready))
        try:
            await asyncio.wait_for(ready.wait(), 30)
            events = await watch_jobs(bus)
            config = stored_job(job_config())
            await submit(bus, "k8sjob", config)
            expected = {
                pod_name("k8sjob", TaskKey(0, role, i, 0))
                for role, body in config.task_roles.items()
                for i in range(body.instances)
            }
            pods = await eventually(polled(lambda: set(fake.pods(NS))), lambda names: names >= expected)
            assert pods == expected
            for name in expected:
                await fake.set_pod_status(NS, name, {"phase": "Succeeded"})
            [completed] = await events.wait_for("job.completed", "k8sjob")
            assert completed.state == "SUCCEEDED"
            node = await bus.js.get_last_msg(NODES_STREAM, "pai.node.gpu-a.node.reported")
            reported = decode_event(node.data or b"")
            assert isinstance(reported, NodeReported)
            assert reported.name == "gpu-a", "the cluster's nodes are the scheduler's inventory"
        finally:
            stop.set()
            await asyncio.wait_for(service, 30)
