"""Chaos on the production topology, as processes on one machine: nothing lost, nothing twice.

Starts what the Kubernetes manifests run, without Kubernetes: three nats-servers clustered on
loopback (every stream and bucket with three replicas), a PostgreSQL database of its own in the
machine's server at 127.0.0.1:5432 (created here, dropped at the end), and replicas of every
service (`--replica NAME=N`; by default two of each: rest, scheduler, orchestrator, events,
marketplace, portal, monitor and alerter), each told every NATS server. The schedulers, the
orchestrators, the monitors' cluster view and the alerters lead one at a time through their
leases in KV; rest, events, marketplace and portal replicas are all active. Tasks are local
processes of the orchestrator that leads (its standby adopts them), with simulated GPUs so that
every placement names devices. Every job asks to be told when it succeeds, and the alerting
configuration sends that to a webhook of the bench's.

It submits `--jobs` jobs of two tasks of one GPU each through either REST replica (a client
that finds one refusing or gone uses the other), and while they run, over `--rounds` rounds,
kills with SIGKILL every NATS server, one at a time (each is back and caught up before the
next), and every service replica, the leaders of the scheduler, the orchestrator, the monitor
and the alerter included (the first replica of each to go is its leader); in
the first round it also freezes one NATS server with SIGSTOP for `--partition` seconds (its
peers and its clients see a server that answers nothing: a cut-off node, not a dead one), and
freezes the scheduler leader for 9 s so that a standby takes over while the old leader lives on
and speaks again later (its late decisions must be fenced). Then it waits for every job to end
and reports, last line JSON:

- jobs, final, lost (accepted, not listed), stuck (not final at the end), twice (task
  executions beyond the first in one attempt, from marker files the tasks write);
- double_allocations: a GPU held by two jobs at once, read from the job stream in order with
  the fencing rule applied (a decision fenced off counts for nothing, as for the services);
  fenced: decisions of deposed scheduler leaders found in the stream;
- alerts_notified, alerts_twice, alerts_missed: job notifications at the bench's webhook, by
  alert group; notifications of a group beyond its first; succeeded jobs never notified;
- node_count_max: the most times one node was counted at once over every monitor's /metrics
  (`pai_node_count`, read twice a second; 1: only the leading monitor counts the cluster);
- nats_nodes, stream_replicas, database, replicas (service -> count), killed (names, in order),
  partitions, failover_s (the longest from a scheduler leader's loss to the next placement),
  api_unavailable_s (the longest stretch in which neither REST replica answered a job list),
  jobs_per_s (jobs ended per second from the first submission to the last end).

`--rounds 0` kills nothing: the throughput run (compare `--replica orchestrator=1` and `=2`).

Command: .venv/bin/python bench/cluster_chaos.py [--jobs N] [--rounds R] [--seed X] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints
import httpx
import nats
from aiohttp import web
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chaos_bench import ADMIN_PASSWORD, FINAL, MARKER, count_markers, why_ended
from libs.backbone.connecting import patiently
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.fencing import FENCES_BUCKET, SCHEDULER_FENCE
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import LEASES, ensure_topology
from libs.protocol.events import JobCompleted, JobRetrying, JobScheduled, decode_event
from libs.protocol.fencing import decode, deposed
from libs.protocol.subjects import JOB_SUBJECTS, JOBS_STREAM
from pai.embedded.platform import free_port, task_runtimes
from pai.embedded.supervising import Child, NatsChild, Supervisor, die_with_parent
from services.alerter.adapters.rules_store import put_rules

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
NATS_NODES = 3
DEFAULT_REPLICAS = {
    "rest": 2,
    "scheduler": 2,
    "orchestrator": 2,
    "events": 2,
    "marketplace": 2,
    "portal": 2,
    "monitor": 2,
    "alerter": 2,
}
# Served over HTTP: their replicas each get a port of their own, and answer this path once up
# (the monitor: its Prometheus endpoint).
PORTS = {
    "rest": "PAI_REST_PORT",
    "events": "PAI_EVENTS_PORT",
    "marketplace": "PAI_MARKETPLACE_PORT",
    "portal": "PAI_PORTAL_PORT",
    "monitor": "PAI_METRICS_PORT",
}
READY = {
    "rest": "/api/v2/info",
    "events": "/api/v2/events",
    "marketplace": "/marketplace/api/items",
    "portal": "/healthz",
    "monitor": "/metrics",
}
# One replica leads, the others stand by: the key of each one's lease in KV PAI_LEASES.
LEASED = {name: name for name in ("scheduler", "orchestrator", "monitor", "alerter")}
# The alerting configuration of the run: each job's owner is told once that it succeeded
# (the job asks for it), at the bench's webhook; a notification twice is an alert sent twice.
ALERTING = """settings: {{evaluation_interval: 1s}}
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{{notify="true"}} > 0
    for: 0s
    labels: {{severity: info, type: job_notification}}
