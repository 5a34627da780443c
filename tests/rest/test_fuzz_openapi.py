"""Schemathesis fuzzes every operation of our OpenAPI document: no server error, no secret leaked.

The document is read from the running service (``GET /api/v2/openapi.json``), so whatever
route the service serves is fuzzed, new ones included. Each operation is called as three
callers (anonymous, a user, an admin, the last two with tokens from a login) with data
Schemathesis generates from the document: valid (positive), invalid (negative), and valid
with path parameters naming things that exist (the user's job with its secrets, its task,
a group, a virtual cluster), so handlers are reached past their "not found" answers.

Every operation with a body is also sent bytes that are not UTF-8 and a body over the size
limit: each must be refused as 400 or 413 in OpenPAI's JSON error shape. Every answer must be
below 500 and must not contain a secret: the job's secret values, the
callers' passwords, a password hash, the token signing key. The platform around the service
is real where the routes ask it something (a scheduler over NATS), or a small responder
standing in for the alerter, the monitor's history and the orchestrator's log reader.

Generation is bounded (``EXAMPLES`` per operation and caller) and reproducible: each
operation and caller has its own fixed seed, so data differs between operations and a
failure repeats on the next run. Writes that would take the callers' own accounts or the
built-in groups away are not sent, since every later call would then prove nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok

from libs.backbone.connecting import Bus, connect
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.subjects import (
    ALERT_RULES_RPC,
    ALERTS_RPC,
    METRICS_HISTORY_RPC,
    RECENT_ALERTS_RPC,
    VC_STATUS_RPC,
)
from services.rest.adapters.accounts import ADMIN_GROUP, DEFAULT_GROUP
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.rest.serving import ServerThread
from tests.services.vc_support import GPU_NODES, ask, cluster_file, scheduler
from tests.support.waiting import eventually

EXAMPLES = 5  # per operation and caller, for each of the three generation modes below
CALLERS = ("anonymous", "user", "admin")
USER, USER_PASSWORD = "fuzz-user", "fuzz-user-password-77"
VICTIM = "fuzz-victim"  # a user the admin may delete, regroup or rename at will
JOB = "secret-job"
JOB_SECRET = "fuzz-job-secret-4242"
# Accounts and groups the callers stand on: a write aimed at them is not sent.
PROTECTED = {"admin", USER, ADMIN_GROUP, DEFAULT_GROUP}
LOGS_RPC = "pai.rpc.orchestrator.logs"


@dataclass
class World:
    """The running service, its callers' headers, and the values that must never be answered."""

    server: ServerThread
    session: requests.Session
    headers: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)  # operations the server answered at least once

    def login(self, caller: str) -> None:
        username, password = ("admin", ADMIN_PASSWORD) if caller == "admin" else (USER, USER_PASSWORD)
        response = self.session.post(
            f"{self.server.url}/api/v2/authn/basic/login", data={"username": username, "password": password}
        )
        assert response.status_code == 200, response.text
        self.headers[caller] = {"Authorization": f"Bearer {response.json()['token']}"}

    def still_signed_in(self, caller: str) -> None:
        """A logout or a revoke among the generated calls ends a session: log in again."""
        if caller == "anonymous":
            return
        me = self.session.get(f"{self.server.url}/api/v2/users/me", headers=self.headers[caller])
        if me.status_code == 401:
            self.login(caller)
            me = self.session.get(f"{self.server.url}/api/v2/users/me", headers=self.headers[caller])
        assert me.status_code == 200, me.text
        assert me.json()["admin"] is (caller == "admin"), me.text


@pytest.fixture
def rest_settings(rest_settings: RestSettings) -> RestSettings:
    """The service as configured for every test, without rate limits: the fuzz is one busy client."""
    limits = [
        name for name in RestSettings.model_fields if re.fullmatch(r"rate_limit_\w+_per_(min|hour)", name)
    ]
    return rest_settings.model_copy(update=dict.fromkeys(limits, 0))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _harms_the_callers(case: schemathesis.Case[Any]) -> bool:
    if case.method == "GET" or not case.path.startswith(("/api/v2/users", "/api/v2/groups")):
        return False
    if case.path.startswith("/api/v2/users/me"):
        return False  # the caller's own profile: changing the password needs the old one
    names = [
        *_strings(case.path_parameters or {}),
        *_strings(case.body if isinstance(case.body, dict) else {}),
    ]
    return any(name in PROTECTED for name in names)


def _known(path: str) -> dict[str, Any]:
    """Path parameters naming things that exist, so handlers get past their lookups."""
    owner = USER if path.startswith("/api/v2/jobs/") else VICTIM
    known = {"user": owner, "job": JOB, "attempt": 0, "role": "worker", "index": 0, "task_attempt": 0}
    known.update(group=DEFAULT_GROUP, vc="a")
    return {name: value for name, value in known.items() if "{" + name + "}" in path}


