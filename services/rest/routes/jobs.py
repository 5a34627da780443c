"""Job routes of OpenPAI's REST API v2: submit, list, detail, attempts, config, stop.

Submitting never leaves a half-created job: the row is written first (the unique user+name
index answers 409 atomically), then the secrets go to KV and ``job.submitted`` is published;
if the bus does not confirm, the secrets and the row are removed and the caller gets 503 (507
when the bus, or the database before it, is out of space).
Reads come from the SQL read model the projection keeps.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import structlog
import yaml
from aiohttp import web
from sqlalchemy.exc import DBAPIError

from libs.backbone.space import database_full
from libs.protocol import JobConfig, JobProtocolError, gpu_enforcement, parse_job
from libs.protocol.advice import advise
from libs.protocol.events import JobStopRequested, JobStorage, JobSubmitted, JobTagged
from libs.protocol.jobs import stored_job_or_none
from libs.protocol.rendering import masked_job
from services.rest.adapters.auth import Principal, require_user
from services.rest.adapters.bus import PublishFailedError
from services.rest.adapters.jobs_store import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ORDER_FIELDS,
    DuplicateJobError,
    JobFilter,
    attempts_of,
    find_job,
    list_jobs,
    task_rows,
    tasks_of,
)
from services.rest.adapters.node_sizes import NODE_SIZES, require_vc_room
from services.rest.adapters.queue_places import queue_place
from services.rest.adapters.tagging import change_tag
from services.rest.adapters.vc_names import VC_NAMES
from services.rest.core import views
from services.rest.core.errors import (
    CONFLICT_JOB,
    INVALID_PROTOCOL,
    NO_JOB_ATTEMPT,
    NO_TAG,
    NO_TASK,
    NO_VIRTUAL_CLUSTER_FOR_JOB,
    NOT_IN_VIRTUAL_CLUSTER,
    NOT_JOB_EXECUTOR,
    NOT_TAG_ADDER,
    NOT_TAG_REMOVER,
    ApiError,
    invalid_parameters,
)
from services.rest.core.node_fit import oversized
from services.rest.core.plugins import unsupported_plugins
from services.rest.core.states import FINAL, epoch_ms, framework_name
from services.rest.core.storages import StorageRefusedError, job_storages, mount_path, node_path
from services.rest.core.totals import job_row_from_config
from services.rest.keys import DETAIL_CACHE, ENGINE, JOB_INSERTER, READ_ENGINE, SETTINGS
from services.rest.routes.availability import DATABASE, bus_refused, connected_bus, out_of_space
from services.rest.routes.bodies import read_json
from services.rest.routes.common import JOB_PATH, int_param, job_from_path, path_int, readable_job
from services.rest.routes.storages import usable_storages

log = structlog.get_logger(__name__)
routes = web.RouteTableDef()


async def require_existing_vc(request: web.Request, principal: Principal, name: str) -> None:
    """OpenPAI's 400 NoVirtualClusterError for a VC the scheduler does not have.

    Checked before the access check, so a mistyped name is reported as such rather than as a
    missing right. When the VCs cannot be learned the job is accepted: the scheduler then names
    the unknown VC in its pending reason (see services/rest/adapters/vc_names.py).
    """
    known = await request.app[VC_NAMES].names(name)
    if known is None or name in known:
        return
    hint = f"The virtual clusters are {', '.join(sorted(known))}. Set defaults.virtualCluster to one of them"
    if not principal.admin:
        mine = sorted(vc for vc in known if principal.may_use(vc))
        hint += f" that you may use ({', '.join(mine)})" if mine else " (ask an admin to grant you one)"
    raise NO_VIRTUAL_CLUSTER_FOR_JOB(
        hint + ".", vc=name, virtualClusters=sorted(known), path="defaults.virtualCluster"
    )


async def require_fitting_tasks(request: web.Request, job: JobConfig) -> None:
    """400 InvalidProtocolError, as for any other problem of the job, for a task larger than the
    largest node; accepted when the nodes are not known (see services/rest/adapters/node_sizes.py)."""
    nodes = await request.app[NODE_SIZES].sizes(lambda known: not oversized(job, known))
    problems = oversized(job, nodes or ())
    if problems:
        raise INVALID_PROTOCOL(
            "A task runs on one node: ask for what one node has, and submit again.",
            reason="; ".join(str(problem) for problem in problems),
            problems=[problem.model_dump() for problem in problems],
        )


async def storages_for(request: web.Request, job: JobConfig) -> tuple[JobStorage, ...]:
    """The granted storages the job's storage plugin may mount; 400 naming any it may not use."""
    entries = job.extras.runtime_plugins if job.extras is not None else None
    plugins = [(entry.plugin, dict(entry.parameters or {})) for entry in entries or []]
    if not plugins:
        return ()
    try:
        chosen = job_storages(plugins, await usable_storages(request))
    except StorageRefusedError as exc:
        usable = ", ".join(exc.usable) or "none"
        raise invalid_parameters(
            f"extras.com.microsoft.pai.runtimeplugin: you may not use storage {', '.join(exc.refused)}; "
            f"the storages you may use are: {usable}.",
            "Name a storage your groups grant (GET /api/v2/storages), or ask an admin to grant it.",
            path="extras.com.microsoft.pai.runtimeplugin",
        ) from None
    return tuple(
        JobStorage(
            name=storage.name,
            type=storage.type,
            path=node_path(storage),
            mount_path=mount_path(storage),
            default=storage.default,
            read_only=bool(storage.read_only),
        )
        for storage in chosen
    )