route:
  receiver: owners
  group_by: [job_id, state, attempt]
  group_wait: 0s
  group_interval: 5m
  repeat_interval: 24h
receivers:
  - name: owners
    webhook_configs: [{{url: "{url}"}}]
"""
# Each server's part of the cluster; a frozen peer is noticed within seconds, not minutes.
CLUSTER_CONFIG = """ping_interval: "1s"
ping_max: 3
write_deadline: "2s"
cluster {{
  name: pai-chaos
  listen: 127.0.0.1:{listen}
  routes: [{routes}]
}}
"""
SCHEDULER_PAUSE = 9.0  # longer than the lease's TTL: a standby takes over while the leader sleeps
JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  work:
    instances: 2
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 1}}
    commands:
      - 'mktemp "{markers}/{marker}.XXXXXX" >/dev/null'
      - sleep {work}
extras:
  jobStatusChangeNotification: {{succeeded: true}}
"""

PROBE = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  probe:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 0}}
    commands:
      - 'true'
"""


@dataclass
class Report:
    jobs: int
    accepted: int = 0
    listed: int = 0
    final: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    twice: dict[str, int] = field(default_factory=dict)
    double_allocations: int = 0
    fenced: int = 0
    # Job notifications at the bench's webhook: alert groups notified, notified beyond the first
    # time, and jobs that succeeded without a notification.
    alerts_notified: int = 0
    alerts_twice: int = 0
    alerts_repeated: dict[str, int] = field(default_factory=dict)  # group -> notifications
    alerts_missed: list[str] = field(default_factory=list)
    # The most times one node was counted at once over every monitor's /metrics (pai_node_count).
    node_count_max: int = 0
    node_scrapes: int = 0
    probes: int = 0  # jobs submitted at a scheduler leader's loss to time the failover
    probes_final: int = 0
    unsuccessful: dict[str, str] = field(default_factory=dict)
    stream_replicas: int = 0
    database: str = ""
    replicas: dict[str, int] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    failovers: list[dict[str, Any]] = field(default_factory=list)
    api_unavailable_s: float = 0.0
    # A service that ended by an error of its own (not a kill of the bench's): each error's type
    # and the platform's deepest line it went through, from the traceback in the service's log.
    crashes: dict[str, list[str]] = field(default_factory=dict)
    client_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    jobs_per_s: float = 0.0
    seconds: float = 0.0
    seed: int = 0

    @property
    def failover_s(self) -> float | None:
        measured = [f["seconds"] for f in self.failovers if f["seconds"] is not None]
        return round(max(measured), 2) if measured else None

    @property
    def ok(self) -> bool:
        return (
            not self.lost
            and not self.stuck
            and not self.twice
            and not self.double_allocations
            and not self.alerts_twice
            and not self.alerts_missed
            and self.node_count_max <= 1
            and self.final == self.accepted == self.jobs
            and self.probes_final == self.probes
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "accepted": self.accepted,
            "final": self.final,
            "by_state": self.by_state,
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "twice": sum(self.twice.values()),
            "double_allocations": self.double_allocations,
            "fenced": self.fenced,
            "alerts_notified": self.alerts_notified,
            "alerts_twice": self.alerts_twice,
            "alerts_repeated": self.alerts_repeated,
            "alerts_missed": len(self.alerts_missed),
            "node_count_max": self.node_count_max,
            "node_scrapes": self.node_scrapes,
            "probes": self.probes,
            "probes_final": self.probes_final,
            "nats_nodes": NATS_NODES,
            "stream_replicas": self.stream_replicas,
            "database": self.database,
            "replicas": self.replicas,
            "killed": self.killed,
            "partitions": self.partitions,
            "failover_s": self.failover_s,
            "failovers": self.failovers,
            "api_unavailable_s": round(self.api_unavailable_s, 2),
            "crashes": self.crashes,
            "client_errors": dict(self.client_errors),
            "unsuccessful": self.unsuccessful,
            "jobs_per_s": round(self.jobs_per_s, 2),
            "seconds": round(self.seconds, 1),
            "seed": self.seed,
        }


# -- the NATS cluster ------------------------------------------------------------------------


class NatsCluster:
    """Three nats-servers routed to each other on loopback, each supervised (back within a second
    of a kill, on its port and store)."""

    def __init__(self, root: Path, nodes: int = NATS_NODES) -> None:
        self.client_ports = [free_port() for _ in range(nodes)]
        route_ports = [free_port() for _ in range(nodes)]
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
        self.servers = [
            EmbeddedNats(
                root / f"nats-{i}",
                port=self.client_ports[i],
                name=f"nats-{i}",
                # The config block after the server's own settings (the slot users go in).
                authorization=CLUSTER_CONFIG.format(listen=route_ports[i], routes=routes),
                preexec_fn=die_with_parent(),
            )
            for i in range(nodes)
        ]
        self.children = [NatsChild(server, name=f"nats-{i}") for i, server in enumerate(self.servers)]

    def url(self, first: int = 0) -> str:
        """Every server, starting from `first` (clients spread over the cluster)."""
        ports = self.client_ports[first:] + self.client_ports[:first]
        return ",".join(f"nats://127.0.0.1:{port}" for port in ports)

    async def start(self) -> None:
        await asyncio.gather(*(child.start() for child in self.children))

    def resume_all(self) -> None:
        for child in self.children:
            if child.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGCONT)


async def quiet(exc: Exception) -> None:
    return None  # the bench kills and freezes servers on purpose; reconnects are expected


async def until_jetstream(url: str, replicas: int) -> NATS:
    """A connection once the cluster has a JetStream leader, the topology provisioned with
    `replicas` copies before any service starts (no replica races for it)."""
    nc = await nats.connect(
        url.split(","),
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        ping_interval=1,
        max_outstanding_pings=2,
        error_cb=quiet,
    )
    js = nc.jetstream(timeout=5.0)
    deadline = time.monotonic() + 60
    while True:
        try:
            await ensure_topology(js, replicas)
            return nc
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)  # a meta leader is being elected: nothing to await but it


async def until_caught_up(nc: NATS, within: float = 60.0) -> None:
    """Until every stream and bucket has a leader and all its replicas current again (a killed
    server caught up, the groups it led led again)."""
    js = nc.jetstream(timeout=3.0)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            infos = await js.streams_info()
            if infos and all(_current(info.cluster) for info in infos):
                return
        await asyncio.sleep(0.25)  # an election has no event to await


def _current(cluster: Any) -> bool:
    peers = (cluster.replicas or []) if cluster is not None else []
    return bool(
        cluster is not None
        and cluster.leader
        and len(peers) == NATS_NODES - 1
        and all(r.current and not r.offline for r in peers)
    )


# -- the database ----------------------------------------------------------------------------


async def create_database() -> str:
    name = f"pai_cluster_chaos_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name


async def drop_database(name: str) -> None:
    with contextlib.suppress(Exception):
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


# -- the services ----------------------------------------------------------------------------


def service_children(
    replicas: dict[str, int], cluster: NatsCluster, data_dir: Path, database: str, gpus: int
) -> tuple[list[Child], dict[str, list[str]]]:
    """A child per replica (`rest-0`, `rest-1`, ...), and the HTTP addresses of each HTTP service."""
    ports = {name: [free_port() for _ in range(count)] for name, count in replicas.items() if name in PORTS}
    urls = {name: [f"http://127.0.0.1:{port}" for port in found] for name, found in ports.items()}
    common = {
        "PAI_STREAM_REPLICAS": str(NATS_NODES),
        # A frozen server is left in about three seconds (the default would take four minutes).
        "PAI_NATS_PING_INTERVAL": "1",
        "PAI_DATA_DIR": str(data_dir),
        "PAI_DATABASE_URL": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{database}",
        "PAI_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PAI_LOG_FORMAT": "json",
        "PAI_LOG_LEVEL": "warning",
        "PAI_CPU_OVERCOMMIT": "16",
        "PAI_MEMORY_OVERCOMMIT": "4",
        "PAI_SIMULATED_GPUS": str(gpus),
        # The tasks write markers into this bench's folder: as the platform's user, on the host.
        "PAI_TASK_USER": "none",
        "PAI_TASK_ENGINE": "host",
        "PAI_RATE_LIMIT_API_PER_MIN": "0",
        "PAI_RATE_LIMIT_LIST_JOB_PER_MIN": "0",
        "PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR": "0",
        "PAI_REST_URL": urls["rest"][0] if urls.get("rest") else "",
        "PAI_METRICS_PORT": "-1",
        "PAI_MARKETPLACE_SEED": "false",
    }
    children: list[Child] = []
    spread = 0
    for name, count in replicas.items():
        for index in range(count):
            env = {
                **common,
                "PAI_SERVICE_NAME": name,
                "PAI_NATS_URL": cluster.url(spread % NATS_NODES),
                "PAI_INSTANCE": f"{name}-{index}",
            }
            spread += 1
            if name in PORTS:
                env[PORTS[name]] = str(ports[name][index])
            if name == "scheduler":
                env["PAI_LOG_LEVEL"] = "info"  # its takeovers, step by step, in its log
            if name == "orchestrator":
                env["PAI_LEADER_LEASE"] = "true"
            if name == "portal":
                # Each portal speaks to a REST replica of its own; both seal sessions with one key.
                env["PAI_PORTAL_REST_URL"] = urls["rest"][index % len(urls["rest"])]
                env["PAI_PORTAL_SECRET_FILE"] = str(data_dir / "portal-session.secret")
            children.append(
                Child(
                    name=f"{name}-{index}",
                    argv=[sys.executable, "-m", f"services.{name}"],
                    env=env,
                    log_path=data_dir / "logs" / f"{name}-{index}.log",
                )
            )
    return children, urls


# -- the API, as a patient client sees it through either replica -------------------------------


class Api:
    def __init__(self, urls: list[str], report: Report, rng: random.Random) -> None:
        self.clients = [httpx.AsyncClient(base_url=url, timeout=10.0) for url in urls]
        self.report = report
        self.rng = rng
        self.token = ""

    def _pick(self) -> list[httpx.AsyncClient]:
        order = list(self.clients)
        self.rng.shuffle(order)
        return order

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def login(self) -> None:
        while True:
            for client in self._pick():
                try:
                    answer = await client.post(
                        "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
                    )
                except httpx.TransportError:
                    continue
                if answer.status_code == 200:
                    self.token = answer.json()["token"]
                    return
            await asyncio.sleep(0.2)

    async def submit(self, text: str) -> bool:
        """True once accepted (202; a 409 after a try whose answer was lost counts as accepted)."""
        retried = False
        while True:
            for client in self._pick():
                try:
                    answer = await client.post(
                        "/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml", **self._auth}
                    )
                except httpx.TransportError as exc:
                    self.report.client_errors[f"submit {type(exc).__name__}"] += 1
                    retried = True
                    continue
                if answer.status_code == 202:
                    return True
                if answer.status_code == 409 and retried:
                    return True
                self.report.client_errors[f"submit {answer.status_code}"] += 1
                if answer.status_code == 401:
                    await self.login()
                elif answer.status_code in (429, 503) or answer.status_code >= 500:
                    retried = retried or answer.status_code >= 500
                else:
                    return False
            await asyncio.sleep(0.3)

    async def jobs(self) -> list[dict[str, Any]] | None:
        for client in self._pick():
            try:
                answer = await client.get("/api/v2/jobs", params={"limit": "50000"}, headers=self._auth)
            except httpx.TransportError:
                continue
            if answer.status_code == 200:
                return list(answer.json())
        return None

    async def detail(self, username: str, name: str) -> dict[str, Any] | None:
        for client in self._pick():
            with contextlib.suppress(httpx.TransportError):
                answer = await client.get(f"/api/v2/jobs/{username}~{name}", headers=self._auth)
                if answer.status_code == 200:
                    detail: dict[str, Any] = answer.json()
                    return detail
        return None

    async def probe(self, stop: asyncio.Event) -> None:
        """Every quarter second a one-job list through either replica; the longest stretch in
        which neither answered is the API's unavailability."""
        down_since: float | None = None
        while not stop.is_set():
            ok = False
            for client in self._pick():
                with contextlib.suppress(httpx.TransportError):
                    answer = await client.get(
                        "/api/v2/jobs", params={"limit": "1"}, headers=self._auth, timeout=1.0
                    )
                    if answer.status_code == 200:
                        ok = True
                        break
            now = time.monotonic()
            if ok:
                if down_since is not None:
                    self.report.api_unavailable_s = max(self.report.api_unavailable_s, now - down_since)
                down_since = None
            elif down_since is None:
                down_since = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.25)

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()


