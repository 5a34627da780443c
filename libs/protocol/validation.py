"""Turning job YAML into a JobConfig, or into every problem it has, each with a path and a fix.

Structure and types are checked by the pydantic models in jobs.py; this module translates their
errors into words a user can act on, adds the checks that span fields (references between
task roles, prerequisites and deployments; duplicates; template syntax) exactly where OpenPAI
makes them, and points each problem at its YAML line. Nothing a user sends escapes as any
exception other than JobProtocolError.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from libs.protocol import jobs
from libs.protocol.errors import JobProtocolError, Problem, format_path
from libs.protocol.gpu_share import share_problems
from libs.protocol.jobs import JobConfig, Null
from libs.protocol.limits import DEFAULT_LIMITS, JobLimits, limit_problems, too_little_memory
from libs.protocol.templating import TemplateError, parse_template
from libs.protocol.yamlsource import Path, Source, load_yaml

PREREQUISITE_FIELDS = {"dockerImage": "dockerimage", "data": "data", "output": "output", "script": "script"}

_REQUIRED_HINTS = {
    "protocolVersion": "add `protocolVersion: 2`",
    "name": "add a name made of letters, digits, '_' and '-'",
    "type": "add `type: job` (or the prerequisite's type: dockerimage, script, output or data)",
    "taskRoles": "add `taskRoles:` with at least one task role",
    "dockerImage": "name the dockerimage prerequisite this task role runs in",
    "resourcePerInstance": "add `resourcePerInstance:` with cpu, memoryMB and gpu",
    "commands": "add `commands:` with the shell commands to run",
    "cpu": "add the number of CPU cores each instance needs",
    "memoryMB": "add the memory each instance needs, in MB",
    "gpu": "add the number of GPUs each instance needs (0 for none)",
    "uri": "add the uri: an image such as `ubuntu:22.04` for a dockerimage, a list of URLs for data",
    "plugin": "name the runtime plugin, for example `ssh`",
}


def _known_fields() -> set[str]:
    names: set[str] = set()
    for model in vars(jobs).values():
        if isinstance(model, type) and issubclass(model, BaseModel):
            for name, info in model.model_fields.items():
                names.add(info.alias or name)
    return names


_KNOWN_FIELDS = _known_fields()


# What a whole-number field counts, and an example, for its message ("must be a whole number of
# GPUs, e.g. 1"). The one place for this wording: a protocol extension that accepts other values
# for a field (fractions of a GPU) changes its entry here.
WHOLE_NUMBERS: dict[str, tuple[str, str]] = {
    "gpu": ("GPUs", "1"),
    "cpu": ("CPUs", "1"),
    "memoryMB": ("megabytes", "1024"),
    "instances": ("instances", "1"),
}


def whole_number_problem(field: str, value: object) -> tuple[str, str]:
    """The message and hint for a field that wants a whole number and got `value`."""
    counts, example = WHOLE_NUMBERS.get(field, ("", "1"))
    wanted = f"a whole number of {counts}, e.g. {example}" if counts else f"a whole number, e.g. {example}"
    if isinstance(value, float) and not isinstance(value, bool):
        return f"must be {wanted}, not {value:g}", f"write a whole number such as {example}"
    return f"must be {wanted}, not {describe(value)}", f"write a number such as {example}, without quotes"


def describe(value: object) -> str:
    """Name a YAML value's kind in a user's words."""
    if value is None or isinstance(value, Null):
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _has_child(current: object, element: int | str) -> bool:
    if isinstance(current, dict):
        return isinstance(element, str) and element in current
    return isinstance(current, list) and isinstance(element, int) and 0 <= element < len(current)


def _data_path(loc: tuple[int | str, ...], data: object) -> tuple[Path, bool]:
    """Map a pydantic location onto the user's data, skipping union tags; flag key errors."""
    parts: list[str | int] = []
    current: object = data
    is_key = False
    for index, element in enumerate(loc):
        if element == "[key]":
            is_key = True
        elif _has_child(current, element):
            parts.append(element)
            current = current[element]  # type: ignore[index]
        elif index == len(loc) - 1 or loc[index + 1] == "[key]":
            parts.append(element)
    return tuple(parts), is_key