async def require_usable_vc(request: web.Request, principal: Principal, job: JobConfig) -> None:
    """The job's VC exists (400 NoVirtualClusterError) and the user may use it (403)."""
    await require_existing_vc(request, principal, job.virtual_cluster)
    if not principal.may_use(job.virtual_cluster):  # VC access granted by the user's groups
        raise NOT_IN_VIRTUAL_CLUSTER(
            "An admin grants virtual clusters through a group's acls.",
            user=principal.username,
            vc=job.virtual_cluster,
            path="defaults.virtualCluster",
        )


async def require_supported_plugins(request: web.Request, principal: Principal, job: JobConfig) -> None:
    """400 InvalidProtocolError for a runtime plugin the tasks' executor cannot give (core/plugins.py)."""
    problems = unsupported_plugins(job, request.app[SETTINGS].executor, principal.username)
    if problems:
        raise INVALID_PROTOCOL(
            "Each problem names its YAML path; fix them and submit again.",
            reason="; ".join(str(problem) for problem in problems),
            problems=[problem.model_dump() for problem in problems],
        )


async def require_new_name(request: web.Request, principal: Principal, job: JobConfig) -> None:
    """409 for a name the user already has (the insert itself decides for a real submission)."""
    if await find_job(request.app[ENGINE], principal.username, job.name) is not None:
        raise CONFLICT_JOB("Choose another name in the job config.", job=f"{principal.username}~{job.name}")


def parsed_job(request: web.Request, text: str) -> JobConfig:
    if not text.strip():
        raise invalid_parameters("The request body is empty; send the job YAML with Content-Type: text/yaml.")
    try:
        return parse_job(text, request.app[SETTINGS].job_limits())
    except JobProtocolError as exc:
        problems = [problem.model_dump() for problem in exc.problems]
        summary = "; ".join(str(problem) for problem in exc.problems)
        raise INVALID_PROTOCOL(
            "Each problem names its YAML path; fix them and submit again.", reason=summary, problems=problems
        ) from None


