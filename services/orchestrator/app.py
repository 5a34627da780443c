"""Composition root of the orchestrator: bus, state store, executor, handlers and the logs RPC.

`main(settings, stop)` provisions what it needs, recovers every job it owns (republishing
pending events, adopting live tasks, reporting tasks that ended while it was down, starting
tasks whose runtime never began), answers log requests, and consumes PAI_JOBS through its
durable consumer with one sequential queue per job until `stop` is set. Tasks keep running when
it stops: a restarted orchestrator adopts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import socket
from pathlib import Path
from typing import Literal

import structlog
from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from libs.backbone.connecting import connect, open_bucket, patiently
from libs.backbone.consuming import by_job_id, consume
from libs.backbone.errors import TRANSIENT_ERRORS
from libs.backbone.fencing import FenceReader
from libs.backbone.heartbeats import beat_forever
from libs.backbone.leasing import Lease, lead
from libs.backbone.provisioning import ConsumerSpec, ensure_consumer, ensure_kv
from libs.backbone.sealing import cipher_for
from libs.backbone.settings import BackboneSettings
from libs.backbone.topology import LEASES, SECRETS, ensure_topology, publish_event
from libs.protocol.capacity import task_pids_of
from libs.protocol.events import EventBase, NodeLost, decode_event
from libs.protocol.subjects import JOBS_STREAM, NODES_STREAM, ROOT
from libs.web.serving import site
from services.orchestrator.adapters.confinement import TaskGroups, detect, tasks_budget
from services.orchestrator.adapters.engines import detect_engine, pull_policy
from services.orchestrator.adapters.entering import ExecSettings, exec_app
from services.orchestrator.adapters.executing import ExitCallback, TaskExit
from services.orchestrator.adapters.isolation import resolve_task_users, task_environment
from services.orchestrator.adapters.k8s_nodes import NodeInventory
from services.orchestrator.adapters.k8s_pods import PodSettings
from services.orchestrator.adapters.kubernetes import API_ERRORS, KubernetesExecutor
from services.orchestrator.adapters.local import DiskShares, LocalExecutor, runtime_path
from services.orchestrator.adapters.logs import LOGS_QUEUE, LOGS_SUBJECT, read_log, window
from services.orchestrator.adapters.rules import RulesKeeper
from services.orchestrator.adapters.sandboxing import detect_sandbox
from services.orchestrator.adapters.state import FrameworkStore, SecretsReader, SubmissionReader
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.core.limits import DEFAULT_ZERO_CPU_CORES, LimitDefaults
from services.orchestrator.handlers import GROUP_LIMIT, Orchestrator

log = structlog.get_logger(__name__)

DURABLE = "orchestrator"
HANGUP_SECONDS = 5.0
"""At a stop, how long execs in progress are given before their sockets close (and they end)."""
NODES_DURABLE = "orchestrator-nodes"
NODES_CONSUMER = ConsumerSpec(
    stream=NODES_STREAM,
    durable=NODES_DURABLE,
    filter_subjects=(f"{ROOT}.node.*.node.lost",),
    description="the orchestrator: tasks on lost nodes end as platform failures",
)
# Not job.submitted: a job's framework is built from its submission when the job is first placed,
# stopped or preempted (see Orchestrator._from_submission), so waiting jobs cost nothing here.
CONSUMED_TYPES = ("job.scheduled", "job.stop_requested", "job.preempting", "task.completed")
CONSUMER = ConsumerSpec(
    stream=JOBS_STREAM,
    durable=DURABLE,
    filter_subjects=tuple(f"{ROOT}.job.*.{kind}" for kind in CONSUMED_TYPES),
    ack_wait=60.0,
    description="the orchestrator: job attempts and their tasks",
)


def absolute(path: Path) -> Path:
    """Task specs name directories the runtime opens from its own working directory."""
    return Path(os.path.abspath(path))


class OrchestratorSettings(BackboneSettings):
    """Backbone settings plus how long a stopped task gets between SIGTERM and SIGKILL."""

    model_config = SettingsConfigDict(env_prefix="PAI_", frozen=True, extra="ignore")

    service_name: str = "orchestrator"
    stop_grace_seconds: float = 10.0
    adopt_poll_seconds: float = 0.5
    # "local": tasks are processes on this machine; "kubernetes": a pod per task.
    executor: Literal["local", "kubernetes"] = "local"
    kubeconfig: Path | None = None  # None: the in-cluster service account
    jobs_namespace: str = "pai-jobs"
    runtime_image: str = "pai/runtime:latest"
    shared_claim: str | None = None
    # Who every container of a task pod runs as (runAsUser, runAsGroup and fsGroup), never the
    # image's own user: Kubernetes' restricted Pod Security Standard (docs/security.md).
    pod_task_uid: int = Field(default=1000, ge=1)
    pod_task_gid: int = Field(default=1000, ge=1)
    image_pull_timeout_seconds: float = 300.0
    node_report_every: float = 15.0  # kubernetes: how often the nodes' inventory is read
    # The key job secrets are sealed with (libs/backbone/sealing.py), as rest's settings name it.
    secrets_key: SecretStr | None = None
    secrets_key_file: Path | None = None
    # Who local tasks run as: "auto" (a uid per platform user when the orchestrator runs as
    # root, from task_uids; else the orchestrator's user), "tenant" (the same, refused when not
    # root), "none" (the orchestrator's user), or a user name for every task (shared trust);
    # services/orchestrator/adapters/isolation.py.
    task_user: str = "auto"
    task_uids: str = ""  # FIRST-LAST; empty: isolation.DEFAULT_UID_RANGE
    task_uid_registry: str = ""  # the machine's claims on task uids; empty: /var/lib/pai/uids
    # Kernel limits of local tasks (core/limits.py): processes per task, and the CPU a task of
    # cpu: 0 (no reservation) may still use.
    # None: 4,096, or a sixteenth of what all tasks may hold where that is less (capacity.py).
    task_pids_max: int | None = Field(default=None, ge=16)
    # What the platform keeps of the machine from all tasks together (libs/protocol/capacity.py).
    reserve_memory_mb: int | None = Field(default=None, ge=0)
    reserve_pids: int | None = Field(default=None, ge=0)
    # The data dir's filesystem: each task's work dir share and the platform's reserve (capacity.py).
    task_disk_mb: int | None = Field(default=None, ge=1)
    reserve_disk_mb: int | None = Field(default=None, ge=0)
    disk_check_every: float = Field(default=2.0, gt=0)
    task_zero_cpu_cores: float = Field(default=DEFAULT_ZERO_CPU_CORES, gt=0)
    # Local tasks' runtimes forked from a warm one (runtime/forkserver.py); false: each task's
    # runtime is a new interpreter.
    fork_server: bool = True
    # Local tasks in their docker images: "auto" (Podman, else Docker, else the host), "podman",
    # "docker" or "host"; images pulled when "missing", "never" or "always" (adapters/engines.py).
    task_engine: str = "auto"
    task_sandbox: str = "auto"
    image_pull: str = "missing"
    # An image not on the node: pulled (PAI_IMAGE_PULL says when), or the task on the host.
    image_missing: Literal["pull", "host"] = "pull"
    # What runs their containers under Podman: "auto" (runc itself on bundles the executor makes,
    # where runc is Podman's runtime and the platform runs as root; else the engine), "runc" or
    # "engine"; and how many of their starts may be in flight at once (None: twice the cores).
    container_runner: str = "auto"
    container_starts: int | None = Field(default=None, ge=1)
    # Replicas: one leads and the others stand by until its lease in KV is free (PAI_LEADER_LEASE);
    # each replica names itself with PAI_INSTANCE (a restarted replica takes its own lease back).
    leader_lease: bool = False
    instance: str = socket.gethostname()
    # The node's NVIDIA MPS pipe directory (`pai up` sets it where its control daemon runs):
    # given to tasks holding a share of a GPU, so MPS holds them to it.
    gpu_mps_pipe_directory: Path | None = None
    # Where `pai job exec` reaches this node's tasks (adapters/entering.py): a Unix socket in a
    # directory only the platform's user may enter (`pai up` gives one); none: no exec here.
    orchestrator_socket: Path | None = None


async def kubernetes_executor(
    settings: OrchestratorSettings, data_dir: Path, on_exit: ExitCallback, secrets: SecretsReader
) -> KubernetesExecutor:
    """A pod per task, through the official client configured from a kubeconfig or in-cluster."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if settings.kubeconfig is not None:
        await asyncio.to_thread(
            config.load_kube_config, config_file=str(settings.kubeconfig), client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    pods = PodSettings(
        namespace=settings.jobs_namespace,
        runtime_image=settings.runtime_image,
        shared_claim=settings.shared_claim,
        grace_seconds=int(settings.stop_grace_seconds),
        task_uid=settings.pod_task_uid,
        task_gid=settings.pod_task_gid,
    )
    executor = KubernetesExecutor(
        client.ApiClient(configuration),
        data_dir,
        on_exit,
        secrets,
        pods,
        pull_timeout=settings.image_pull_timeout_seconds,
    )
    await executor.open()
    return executor


async def report_nodes(
    inventory: NodeInventory, js: JetStreamContext, stop: asyncio.Event, every: float
) -> None:
    """Kubernetes is the node inventory here: publish what changed, now and every `every` s."""
    while not stop.is_set():
        try:
            for event in await inventory.refresh():
                await publish_event(js, event)
        except (*TRANSIENT_ERRORS, *API_ERRORS) as exc:  # the API or the bus is away: next round
            log.warning("node inventory not published", error=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def pod_log_reply(executor: KubernetesExecutor, raw: bytes) -> dict[str, object]:
    """The logs RPC answered from the kubelet: the same request and reply as for local files."""
    try:
        query = json.loads(raw)
        key = TaskKey(
            int(query["attempt"]),
            str(query["role"]),
            int(query["index"]),
            int(query.get("task_attempt", 0)),
        )
        text = await executor.pod_log(str(query["job_id"]), key)
    except (ValueError, KeyError, TypeError) as exc:
        return {"error": f"bad log request: {exc}"}
    data = text.encode()
    offset, limit = int(query.get("offset", 0)), int(query.get("limit", len(data)))
    start = max(0, len(data) + offset) if offset < 0 else min(offset, len(data))
    return window(data[start : start + limit], start, len(data))


async def serve_execs(data_dir: Path, socket_path: Path, poll_s: float) -> web.AppRunner:
    """`pai job exec` on this node's tasks, on a Unix socket REST reaches (adapters/entering.py)."""
    settings = ExecSettings(
        data_dir, lambda: task_environment(os.environ, PYTHONPATH=runtime_path()), poll_s=poll_s
    )
    runner = web.AppRunner(exec_app(settings), shutdown_timeout=HANGUP_SECONDS)
    await runner.setup()
    await site(runner, "", 0, socket_path).start()
    log.info("execs served", socket=str(socket_path))
    return runner


async def consume_jobs(js: JetStreamContext, orchestrator: Orchestrator, stop: asyncio.Event) -> None:
    """The orchestrator's consume loop on the job stream, until `stop`: one queue per job, and a
    job's queued messages handed over together, to be decided together (`Orchestrator.apply`)."""
    await consume(
        js,
        JOBS_STREAM,
        DURABLE,
        orchestrator.handle_message,
        stop=stop,
        key=by_job_id,
        batch=GROUP_LIMIT,
        pipeline=GROUP_LIMIT,
    )


async def main(
    settings: OrchestratorSettings, stop: asyncio.Event, *, ready: asyncio.Event | None = None
) -> None:
    """The orchestrator until ``stop``, its parts started and stopped under one exit stack.

    Its background tasks run in a task group: one that raises cancels the rest and ends the
    service with the error (and its traceback), for its supervisor to start it again, rather
    than vanish while the service goes on without it. What was started is stopped in reverse
    order: the subscriptions, the executor, then ``stop`` for the background tasks, the lease
    released last before the bus closes."""
    async with contextlib.AsyncExitStack() as stack:
        bus = await connect(settings, name=settings.service_name)
        stack.push_async_callback(bus.close)
        background = await stack.enter_async_context(asyncio.TaskGroup())
        leading: asyncio.Task[None] | None = None

        async def release_lease() -> None:
            if leading is not None:
                await leading  # the lease released once everything else has stopped

        stack.push_async_callback(release_lease)
        stack.callback(stop.set)  # ends every background task, before the group is awaited
        background.create_task(beat_forever(bus.nc, settings.service_name, stop), name="heartbeat")
        await ensure_topology(bus.js, settings.stream_replicas)
        await patiently(functools.partial(ensure_kv, bus.js, SECRETS))
        secrets_reader = SecretsReader(
            bus.js,
            cipher_for(
                settings.secrets_key.get_secret_value() if settings.secrets_key else None,
                settings.secrets_key_file,
                absolute(settings.data_dir),
            ),
        )
        await patiently(functools.partial(ensure_consumer, bus.js, CONSUMER))
        await patiently(functools.partial(ensure_consumer, bus.js, NODES_CONSUMER))
        if settings.leader_lease:
            leases = await open_bucket(bus.js, LEASES.bucket)
            lease = Lease(leases, "orchestrator", settings.instance)
            leading = await lead(lease, stop)
            if leading is None:
                return
        # The bus may be electing or a server away as a replica starts (a leader lost): each step
        # is tried again for a while rather than ending the service.
        fence = await patiently(functools.partial(FenceReader.open, bus.js))
        store = await patiently(functools.partial(FrameworkStore.open, bus.js))
        data_dir = absolute(settings.data_dir)
        rules = await patiently(functools.partial(RulesKeeper.open, bus.js, data_dir))
        background.create_task(rules.watch(), name="failure-rules")
        stack.push_async_callback(rules.close)  # ends the watch by stopping its watcher

        async def publish(event: EventBase) -> None:
            await publish_event(bus.js, event)

        orchestrator: Orchestrator | None = None

        async def on_exit(exit_: TaskExit) -> None:
            assert orchestrator is not None
            await orchestrator.on_task_exit(exit_)

        executor: LocalExecutor | KubernetesExecutor
        if settings.executor == "kubernetes":
            executor = await kubernetes_executor(settings, data_dir, on_exit, secrets_reader)
            stack.push_async_callback(executor.close)
            inventory = NodeInventory(executor.api)
            background.create_task(
                report_nodes(inventory, bus.js, stop, settings.node_report_every), name="node-inventory"
            )
        else:
            # What all tasks together may hold: the machine less the platform's reserve.
            budget = tasks_budget(settings.reserve_memory_mb, settings.reserve_pids)
            executor = LocalExecutor(
                data_dir,
                on_exit,
                secrets_reader,
                grace_seconds=settings.stop_grace_seconds,
                poll_seconds=settings.adopt_poll_seconds,
                rules=lambda: rules.rules,
                task_users=await asyncio.to_thread(
                    resolve_task_users,
                    settings.task_user,
                    data_dir,
                    uid_range=settings.task_uids,
                    registry=settings.task_uid_registry,
                ),
                fork_server=settings.fork_server,
                mps_pipe_dir=settings.gpu_mps_pipe_directory,
                confinement=TaskGroups(
                    await asyncio.to_thread(functools.partial(detect, data_dir, budget=budget)),
                    LimitDefaults(
                        settings.task_pids_max or task_pids_of(budget.pids), settings.task_zero_cpu_cores
                    ),
                ),
                engine=(
                    await asyncio.to_thread(
                        detect_engine, settings.task_engine, data_dir, settings.container_runner
                    )
                ).engine,
                image_pull=pull_policy(settings.image_pull),
                image_missing=settings.image_missing,
                sandbox=(await asyncio.to_thread(detect_sandbox, settings.task_sandbox)).tools,
                disk=DiskShares(settings.task_disk_mb, settings.reserve_disk_mb, settings.disk_check_every),
                container_starts=settings.container_starts,
            )
            stack.push_async_callback(executor.close)
            log.info(
                "local tasks",
                users=executor.task_users.describe(),
                limits=executor.groups.confinement.describe(),
                engine=executor.engine.describe() if executor.engine else "host",
                sandbox="on" if executor.sandbox else "off",
            )
        submissions = SubmissionReader(bus.js)
        orchestrator = Orchestrator(
            store, executor, publish, rules=rules, submissions=submissions, fence=fence
        )
        recovered = await patiently(orchestrator.recover)
        log.info("recovered", jobs=recovered)

        async def on_logs(msg: Msg) -> None:
            if isinstance(executor, KubernetesExecutor):
                reply = await pod_log_reply(executor, msg.data)
            else:
                reply = await asyncio.to_thread(read_log, data_dir, msg.data)
            await msg.respond(json.dumps(reply).encode())

        logs_sub = await bus.nc.subscribe(LOGS_SUBJECT, queue=LOGS_QUEUE, cb=on_logs)
        stack.push_async_callback(logs_sub.unsubscribe)
        if isinstance(executor, LocalExecutor) and settings.orchestrator_socket is not None:
            exec_runner = await serve_execs(
                data_dir, settings.orchestrator_socket, settings.adopt_poll_seconds
            )
            stack.push_async_callback(exec_runner.cleanup)

        async def on_node_message(msg: Msg) -> None:
            event = decode_event(msg.data)
            if isinstance(event, NodeLost):
                ended = await orchestrator.on_node_lost(event.name)
                log.warning("node lost; its tasks ended as platform failures", node=event.name, tasks=ended)

        background.create_task(
            consume(bus.js, NODES_STREAM, NODES_DURABLE, on_node_message, stop=stop), name="node-events"
        )
        stack.callback(stop.set)  # a failure or a stop: first of all, the background work ends
        if ready is not None:
            ready.set()
        await consume_jobs(bus.js, orchestrator, stop)