def _explain(error: ErrorDetails, is_key: bool, field: str) -> tuple[str, str]:
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "is required", _REQUIRED_HINTS.get(field, f"add `{field}`")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(field, sorted(_KNOWN_FIELDS), n=1)
        hint = f"did you mean `{close[0]}`?" if close else "remove it; the protocol has no such field here"
        return "is not a field of the job protocol here", hint
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == jobs.ROLE_PATTERN:
            what = "task role and port names" if is_key else "this name"
            return (
                f"{value!r} is not a valid name",
                f"{what} must start with an ASCII letter (a-z, A-Z) or '_' and hold only ASCII "
                "letters, digits and '_'",
            )
        return f"{value!r} is not a valid name", "use only ASCII letters (a-z, A-Z), digits, '_' and '-'"
    if isinstance(value, Null) or kind == "null_value":
        return "must not be null", "give a value or remove the line"
    if kind in ("string_type", "string_sub_type"):
        return (
            f"must be text, not {describe(value)}",
            "write text; quote it if it starts with {, [, * or &, or looks like a number",
        )
    if kind == "js_integer":
        return whole_number_problem(field, value)
    if kind == "text_or_number":
        return f"must be text or a number, not {describe(value)}", "write for example `1.0` or `latest`"
    if kind == "bool_type":
        return f"must be true or false, not {describe(value)}", "write true or false"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys to values, not {describe(value)}", "write `key: value` lines"
    if kind == "list_type":
        return f"must be a list, not {describe(value)}", "write one `- item` line per entry"
    if kind == "greater_than_equal" and field == "memoryMB":
        return too_little_memory(value)  # the floor of every task's memory, said once (limits.py)
    if kind == "greater_than_equal":
        bound = ctx.get("ge")
        hint = (
            "use -1 to disable this rule, or a count of at least 1" if bound == -1 else f"use {bound} or more"
        )
        return f"must be at least {bound}, not {value}", hint
    if kind == "too_short":
        return "must not be empty", "add at least one entry or remove the field"
    if kind == "string_too_long":
        return "is too long", f"use at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return "must not be empty", "give a name of at least one character"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, not {value!r}", f"use one of {ctx.get('expected')}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return (
            f"has an unknown or missing type {ctx.get('tag', '')!r}".replace(" ''", ""),
            "set `type` to dockerimage, script, output or data",
        )
    return error["msg"], "see the OpenPAI job protocol for this field"


def _schema_problems(exc: ValidationError, source: Source) -> Iterator[tuple[Path, str, str]]:
    for error in exc.errors(include_url=False):
        path, is_key = _data_path(error["loc"], source.data)
        field = str(path[-1]) if path else ""
        message, hint = _explain(error, is_key, field)
        yield path, message, hint


