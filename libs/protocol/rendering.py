"""What a validated job turns into: each task role's entrypoint, and the copy that is stored.

The entrypoint is built as OpenPAI's server builds it: the default deployment's preCommands,
the role's commands and the deployment's postCommands, each trimmed, one per line, then
`<% $parameters.x %>`, `<% $data.x %>`, `<% $output.x %>` and `<% $script.x %>` (with `[n]`
indexes) filled in. `<% $secrets.x %>` stays as written: secrets reach the task through the
runtime, never through the stored command. The stored copy replaces every secret with
"******" so logs, listings and job cloning never reveal one.
"""

from __future__ import annotations

import yaml

from libs.protocol.errors import JobProtocolError, Problem
from libs.protocol.jobs import JobConfig, job_json
from libs.protocol.jsvalues import js_trim
from libs.protocol.templating import TemplateError, render

MASK = "******"
_SECRETS_REFERENCE = "$secrets"


def role_commands(job: JobConfig, role: str) -> list[str]:
    """The role's commands wrapped in the default deployment's pre- and postCommands."""
    if role not in job.task_roles:
        raise KeyError(f"the job has no task role {role!r}; it has {sorted(job.task_roles)}")
    commands = list(job.task_roles[role].commands)
    deployment = job.deployment()
    if deployment is not None and role in deployment.task_roles:
        extra = deployment.task_roles[role]
        commands = [*(extra.pre_commands or []), *commands, *(extra.post_commands or [])]
    return commands


def template_view(job: JobConfig, role: str) -> dict[str, object]:
    """The names a role's commands may reference; `$secrets` is left out on purpose."""
    spec = job.task_roles[role]
    view: dict[str, object] = {}
    if job.parameters is not None:
        view["$parameters"] = job.parameters
    for key, kind, name in (
        ("$script", "script", spec.script),
        ("$output", "output", spec.output),
        ("$data", "data", spec.data),
    ):
        item = job.prerequisite(kind, name)
        if item is not None:
            view[key] = item.model_dump(mode="json", by_alias=True, exclude_none=True)
    return view


def render_entrypoint(job: JobConfig, role: str) -> str:
    """The shell script a task of `role` runs, rendered as OpenPAI renders it."""
    script = "\n".join(js_trim(command) for command in role_commands(job, role))
    try:
        return render(script, template_view(job, role))
    except TemplateError as exc:
        raise JobProtocolError(
            [
                Problem(
                    path=f"taskRoles.{role}.commands",
                    message=f"the commands are not a valid template: {exc}",
                    hint="write references as `<% $parameters.name %>`, each closed on the same line",
                )
            ]
        ) from None


def docker_auth(job: JobConfig, role: str) -> dict[str, str] | None:
    """Registry credentials for the role's image, with `<% $secrets.x %>` filled in, if any."""
    image = job.prerequisite("dockerimage", job.task_roles[role].docker_image)
    auth = getattr(image, "auth", None)
    if auth is None:
        return None
    view = {"$secrets": job.secrets or {}}
    fields = auth.model_dump(mode="json", exclude_none=True)
    return {key: render(str(value), view) for key, value in fields.items()}


def masked_job(job: JobConfig) -> JobConfig:
    """The stored copy of the job: every secret value, and any literal registry password, masked.

    This is what job.submitted carries and the read model keeps, so nothing downstream holds a
    secret."""
    config = job_json(job)
    if isinstance(config.get("secrets"), dict):
        config["secrets"] = dict.fromkeys(config["secrets"], MASK)
    for item in config.get("prerequisites", []):
        auth = item.get("auth")
        # A password written as a secret reference is safe to keep; a literal one is not.
        if isinstance(auth, dict) and "password" in auth and _SECRETS_REFERENCE not in str(auth["password"]):
            auth["password"] = MASK
    return JobConfig.model_validate(config)


def masked_config(job: JobConfig) -> dict[str, object]:
    """The stored copy of the job as protocol JSON (masked_job's, dumped)."""
    return job_json(masked_job(job))


def dump_job_yaml(job: JobConfig) -> str:
    """The job as protocol YAML (secrets included: mask with masked_config before storing)."""
    return yaml.safe_dump(job_json(job), sort_keys=False, allow_unicode=True)