async def until_answers(url: str, path: str, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as client:
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(path)).status_code < 500:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}{path} did not answer within {within:g}s")
            await asyncio.sleep(0.2)  # an HTTP server coming up has no event to await


# -- what the alerters notify and what the monitors count --------------------------------------


class Notifications:
    """The bench's webhook: every job notification the alerters send, by alert group."""

    def __init__(self) -> None:
        self.groups: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.succeeded: set[str] = set()  # job names notified as SUCCEEDED
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.arrived = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/hook"

    async def _hook(self, request: web.Request) -> web.Response:
        body = await request.json()
        for alert in body.get("alerts", []):
            labels = alert.get("labels", {})
            if alert.get("status") != "firing":
                continue
            self.groups[(labels.get("job_id", ""), labels.get("state", ""), labels.get("attempt", ""))] += 1
            if labels.get("state") == "SUCCEEDED":
                self.succeeded.add(labels.get("job_name", ""))
        self.arrived.set()
        return web.Response(text="ok")

    @property
    def twice(self) -> int:
        return sum(count - 1 for count in self.groups.values())

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


NODE_COUNT = re.compile(r'^pai_node_count\{node_name="([^"]+)"', re.MULTILINE)


async def count_nodes(urls: list[str], report: Report, stop: asyncio.Event) -> None:
    """Twice a second, each node's pai_node_count summed over every monitor that answers: one
    monitor (the leader) counts the cluster, so no node may be counted twice."""
    async with httpx.AsyncClient(timeout=1.0) as client:
        while not stop.is_set():
            counted: collections.Counter[str] = collections.Counter()
            for url in urls:
                with contextlib.suppress(httpx.HTTPError):
                    answer = await client.get(f"{url}/metrics")
                    if answer.status_code == 200:
                        counted.update(NODE_COUNT.findall(answer.text))
            if counted:
                report.node_scrapes += 1
                report.node_count_max = max(report.node_count_max, *counted.values())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