SECRET_PREFIX = "fuzz-secret-"
# Jobs the protocol accepts, with secrets of their own: how generated submissions get past parsing.
VALID_JOBS = st.builds(
    lambda name, secrets, instances, gpu, command: {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "defaults": {"virtualCluster": "a"},
        "secrets": {key: SECRET_PREFIX + value for key, value in secrets.items()},
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11"}],
        "taskRoles": {
            "worker": {
                "instances": instances,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": gpu},
                "commands": [command],
            }
        },
    },
    st.from_regex(r"\Afuzzed[a-zA-Z0-9_-]{1,20}\Z"),
    st.dictionaries(
        st.from_regex(r"\A[a-z][a-z0-9_]{0,8}\Z"), st.from_regex(r"\A[a-zA-Z0-9]{8,16}\Z"), max_size=3
    ),
    st.integers(1, 3),
    st.integers(0, 2),
    st.text(min_size=1, max_size=40),
)


def _fuzz(world: World, operation: Any, caller: str) -> str | None:
    """Run one operation as one caller; the first problem found, or None."""
    strategies = [
        operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE),
    ]
    known = _known(operation.path)
    if known:
        strategies.append(operation.as_strategy(path_parameters=known))
    if operation.label == "POST /api/v2/jobs":
        strategies.append(
            VALID_JOBS.flatmap(lambda job: operation.as_strategy(body=job, media_type="text/yaml"))
        )
    problems: list[str] = []

    @settings(
        max_examples=EXAMPLES * len(strategies),
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the failing call is reported as is
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @seed(zlib.crc32(f"{operation.label} as {caller}".encode()))
    @given(case=st.one_of(strategies))
    def call(case: schemathesis.Case[Any]) -> None:
        if problems or _harms_the_callers(case):
            return
        headers = world.headers.get(caller, {})
        try:
            response = case.call(
                base_url=world.server.url, session=world.session, headers=headers, timeout=20
            )
        except requests.exceptions.InvalidHeader:
            return  # a header value no HTTP client sends (a negative case); nothing reached the server
        curl = case.as_curl_command(headers=headers)
        try:
            case.validate_response(response, checks=[not_a_server_error], headers=headers)
        except (AssertionError, FailureGroup):
            body = response.content.decode("utf-8", "replace")[:200]
            problems.append(f"{caller}: answer {response.status_code} {body}\n  {curl}")
            return
        world.reached.add(operation.label)
        answer = response.content.decode("utf-8", "replace") + json.dumps(dict(response.headers))
        leaked = [secret for secret in world.secrets if secret in answer]
        submitted = case.body.get("secrets") if isinstance(case.body, dict) else None
        if response.status_code == 202 and isinstance(submitted, dict):
            world.secrets.extend(str(value) for value in submitted.values())  # now the job's secrets
        if leaked:
            problems.append(f"{caller}: answer {response.status_code} contains {leaked}\n  {curl}")

    call()
    world.still_signed_in(caller)
    return problems[0] if problems else None


@contextlib.asynccontextmanager
async def _platform(server: ServerThread, tmp_path: Path) -> AsyncIterator[None]:
    """A scheduler with GPU nodes, and responders for alerts and task logs (on the server's loop)."""
    bus: Bus = await connect(server.settings.nats_url, name="fuzz-platform", initial_timeout=10.0)
    await ensure_topology(bus.js)
    for node in GPU_NODES:
        await publish_event(bus.js, node)

    async def alerter(msg: Msg) -> None:
        await msg.respond(b"[]")

    async def rules(msg: Msg) -> None:
        await msg.respond(b'{"source": "built-in", "rules": [], "settings": {}}')

    async def monitor(msg: Msg) -> None:
        rows = "tasks" if json.loads(msg.data).get("job_id") else "nodes"
        await msg.respond(json.dumps({"step": 60, "keep": 21600, "now": 0, rows: []}).encode())

    async def log_reader(msg: Msg) -> None:
        query = json.loads(msg.data)
        await msg.respond(json.dumps({"content": "hello\n", "offset": query["offset"], "size": 6}).encode())

    subscriptions = [
        await bus.nc.subscribe(ALERTS_RPC, cb=alerter),
        await bus.nc.subscribe(RECENT_ALERTS_RPC, cb=alerter),
        await bus.nc.subscribe(ALERT_RULES_RPC, cb=rules),
        await bus.nc.subscribe(METRICS_HISTORY_RPC, cb=monitor),
        await bus.nc.subscribe(LOGS_RPC, cb=log_reader),
    ]
    try:
        async with scheduler(server.settings.nats_url, cluster_file(tmp_path)):
            await ask(bus, VC_STATUS_RPC)  # answers once the scheduler has replayed the streams
            yield
    finally:
        for subscription in subscriptions:
            await subscription.unsubscribe()
        await bus.close()


def _prepare(world: World) -> None:
    url = world.server.url
    world.login("admin")
    for name, password in ((USER, USER_PASSWORD), (VICTIM, "fuzz-victim-password")):
        created = world.session.post(
            f"{url}/api/v2/users",
            json={"username": name, "password": password, "virtualCluster": ["a"]},
            headers=world.headers["admin"],
        )
        assert created.status_code == 201, created.text
    world.login("user")
    submitted = world.session.post(
        f"{url}/api/v2/jobs",
        data=job_yaml(JOB, instances=1, secret=JOB_SECRET) + "defaults:\n  virtualCluster: a\n",
        headers={**world.headers["user"], "Content-Type": "text/yaml"},
    )
    assert submitted.status_code == 202, submitted.text

    async def placed() -> int:
        async with httpx.AsyncClient(base_url=url, headers=world.headers["user"]) as client:
            task = f"/api/v2/jobs/{USER}~{JOB}/attempts/0/taskRoles/worker/taskIndex/0/attempts"
            return (await client.get(task)).status_code

    world.server.run(eventually(placed, lambda status: status == 200))  # the scheduler placed it
    signing_key = world.server.settings.resolved_jwt_secret_file().read_text().strip()
    world.secrets = [JOB_SECRET, ADMIN_PASSWORD, USER_PASSWORD, "$argon2", signing_key]


def _filled(path: str) -> str:
    """The path with its parameters naming things that exist (or "x" where nothing is known)."""
    known = _known(path)
    return re.sub(r"\{(\w+)\}", lambda match: str(known.get(match[1], "x")), path)


def _hostile_bodies(world: World, document: dict[str, Any]) -> list[str]:
    """Bytes that are not UTF-8, and a body over the size limit, to every operation with a body.

    Schemathesis only generates bodies its schemas describe, which are always valid text of a
    sane size; these are what a broken client or an attacker sends. Each must be refused in
    OpenPAI's JSON error shape: 400 naming the byte offset, 413 naming the limit.
    """
    limit = world.server.settings.limit_body_bytes
    bodies = {
        "not UTF-8": (b"\xff\xfe\x00bad \xc3\x28", 400),
        "oversize": (b"#" * (limit + 1), 413),
    }
    problems: list[str] = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if "requestBody" not in operation:
                continue
            url = world.server.url + _filled(path)
            for caller in ("anonymous", "admin"):
                for kind, (body, expected) in bodies.items():
                    response = world.session.request(
                        method.upper(),
                        url,
                        data=body,
                        headers={**world.headers.get(caller, {}), "Content-Type": "text/yaml"},
                    )
                    answer = response.json() if "json" in response.headers.get("content-type", "") else {}
                    if response.status_code != expected or not {"code", "message"} <= set(answer):
                        text = response.content.decode("utf-8", "replace")[:200]
                        problems.append(
                            f"{method.upper()} {path} as {caller}, {kind}: {response.status_code} {text}"
                        )
    return problems


# Hypothesis warns when the global `random` state moves while a case is drawn, taking it for a
# strategy that uses `random`. Here the server under test runs in a thread of this process and its
# libraries (asyncpg choosing a host, aiohttp's connector, nats-py) use the global generator at any
# moment, so the warning would fire at random; the strategies themselves draw only from Hypothesis.
@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)
# The work is fixed (EXAMPLES per operation and caller, a fixed seed): about a minute alone on
# two cores, several times that beside other CPU-bound work, so the limit is set for the latter.
@pytest.mark.timeout(600)
def test_fuzzing_every_documented_operation_finds_no_server_error_and_no_secret(
    server: ServerThread, tmp_path: Path
) -> None:
    platform = contextlib.AsyncExitStack()
    server.run(platform.enter_async_context(_platform(server, tmp_path)))
    try:
        with requests.Session() as session:
            world = World(server, session)
            _prepare(world)
            raw = session.get(f"{server.url}/api/v2/openapi.json").json()
            schema = schemathesis.openapi.from_dict(raw)
            operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
            assert len(operations) == sum(len(item) for item in raw["paths"].values())
            problems = [
                f"{operation.label}: {problem}"
                for operation in operations
                for caller in CALLERS
                if (problem := _fuzz(world, operation, caller)) is not None
            ]
            problems += _hostile_bodies(world, raw)
            assert not problems, "\n\n".join(problems)
            assert world.reached == {operation.label for operation in operations}
    finally:
        server.run(platform.aclose())