# Docker's reference grammar: [host[:port]/]path[:tag][@digest], path components in lower case.
_IMAGE_REFERENCE = re.compile(
    r"^(?:(?P<host>[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)
IMAGE_HINT = (
    "write the image as name[:tag] or name@sha256:digest, e.g. `ubuntu:22.04` or `ghcr.io/org/app:1.0`"
)


def image_reference_problem(uri: str) -> str | None:
    """Why a docker image reference is not one an engine accepts; None when it is."""
    if len(uri) > 255 + 128 + 80:
        return "is too long to be a docker image reference"
    if any(c.isspace() for c in uri):
        return f"{uri!r} is not a docker image reference: it contains white space"
    if _IMAGE_REFERENCE.match(uri) is None:
        return f"{uri!r} is not a valid docker image reference"
    return None


def _template(text: str) -> bool:
    """A value still to be rendered (``<% $parameters.x %>``): checked once it has a value."""
    return "<%" in text


def _items(value: object) -> list[tuple[int, Mapping[str, Any]]]:
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _cross_field_problems(data: Mapping[str, Any]) -> Iterator[tuple[Path, str, str]]:
    """The checks OpenPAI makes after its schema, run on raw data so they report alongside it."""
    seen: dict[tuple[object, object], int] = {}
    names: dict[str, set[str]] = {}
    for i, item in _items(data.get("prerequisites")):
        kind, name = item.get("type"), item.get("name")
        if not isinstance(kind, str) or kind not in PREREQUISITE_FIELDS.values() or not isinstance(name, str):
            continue
        key = (kind, name)
        if key in seen:
            yield (
                ("prerequisites", i, "name"),
                f"duplicate {kind} prerequisite {name!r}, first defined at prerequisites[{seen[key]}]",
                "give each prerequisite of a type its own name, or remove the copy",
            )
        seen.setdefault(key, i)
        names.setdefault(kind, set()).add(name)
        uri = item.get("uri")
        if kind == "dockerimage" and isinstance(uri, str) and uri and not _template(uri):
            problem = image_reference_problem(uri)
            if problem is not None:
                yield ("prerequisites", i, "uri"), problem, IMAGE_HINT
    all_names = set().union(*names.values()) if names else set()

    deployments: dict[str, int] = {}
    for i, item in _items(data.get("deployments")):
        name = item.get("name")
        if isinstance(name, str) and name in deployments:
            yield (
                ("deployments", i, "name"),
                f"duplicate deployment {name!r}, first defined at deployments[{deployments[name]}]",
                "give each deployment its own name",
            )
        elif isinstance(name, str):
            deployments[name] = i

    roles = _mapping(data.get("taskRoles"))
    for role, spec in roles.items():
        spec = _mapping(spec)
        for j, wanted in enumerate(spec.get("prerequisites") or []):
            if isinstance(wanted, str) and wanted not in all_names:
                yield (
                    ("taskRoles", role, "prerequisites", j),
                    f"prerequisite {wanted!r} does not exist",
                    _suggest(wanted, all_names, "add it to the job's prerequisites list"),
                )
        for field, kind in PREREQUISITE_FIELDS.items():
            wanted = spec.get(field)
            if isinstance(wanted, str) and wanted not in names.get(kind, set()):
                other = [k for k, v in names.items() if wanted in v]
                hint = (
                    f"{wanted!r} is a {other[0]} prerequisite; {field} needs one of type {kind}"
                    if other
                    else _suggest(wanted, names.get(kind, set()), f"add a prerequisite with type: {kind}")
                )
                yield ("taskRoles", role, field), f"prerequisite {wanted!r} does not exist", hint

    default_deployment = _mapping(data.get("defaults")).get("deployment")
    if isinstance(default_deployment, str) and default_deployment not in deployments:
        yield (
            ("defaults", "deployment"),
            f"default deployment {default_deployment!r} does not exist",
            _suggest(default_deployment, set(deployments), "add it under deployments or remove this line"),
        )

    hived_roles = _mapping(_mapping(_mapping(data.get("extras")).get("hivedScheduler")).get("taskRoles"))
    for role in hived_roles:
        if role not in roles:
            yield (
                ("extras", "hivedScheduler", "taskRoles", role),
                f"task role {role!r} does not exist",
                _suggest(role, set(roles), "name one of the job's task roles"),
            )

    yield from _template_problems(data, roles, deployments)
    yield from share_problems(data)


def _template_problems(
    data: Mapping[str, Any], roles: Mapping[str, Any], deployments: Mapping[str, int]
) -> Iterator[tuple[Path, str, str]]:
    chosen = _mapping(data.get("defaults")).get("deployment")
    deployment: Mapping[str, Any] = {}
    if isinstance(chosen, str) and chosen in deployments:
        deployment = _mapping(_mapping(data["deployments"][deployments[chosen]]).get("taskRoles"))
    for role, spec in roles.items():
        extra = _mapping(deployment.get(role))
        parts = [extra.get("preCommands"), _mapping(spec).get("commands"), extra.get("postCommands")]
        commands = [c for part in parts if isinstance(part, list) for c in part if isinstance(c, str)]
        try:
            parse_template("\n".join(commands))
        except TemplateError as exc:
            yield (
                ("taskRoles", role, "commands"),
                f"the commands are not a valid template: {exc}",
                "write references as `<% $parameters.name %>`, each closed on the same line",
            )


def _suggest(wanted: str, choices: set[str], fallback: str) -> str:
    close = difflib.get_close_matches(wanted, sorted(choices), n=1)
    return f"did you mean {close[0]!r}?" if close else fallback


def _problem(source: Source, path: Path, message: str, hint: str) -> Problem:
    line = source.line_of(path)
    suffix = f" (line {line})" if line is not None else ""
    return Problem(path=format_path(path), message=f"{message}{suffix}", hint=hint)


def _position(source: Source, order: dict[Path, int], path: Path) -> tuple[int, int, int]:
    """Sort key: YAML line, then place in the document, then parents before children."""
    probe = path
    while probe and probe not in order:
        probe = probe[:-1]
    return source.line_of(path) or 0, order.get(probe, 0), len(path)


def validate_source(source: Source, limits: JobLimits = DEFAULT_LIMITS) -> JobConfig:
    """Validate loaded YAML; raise JobProtocolError listing every problem in YAML order."""
    data = source.data
    if not isinstance(data, dict):
        raise JobProtocolError(
            [
                Problem(
                    path="",
                    message=(
                        "the document is empty (nothing but blanks or comments)"
                        if data is None
                        else f"a job must be a YAML mapping, not {describe(data)}"
                    ),
                    hint="start with `protocolVersion: 2`, `name:`, `type: job` and `taskRoles:`",
                )
            ]
        )
    found: list[tuple[Path, str, str]] = []
    job: JobConfig | None = None
    try:
        job = JobConfig.model_validate(data)
    except ValidationError as exc:
        found.extend(_schema_problems(exc, source))
    except (RecursionError, ValueError, TypeError) as exc:
        found.append(((), f"the job could not be read: {exc}", "simplify the YAML"))
    found.extend(_cross_field_problems(data))
    found.extend(limit_problems(data, limits))
    if found or job is None:
        order = {known: i for i, known in enumerate(source.lines)}
        found.sort(key=lambda item: _position(source, order, item[0]))
        raise JobProtocolError(_problem(source, *item) for item in found)
    return job


def parse_job(text: str, limits: JobLimits = DEFAULT_LIMITS) -> JobConfig:
    """Parse and validate job YAML within `limits`; the result has OpenPAI's defaults filled in."""
    if not isinstance(text, str):
        raise JobProtocolError(
            [Problem(path="", message="the job must be YAML text", hint="send the YAML as text")]
        )
    try:
        return validate_source(load_yaml(text), limits)
    except JobProtocolError:
        raise
    except RecursionError:
        raise JobProtocolError(
            [Problem(path="", message="the job is nested too deeply", hint="flatten the YAML")]
        ) from None