# -- checking the job stream ------------------------------------------------------------------


async def read_stream(nc: NATS) -> list[tuple[int, Any]]:
    """Every job event with its stream sequence, in stream order."""
    js = nc.jetstream(timeout=10.0)
    last = (await js.stream_info(JOBS_STREAM)).state.last_seq
    out: list[tuple[int, Any]] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        with contextlib.suppress(Exception):
            out.append((seq, decode_event(msg.data)))
        if seq >= last:
            done.set()

    sub = await subscribe_ordered(js, JOB_SUBJECTS, deliver_policy=DeliverPolicy.ALL, cb=on_msg)
    if last:
        await asyncio.wait_for(done.wait(), 120)
    await sub.unsubscribe()
    return out


def double_allocations(events: list[tuple[int, Any]], fences_raw: bytes | None) -> tuple[int, int]:
    """GPUs held by two jobs at once, following the stream as the scheduler does (a placement
    holds its devices until the job's retry or end; fenced decisions hold nothing); and how
    many decisions were fenced."""
    fences = decode(fences_raw)
    held: dict[tuple[str, int], str] = {}
    holding: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
    placed: set[tuple[str, int]] = set()
    doubles = fenced = 0
    for seq, event in events:
        if isinstance(event, JobScheduled):
            if deposed(event.epoch, seq, fences):
                fenced += 1
                continue
            if (event.job_id, event.attempt) in placed:
                doubles += 1  # one attempt placed twice by decisions that both count
                continue
            placed.add((event.job_id, event.attempt))
            for placement in event.placements:
                for gpu in placement.gpu_indices:
                    device = (placement.node, gpu)
                    if held.get(device, event.job_id) != event.job_id:
                        doubles += 1
                    held[device] = event.job_id
                    holding[event.job_id].add(device)
        elif isinstance(event, JobRetrying | JobCompleted):
            for device in holding.pop(event.job_id, set()):
                if held.get(device) == event.job_id:
                    del held[device]
    return doubles, fenced