async def dry_run(request: web.Request, principal: Principal, job: JobConfig) -> web.Response:
    """`POST /api/v2/jobs?dryRun=true`: every check a submission makes after parsing, nothing stored
    or published. All refusals are gathered (a submission stops at the first); the answer is the
    first one's status and body, exactly as the submission would answer, with `refusals` listing
    each (code, message, hint, and the YAML path where one is known)."""
    refusals: list[ApiError] = []
    checks = (
        require_supported_plugins(request, principal, job),
        require_usable_vc(request, principal, job),
        require_fitting_tasks(request, job),
        require_vc_room(request, job),
        storages_for(request, job),
        require_new_name(request, principal, job),
    )
    for check in checks:
        try:
            await check
        except ApiError as exc:
            refusals.append(exc)
    if not refusals:
        return web.json_response(
            {
                "message": f"job {job.name} would be accepted",
                "dryRun": True,
                "name": job.name,
                "username": principal.username,
                "warnings": [warning.as_dict() for warning in advise(job)],
            }
        )
    first = refusals[0]
    listed = [{"status": exc.status, **exc.body()} for exc in refusals]
    return web.json_response({**first.body(), "refusals": listed}, status=first.status)


@routes.post("/v2/jobs")
async def submit_job(request: web.Request) -> web.Response:
    """Submit a job (YAML); with ?dryRun=true, only check it as a submission would, storing nothing."""
    principal = require_user(request)
    job = parsed_job(request, await request.text())
    if request.query.get("dryRun", "").lower() == "true":
        return await dry_run(request, principal, job)
    await require_supported_plugins(request, principal, job)
    await require_usable_vc(request, principal, job)
    await require_fitting_tasks(request, job)
    await require_vc_room(request, job)
    storages = await storages_for(request, job)
    bus = connected_bus(request, "Submitting a job")
    job_id = uuid.uuid4().hex
    event = JobSubmitted(
        job_id=job_id,
        user=principal.username,
        name=job.name,
        virtual_cluster=job.virtual_cluster,
        priority=job.priority or 0,
        config=masked_job(job),
        storages=storages,
    )
    row = job_row_from_config(event, epoch_ms(event.occurred_at))
    row.update(total_gpus=job.total_gpus, total_tasks=job.total_tasks, total_task_roles=job.total_task_roles)
    row["priority_class"] = job.priority_class
    inserter = request.app[JOB_INSERTER]
    try:
        await inserter.insert(row)
    except DuplicateJobError:
        raise CONFLICT_JOB(
            "Choose another name in the job config.", job=f"{principal.username}~{job.name}"
        ) from None
    except DBAPIError as exc:
        if (full := database_full(exc)) is None:
            raise
        log.warning("submission refused: the database is full", error=full)
        raise out_of_space("Submitting the job", DATABASE, full) from None
    try:
        if job.secrets:
            await bus.put_secrets(job_id, dict(job.secrets))
        await bus.publish(event)
    except PublishFailedError as exc:
        await bus.delete_secrets(job_id)
        withdrawn = await inserter.withdraw(job_id)
        log.warning(
            "submission not confirmed by the bus", job_id=job_id, error=str(exc), row_deleted=withdrawn
        )
        raise bus_refused(request, "Submitting the job", exc) from None
    return web.json_response(
        {
            "message": f"update job {job.name} successfully",
            "jobId": job_id,
            "name": job.name,
            "username": principal.username,
            "frameworkName": framework_name(principal.username, job.name),
            "warnings": [warning.as_dict() for warning in advise(job)],
        },
        status=202,
    )


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def job_filter(query: Any) -> JobFilter:
    """OpenPAI's list parameters, validated (400 with the parameter's name when wrong)."""
    order_field, descending = "submissionTime", True
    if query.get("order"):
        field, _, direction = str(query["order"]).partition(",")
        if field not in ORDER_FIELDS:
            raise invalid_parameters(f"order field {field!r} is not one of: {', '.join(ORDER_FIELDS)}.")
        direction = (direction or "DESC").upper()
        if direction not in ("ASC", "DESC"):
            raise invalid_parameters(f"order direction must be ASC or DESC, got {direction!r}.")
        order_field, descending = field, direction == "DESC"
    states = tuple(state.upper() for state in _csv(query.get("state")))
    known = {"WAITING", "RUNNING", "STOPPING", "STOPPED", "SUCCEEDED", "FAILED", "UNKNOWN"}
    if unknown := [state for state in states if state not in known]:
        raise invalid_parameters(f"state {unknown[0]!r} is not one of: {', '.join(sorted(known))}.")
    return JobFilter(
        usernames=_csv(query.get("username")),
        virtual_clusters=_csv(query.get("vc")),
        states=states,
        keyword=query.get("keyword") or None,
        tags_contain=_csv(query.get("tagsContain")),
        tags_not_contain=_csv(query.get("tagsNotContain")),
        priorities=_csv(query.get("jobPriority")),
        offset=int_param(query.get("offset"), "offset", default=0),
        limit=int_param(query.get("limit"), "limit", default=DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT),
        order_field=order_field,
        descending=descending,
        with_total_count=str(query.get("withTotalCount", "")).lower() == "true",
    )