# -- the run ----------------------------------------------------------------------------------


async def run(
    jobs: int,
    rounds: int,
    work: float,
    seed: int,
    root: Path,
    replicas: dict[str, int],
    gpus: int = 16,
    partition: float = 16.0,
    concurrency: int = 8,
    settle: float = 600.0,
    pause: tuple[float, float] = (1.0, 3.0),
) -> Report:
    rng = random.Random(seed)
    report = Report(jobs=jobs, replicas=dict(replicas), seed=seed)
    data_dir = root / "data"
    markers = root / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cluster = NatsCluster(root)
    nats_supervisor = Supervisor(cluster.children)
    database = await create_database()
    report.database = f"postgresql://127.0.0.1:5432/{database}"
    supervisors: list[Supervisor] = []
    nc: NATS | None = None
    api: Api | None = None
    stop_probe = asyncio.Event()
    probing: asyncio.Task[None] | None = None
    placements: list[tuple[float, int | None, str]] = []
    notifications = Notifications()
    counting: asyncio.Task[None] | None = None
    try:
        await cluster.start()
        await nats_supervisor.start()
        nc = await until_jetstream(cluster.url(), NATS_NODES)
        js = nc.jetstream(timeout=5.0)
        report.stream_replicas = (await js.stream_info(JOBS_STREAM)).config.num_replicas or 0
        await notifications.start()
        # The bucket was just made: its group may still be electing its first leader.
        await patiently(functools.partial(put_rules, js, ALERTING.format(url=notifications.url)))
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "portal-session.secret").write_text(uuid.uuid4().hex)

        async def on_scheduled(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                event = decode_event(msg.data)
                if isinstance(event, JobScheduled):
                    placements.append((time.monotonic(), event.epoch, event.job_id))

        await nc.subscribe("pai.job.*.job.scheduled", cb=on_scheduled)

        children, urls = service_children(replicas, cluster, data_dir, database, gpus)
        by_name = {child.name: child for child in children}
        # The first replica of rest and of the marketplace migrates the database alone; the
        # others start once it answers.
        second = [
            c for c in children if c.name.split("-")[0] in ("rest", "marketplace") and c.name[-2:] != "-0"
        ]
        first = [c for c in children if c not in second]
        supervisors.append(Supervisor(first))
        await supervisors[0].start()
        await until_answers(urls["rest"][0], "/api/v2/info")
        if urls.get("marketplace"):
            await until_answers(urls["marketplace"][0], "/marketplace/api/items")
        if second:
            supervisors.append(Supervisor(second))
            await supervisors[1].start()
            for url in urls["rest"][1:]:
                await until_answers(url, "/api/v2/info")

        for name, addresses in urls.items():
            for url in addresses:
                await until_answers(url, READY[name])
        api = Api(urls["rest"], report, rng)
        await api.login()
        probing = asyncio.create_task(api.probe(stop_probe))
        counting = asyncio.create_task(count_nodes(urls.get("monitor", []), report, stop_probe))
        leases = await js.key_value(LEASES.bucket)

        async def leader(service: str) -> str | None:
            """Who holds the service's lease (asked again while the bench's server is away)."""
            for _ in range(20):
                try:
                    entry = await leases.get(service)
                except KeyNotFoundError:
                    return None
                except Exception:
                    await asyncio.sleep(0.25)
                    continue
                return str(entry.value.decode()) if entry.value else None
            return None

        async def scheduler_epoch() -> int | None:
            with contextlib.suppress(Exception):
                return int((await leases.get("scheduler")).revision or 0) or None
            return None

        def pid_of(name: str) -> int | None:
            if name.startswith("nats-"):
                return cluster.children[int(name.split("-")[1])].pid
            return by_name[name].pid

        async def leader_lost(at: float, epoch: int | None, how: str) -> None:
            """Seconds from a scheduler leader's loss until a later epoch placed something: a
            probe job (no GPU, so there is always room for it) is submitted at once, so that the
            next placement does not wait for a GPU to come free."""
            assert api is not None
            entry: dict[str, Any] = {"how": how, "seconds": None}
            report.failovers.append(entry)
            probe = f"failover-probe-{len(report.failovers)}"
            if await api.submit(PROBE.format(name=probe)):
                probes.add(probe)
            deadline = at + 120
            while time.monotonic() < deadline:
                later = [t for t, e, _ in placements if t > at and (epoch is None or (e or 0) > epoch)]
                if later:
                    entry["seconds"] = round(min(later) - at, 2)
                    return
                await asyncio.sleep(0.1)

        accepted: set[str] = set()
        probes: set[str] = set()
        queue: asyncio.Queue[str] = asyncio.Queue()
        for i in range(jobs):
            queue.put_nowait(f"cluster-{i:05d}")
        first_submit = time.monotonic()

        async def submitter() -> None:
            assert api is not None
            while not queue.empty():
                name = queue.get_nowait()
                text = JOB.format(name=name, markers=markers, marker=MARKER, work=work)
                if await api.submit(text):
                    accepted.add(name)

        submitting = [asyncio.create_task(submitter()) for _ in range(concurrency)]
        watching: list[asyncio.Task[None]] = []

        leaders_taken: set[str] = set()
        swapped: dict[str, str] = {}
        for round_ in range(rounds):
            order = [child.name for child in cluster.children] + [child.name for child in children]
            if round_ == 0:
                order += ["partition", "pause-scheduler-leader"]
            rng.shuffle(order)
            for name in order:
                await asyncio.sleep(rng.uniform(*pause))  # seconds between one loss and the next
                if name == "partition":
                    node = rng.randrange(NATS_NODES)
                    pid = cluster.children[node].pid
                    if pid is None:
                        continue
                    at = time.monotonic()
                    os.kill(pid, signal.SIGSTOP)
                    await asyncio.sleep(partition)
                    os.kill(pid, signal.SIGCONT)
                    report.partitions.append(
                        {"node": f"nats-{node}", "how": "SIGSTOP", "seconds": round(time.monotonic() - at, 1)}
                    )
                    await until_caught_up(nc)
                    continue
                if name == "pause-scheduler-leader":
                    holder = await leader("scheduler")
                    pid = pid_of(holder) if holder in by_name else None
                    if holder is None or pid is None:
                        continue
                    epoch = await scheduler_epoch()
                    at = time.monotonic()
                    os.kill(pid, signal.SIGSTOP)
                    watching.append(asyncio.create_task(leader_lost(at, epoch, f"{holder} frozen")))
                    await asyncio.sleep(SCHEDULER_PAUSE)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                    report.killed.append(f"{holder} (frozen {SCHEDULER_PAUSE:g} s)")
                    await asyncio.gather(*watching)
                    continue
                name = swapped.pop(name, name)
                service = name.rsplit("-", 1)[0]
                if service in LEASED and service not in leaders_taken:
                    # The first replica of a leading service to go is its leader, whoever that is
                    # then (the other's turn comes at the leader's place in the order).
                    holder = await leader(LEASED[service])
                    if holder in by_name:
                        leaders_taken.add(service)
                        if holder != name:
                            swapped[holder] = name
                            name = holder
                pid = pid_of(name)
                if pid is None:
                    continue
                service, index = name.rsplit("-", 1)
                was_leader = service in LEASED and await leader(LEASED[service]) == name
                epoch = await scheduler_epoch() if was_leader and service == "scheduler" else None
                at = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                report.killed.append(name + (" (leader)" if was_leader else ""))
                # One replica of a service, and one NATS server, away at a time (what the
                # PodDisruptionBudgets allow): the next kill waits until this one is back.
                child = cluster.children[int(index)] if service == "nats" else by_name[name]
                while child.pid is None or child.pid == pid:  # noqa: ASYNC110 - a restart has no event
                    await asyncio.sleep(0.1)
                if service == "nats":
                    await until_caught_up(nc)
                elif service in urls:
                    await until_answers(urls[service][int(index)], READY[service])
                if was_leader and service == "scheduler":
                    await leader_lost(at, epoch, f"{name} killed")

        await asyncio.gather(*submitting)
        report.accepted = len(accepted)

        deadline = time.monotonic() + settle
        listed: list[dict[str, Any]] = []
        last_end = time.monotonic()
        while time.monotonic() < deadline:
            found = await api.jobs()
            if found is not None:
                listed = found
                if (
                    all(job["state"] in FINAL for job in listed)
                    and {j["name"] for j in listed} >= accepted | probes
                ):
                    last_end = time.monotonic()
                    break
            await asyncio.sleep(1.0)
        await asyncio.gather(*watching)
        states = {job["name"]: job["state"] for job in listed}
        succeeded = {name for name, state in states.items() if state == "SUCCEEDED" and name in accepted}
        # The last notifications follow the last ends by an evaluation or two (a new leader's
        # rebuild, if the alerter leader was lost at the end).
        deadline = time.monotonic() + 60
        while not succeeded <= notifications.succeeded and time.monotonic() < deadline:
            notifications.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(notifications.arrived.wait(), deadline - time.monotonic())
        report.alerts_notified = len(notifications.groups)
        report.alerts_twice = notifications.twice
        report.alerts_repeated = {
            "/".join(group): count for group, count in notifications.groups.items() if count > 1
        }
        report.alerts_missed = sorted(succeeded - notifications.succeeded)
        report.probes = len(probes)
        report.probes_final = sum(1 for name in probes if states.get(name) in FINAL)
        report.lost = sorted((accepted | probes) - states.keys())
        states = {name: state for name, state in states.items() if name not in probes}
        report.listed = len(states)
        report.stuck = sorted(name for name, state in states.items() if state not in FINAL)
        report.final = sum(1 for state in states.values() if state in FINAL)
        report.by_state = dict(collections.Counter(states.values()))
        report.jobs_per_s = report.final / max(0.001, last_end - first_submit)
        for job in listed:
            if job["state"] in ("FAILED", "STOPPED"):
                detail = await api.detail(job["username"], job["name"])
                report.unsuccessful[job["name"]] = why_ended(detail) if detail else "(no detail)"
        _, report.twice = count_markers(list(markers.iterdir()))
        fences = await js.key_value(FENCES_BUCKET)
        raw = None
        with contextlib.suppress(Exception):
            raw = (await fences.get(SCHEDULER_FENCE)).value
        report.double_allocations, report.fenced = double_allocations(await read_stream(nc), raw)
        report.seconds = time.monotonic() - started
        report.crashes = crashes_in(data_dir / "logs")
        return report
    finally:
        stop_probe.set()
        if probing is not None:
            await probing
        if counting is not None:
            await counting
        await notifications.close()
        if api is not None:
            await api.close()
        cluster.resume_all()  # a server or a leader still frozen would hold the stop up
        for supervisor in supervisors:
            for supervised in supervisor.children:
                if supervised.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(supervised.pid, signal.SIGCONT)
        await asyncio.gather(*(supervisor.stop() for supervisor in supervisors))
        for process in task_runtimes(data_dir):  # tasks outlive their orchestrator: end them too
            with contextlib.suppress(Exception):
                process.kill()
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
        await nats_supervisor.stop()
        await drop_database(database)


_FRAME = re.compile(r'^[\s|]*File "([^"]+)", line (\d+), in (\S+)')
_RAISED = re.compile(r"^[\s|]*([A-Za-z_][\w.]*(?:Error|Exception|Lost|Exit)\w*)(?::|$)")


def crashes_in(logs: Path) -> dict[str, list[str]]:
    """The errors services ended with, by the tracebacks in their logs (a service's own error
    ends it with its traceback on stderr, which its log holds): 'Type at path:line (function)',
    the platform's own file deepest in the traceback; of a chain (an error raised while handling
    another), the last."""
    found: dict[str, list[str]] = {}
    root = str(Path(__file__).resolve().parent.parent) + os.sep
    for path in sorted(logs.glob("*.log")):
        where = last = ""
        for line in [*path.read_text(errors="replace").splitlines(), "{}"]:
            if line.startswith("{"):  # a structured line: a traceback before it has ended
                if last:
                    found.setdefault(path.stem, []).append(last)
                where = last = ""
                continue
            frame = _FRAME.match(line)
            if frame is not None:
                file = frame.group(1)
                if file.startswith(root) and f"{os.sep}.venv{os.sep}" not in file:
                    where = f"{file[len(root) :]}:{frame.group(2)} ({frame.group(3)})"
                continue
            raised = _RAISED.match(line)
            if raised is not None and where and "ExceptionGroup" not in raised.group(1):
                last = f"{raised.group(1).rsplit('.', 1)[-1]} at {where}"
                where = ""
    return found


def parse_replicas(values: list[str]) -> dict[str, int]:
    replicas = dict(DEFAULT_REPLICAS)
    for value in values:
        name, _, count = value.partition("=")
        if name not in DEFAULT_REPLICAS or not count.isdigit():
            raise SystemExit(
                f"--replica {value!r}: NAME=COUNT with NAME one of {', '.join(DEFAULT_REPLICAS)}"
            )
        replicas[name] = int(count)
    if not replicas["rest"]:
        raise SystemExit("--replica rest=0: the bench talks to the platform through REST")
    return {name: count for name, count in replicas.items() if count}


def print_report(report: Report) -> None:
    print(f"jobs {report.jobs}: accepted {report.accepted}, listed {report.listed}, final {report.final}")
    print(f"states: {report.by_state}")
    print(
        f"lost {len(report.lost)}  stuck {len(report.stuck)}  twice {sum(report.twice.values())}  "
        f"double allocations {report.double_allocations}  fenced decisions {report.fenced}"
    )
    print(
        f"job notifications: {report.alerts_notified} groups, twice {report.alerts_twice}, "
        f"missed {len(report.alerts_missed)}; one node counted at most {report.node_count_max} "
        f"time(s) at once over the monitors ({report.node_scrapes} looks)"
    )
    print(f"nats: {NATS_NODES} servers, streams with {report.stream_replicas} replicas; {report.database}")
    print(f"replicas: {report.replicas}")
    print(f"killed ({len(report.killed)}): {', '.join(report.killed) or 'nothing'}")
    print(f"partitions: {report.partitions or 'none'}")
    print(f"scheduler failovers: {report.failovers or 'none'} (longest {report.failover_s} s)")
    print(f"API unavailable at most {report.api_unavailable_s:.2f} s")
    print(f"client errors: {dict(report.client_errors) or 'none'}")
    for name, errors in sorted(report.crashes.items()):
        print(f"crashed: {name}: {'; '.join(errors)}")
    for name, why in sorted(report.unsuccessful.items()):
        print(f"ended unsuccessfully: {name}: {why}")
    print(f"{report.jobs_per_s:.2f} jobs/s; wall time {report.seconds:.0f} s")
    print(
        "OK"
        if report.ok
        else "FAILED: every job final; lost, stuck, twice, double allocations and alerts twice or "
        "missed 0; no node counted twice"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs to submit (two one-GPU tasks each)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of killing every process once")
    parser.add_argument("--work", type=float, default=2.0, help="seconds of work per task")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill order and moments")
    parser.add_argument("--gpus", type=int, default=16, help="simulated GPUs of the machine")
    parser.add_argument("--partition", type=float, default=16.0, help="seconds one NATS server is frozen")
    parser.add_argument("--settle", type=float, default=600.0, help="seconds to wait for jobs to end")
    parser.add_argument(
        "--replica", action="append", default=[], metavar="NAME=N", help="replicas of a service (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="end with the report as one JSON line")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="run in DIR (made anew) and keep it")
    args = parser.parse_args()
    replicas = parse_replicas(args.replica)
    if args.keep is not None:
        args.keep.mkdir(parents=True)
    with (
        contextlib.nullcontext(str(args.keep))
        if args.keep
        else tempfile.TemporaryDirectory(prefix="pai-cluster-chaos-") as tmp
    ):
        report = asyncio.run(
            run(
                args.jobs,
                args.rounds,
                args.work,
                args.seed,
                Path(tmp),
                replicas,
                gpus=args.gpus,
                partition=args.partition,
                settle=args.settle,
            )
        )
    print_report(report)
    if args.json:
        print(json.dumps(report.as_dict()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