@routes.get("/v2/jobs")
async def list_all_jobs(request: web.Request) -> web.Response:
    require_user(request)
    flt = job_filter(request.query)
    rows, total = await list_jobs(request.app[READ_ENGINE], flt)
    items = [views.job_summary(row) for row in rows]
    if flt.with_total_count:
        return web.json_response({"totalCount": total, "data": items})
    return web.json_response(items)


async def _attempts(request: web.Request, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's attempts, newest first; attempt 0 from the job row until its own row is projected."""
    return await attempts_of(request.app[READ_ENGINE], job["id"]) or [views.first_attempt(job)]


async def _detail(request: web.Request, attempt_id: int | None) -> web.Response:
    """The detail as a response; its `taskRoles` (most of a large job's) kept encoded per task
    and brought up to date from the task rows that changed (services/rest/core/detail_cache.py)."""
    job = await readable_job(request)
    engine = request.app[READ_ENGINE]
    attempts = await _attempts(request, job)
    if attempt_id is None:
        attempt_id = (
            job["attempt"] if job["attempt"] is not None else (attempts[0]["attempt"] if attempts else None)
        )
        chosen = next((a for a in attempts if a["attempt"] == attempt_id), None)
    else:
        chosen = next((a for a in attempts if a["attempt"] == attempt_id), None)
        if chosen is None:
            raise NO_JOB_ATTEMPT(attempt=attempt_id, job=f"{job['username']}~{job['name']}")
    cache = request.app[DETAIL_CACHE]
    table = cache.table(job["id"], attempt_id or 0)
    revision = job["tasks_revision"]
    if table.revision < revision:  # read the rows written since (all of them for a new table)
        after = table.revision
        rows = [] if attempt_id is None else await task_rows(engine, job["id"], attempt_id, after=after)
        table.apply(job, rows, revision)
    roles = table.pieces(job)
    cache.keep(job["id"], table)
    detail = views.job_detail_head(job, chosen)
    if detail["jobStatus"].get("state") == "WAITING" and (place := await queue_place(request, job["id"])):
        detail["jobStatus"]["queue"] = place  # e.g. 3 of 7 waiting in its VC, in the order of placement
    declared = request.app[SETTINGS].simulated_gpus
    if declared and job["total_gpus"]:
        # The platform's GPUs are declared by `pai up --gpus`, not hardware: say so plainly.
        detail["simulatedGpus"] = True
        detail["gpuNote"] = (
            f"The GPUs of this job were simulated (`pai up --gpus {declared}`): its tasks got "
            "CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES with their indices, but no GPU hardware."
        )
    config = stored_job_or_none(job["config"])
    if config is not None and config.gpu_shares:
        # Whether the shares this job holds are kept to on the device, as the platform states it.
        enforcement = gpu_enforcement.parse(request.app[SETTINGS].gpu_share_enforcement)
        detail["gpuShareEnforced"] = enforcement.enforced
        detail["gpuShareEnforcement"] = enforcement.reason
    head = json.dumps(detail).encode()
    body = b"".join((head[:-1], b", " if detail else b"", *roles, b"}"))
    return web.Response(body=body, content_type="application/json")


@routes.get(JOB_PATH)
async def get_job(request: web.Request) -> web.Response:
    return await _detail(request, None)


@routes.get(JOB_PATH + "/attempts/{attempt}")
async def get_job_attempt_detail(request: web.Request) -> web.Response:
    return await _detail(request, path_int(request, "attempt"))


@routes.get(JOB_PATH + "/config")
async def get_job_config(request: web.Request) -> web.Response:
    job = await readable_job(request, signed_in=True)
    text = yaml.safe_dump(job["config"] or {}, sort_keys=False, allow_unicode=True)
    return web.Response(text=text, content_type="text/yaml")


@routes.put(JOB_PATH + "/executionType")
async def set_execution_type(request: web.Request) -> web.Response:
    """Stop a job (STOP), or OpenPAI's START, which changes nothing (see below)."""
    principal = require_user(request)
    body = await read_json(request, '{"value": "STOP"}')
    value = body.get("value") if isinstance(body, dict) else None
    if value not in ("START", "STOP"):
        raise invalid_parameters(f'value must be "STOP" (or "START"), got {value!r}.')
    job = await job_from_path(request)
    if job["username"] != principal.username and not principal.admin:
        raise NOT_JOB_EXECUTOR(user=principal.username, job=f"{job['username']}~{job['name']}")
    # START follows OpenPAI's rest-server exactly (controllers/v2/job.js `execute`, then
    # models/v2/job/k8s.js `execute`): it merge-patches the framework's spec.executionType to
    # "Start" and answers 202 in every state, without looking at the state. A framework not yet
    # completed already runs with Start (the rest-server creates every framework so), and
    # FrameworkController never restarts a completed framework, so the patch changes nothing:
    # OpenPAI accepts START as a no-op. So do we: 202 whatever the state, no event, no new
    # attempt (a stopped or finished job is run again by submitting it under a new name).
    if value == "STOP" and job["state"] not in FINAL:
        # A fixed event id per job: repeated stop requests collapse into one on the bus.
        event_id = uuid.uuid5(uuid.NAMESPACE_URL, f"pai:stop:{job['id']}").hex
        event = JobStopRequested(job_id=job["id"], by=principal.username, event_id=event_id)
        try:
            await connected_bus(request, "Stopping a job").publish(event)
        except PublishFailedError as exc:
            raise bus_refused(request, "Stopping the job", exc) from None
    return web.json_response({"message": f"execute job {job['name']} successfully"}, status=202)


@routes.get(JOB_PATH + "/job-attempts")
async def get_job_attempts(request: web.Request) -> web.Response:
    job = await readable_job(request)
    engine = request.app[READ_ENGINE]
    attempts = await _attempts(request, job)
    result = []
    for index, attempt in enumerate(attempts):
        tasks = await tasks_of(engine, job["id"], attempt["attempt"])
        result.append(views.job_attempt(job, attempt, tasks, latest=index == 0))
    return web.json_response(result)


@routes.get(JOB_PATH + "/job-attempts/{attempt}")
async def get_job_attempt(request: web.Request) -> web.Response:
    job = await readable_job(request)
    engine = request.app[READ_ENGINE]
    wanted = path_int(request, "attempt")
    attempts = await _attempts(request, job)
    for index, attempt in enumerate(attempts):
        if attempt["attempt"] == wanted:
            tasks = await tasks_of(engine, job["id"], wanted)
            return web.json_response(views.job_attempt(job, attempt, tasks, latest=index == 0))
    raise NO_JOB_ATTEMPT(attempt=wanted, job=f"{job['username']}~{job['name']}")


@routes.get(JOB_PATH + "/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}/attempts")
async def get_task(request: web.Request) -> web.Response:
    job = await readable_job(request)
    attempt, role, index = (
        path_int(request, "attempt"),
        request.match_info["role"],
        path_int(request, "index"),
    )
    engine = request.app[READ_ENGINE]
    tasks = [
        task
        for task in await tasks_of(engine, job["id"], attempt)
        if task["role"] == role and task["task_index"] == index
    ]
    if not tasks and any(found["attempt"] == attempt for found in await _attempts(request, job)):
        # Not placed yet: the task shows WAITING, as the job detail shows it.
        waiting = views.waiting_task(job, attempt, role, index)
        tasks = [waiting] if waiting is not None else []
    if not tasks:
        raise NO_TASK(
            f"Attempt {attempt} of job {job['username']}~{job['name']} has no such task.",
            task=f"{role}[{index}]",
        )
    latest = tasks[-1]
    status = views.task_status(job, latest)
    keep = ("taskIndex", "taskUid", "taskState", "retries", "accountableRetries")
    return web.json_response(
        {
            **{key: status[key] for key in keep if key in status},
            "createdTime": tasks[0]["created_time"],
            "launchedTime": tasks[0]["launched_time"],
            "completedTime": latest["completed_time"],
            "username": job["username"],
            "jobName": job["name"],
            "jobAttemptId": attempt,
            "taskRoleName": role,
            "attempts": [views.task_attempt_status(job, task) for task in tasks],
        }
    )


# Tags: the job's owner or an admin adds and removes them (OpenPAI 2.2.1).
async def _tag_request(request: web.Request, *, add: bool) -> tuple[dict[str, Any], str]:
    principal = require_user(request)
    body = await read_json(request, '{"value": "my-tag"}')
    value = body.get("value") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise invalid_parameters('value must be a non-empty string, as in {"value": "my-tag"}.')
    job = await job_from_path(request)
    if job["username"] != principal.username and not principal.admin:
        refused = NOT_TAG_ADDER if add else NOT_TAG_REMOVER
        raise refused(user=principal.username, job=f"{job['username']}~{job['name']}")
    return job, value.strip()


async def _publish_tag(request: web.Request, job: dict[str, Any], tag: str, *, removed: bool) -> None:
    """The tag change as a fact first (the read model is rebuilt from facts), then in SQL."""
    event = JobTagged(job_id=job["id"], tag=tag, by=require_user(request).username, removed=removed)
    try:
        await connected_bus(request, "Changing a tag").publish(event)
    except PublishFailedError as exc:
        raise bus_refused(request, "Changing the tag", exc) from None


@routes.put(JOB_PATH + "/tag")
async def add_tag(request: web.Request) -> web.Response:
    """Add a tag to a job (its owner or an admin)."""
    job, tag = await _tag_request(request, add=True)
    limits = request.app[SETTINGS].job_limits()
    if len(tag) > limits.tag_length:
        raise invalid_parameters(
            f"value: the tag is {len(tag):,} characters long, more than the cluster's limit of "
            f"{limits.tag_length:,} (tagLength); use a shorter tag."
        )
    held = job.get("tags") or []
    if tag not in held and len(held) >= limits.tags_per_job:
        raise invalid_parameters(
            f"value: job {job['username']}~{job['name']} already has {len(held):,} tags, the cluster's limit "
            f"of tags per job (tagsPerJob); remove one first."
        )
    await _publish_tag(request, job, tag, removed=False)
    await change_tag(request.app[ENGINE], job["id"], tag, add=True)
    return web.json_response({"message": f"Add tag {tag} for job {job['name']} successfully."})


@routes.delete(JOB_PATH + "/tag")
async def delete_tag(request: web.Request) -> web.Response:
    """Remove a tag from a job (its owner or an admin)."""
    job, tag = await _tag_request(request, add=False)
    if tag not in (job.get("tags") or []):
        raise NO_TAG(tag=tag, job=f"{job['username']}~{job['name']}")
    await _publish_tag(request, job, tag, removed=True)
    await change_tag(request.app[ENGINE], job["id"], tag, add=False)
    return web.json_response({"message": f"Delete tag {tag} from job {job['name']} successfully."})
