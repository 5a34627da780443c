"""Failure rules in OpenPAI's exit-spec format: the models, and loading and dumping rule files.

A rule gives one exit code its meaning: a phrase, who issued and who caused it, whether a retry
can help (behavior, reaction), a reason and steps a user can follow, and the patterns that
recognise it. Patterns come in two kinds, as in OpenPAI:

- `runtimeContainerPatterns` are checked by the runtime inside a task when the user's command
  exits: its exit code, lines of the user's log and of the runtime's own log, the GPU's health;
- `controllerPodPatterns` are checked by the orchestrator on what the cluster reports about the
  task: a status reason and message, and per container a name, reason, message and exit code.

Within a pattern every given field must match; a rule matches when any of its patterns does; the
first matching rule in file order wins. Rule files are the spec document itself (a mapping with a
`spec:` list and an optional `version:`) or a bare list of rules; entries in the runtime's own
failure-pattern format (`containerExitCode` with `patterns`) are read as rules with no advice.
Every regex is checked for safety when loaded and compiled once, by the model that holds it.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from libs.failures.errors import RuleError, RuleProblem
from libs.failures.regexes import UnsafePattern, compile_safe
from libs.protocol.yamlsource import YamlTooLargeError, safe_load_bounded

Issuer = Literal[
    "USER_CONTAINER",
    "PAI_OS",
    "PAI_RUNTIME",
    "PAI_DOCKER",
    "PAI_K8S",
    "PAI_FC",
    "PAI_DB_CONTROLLER",
    "UNKNOWN",
]
Causer = Literal[
    "USER_SUBMISSION",
    "USER_CONTAINER",
    "USER_STOP",
    "USER_SCALEDOWN",
    "USER_RETRY",
    "USER_UPGRADE",
    "USER_UNKNOWN",
    "RESOURCE_ALLOCATION_TIMEOUT",
    "PAI_OS",
    "PAI_DOCKER",
    "PAI_RUNTIME",
    "PAI_K8S",
    "PAI_FC",
    "PAI_HW",
    "PAI_UNKNOWN",
    "UNKNOWN",
]
FailureType = Literal[
    "USER_SUCCESS",
    "USER_STOP",
    "USER_FAILURE",
    "PLATFORM_FAILURE",
    "RESOURCE_ALLOCATION_TIMEOUT",
    "UNKNOWN_FAILURE",
]
Stage = Literal["SUBMITTING", "ALLOCATING", "LAUNCHING", "RUNNING", "COMPLETING", "UNKNOWN"]
Behavior = Literal["TRANSIENT", "TRANSIENT_CONFLICT", "PERMANENT", "UNKNOWN"]
Reaction = Literal["ALWAYS_RETRY", "ALWAYS_BACKOFF_RETRY", "RETRY_TO_MAX", "NEVER_RETRY"]

MIN_CODE = -8000
MAX_CODE = 256


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return None if pattern is None else compile_safe(pattern)


def _checked(pattern: str | None) -> str | None:
    if pattern is not None:
        try:
            compile_safe(pattern)
        except UnsafePattern as exc:
            raise ValueError(str(exc)) from None
    return pattern


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class GpuInfoPattern(_Model):
    nvidia_double_ecc_error: bool | None = Field(None, alias="nvidiaDoubleEccError")


class ContainerPattern(_Model):
    """What the runtime sees when the user's command exits; every given field must match."""

    exit_code: int | None = Field(None, alias="exitCode")
    user_log_regex: str | None = Field(None, alias="userLogRegex")
    platform_log_regex: str | None = Field(None, alias="platformLogRegex")
    gpu_info: GpuInfoPattern | None = Field(None, alias="gpuInfo")

    _user_re: re.Pattern[str] | None = PrivateAttr(None)
    _platform_re: re.Pattern[str] | None = PrivateAttr(None)

    _check = field_validator("user_log_regex", "platform_log_regex")(_checked)

    def model_post_init(self, context: Any, /) -> None:
        self._user_re = _compile(self.user_log_regex)
        self._platform_re = _compile(self.platform_log_regex)

    @property
    def user_re(self) -> re.Pattern[str] | None:
        return self._user_re

    @property
    def platform_re(self) -> re.Pattern[str] | None:
        return self._platform_re


class PodContainerPattern(_Model):
    """One container of a task as the cluster reports it; it must match some container."""

    name_regex: str | None = Field(None, alias="nameRegex")
    reason_regex: str | None = Field(None, alias="reasonRegex")
    message_regex: str | None = Field(None, alias="messageRegex")
    exit_code: int | None = Field(None, alias="exitCode")

    _res: tuple[re.Pattern[str] | None, ...] = PrivateAttr(())

    _check = field_validator("name_regex", "reason_regex", "message_regex")(_checked)

    def model_post_init(self, context: Any, /) -> None:
        self._res = tuple(_compile(p) for p in (self.name_regex, self.reason_regex, self.message_regex))

    @property
    def compiled(self) -> tuple[re.Pattern[str] | None, ...]:
        """The name, reason and message regexes, compiled."""
        return self._res


class PodPattern(_Model):
    """What the cluster reports about a task: its status reason and message, and its containers."""

    reason_regex: str | None = Field(None, alias="reasonRegex")
    message_regex: str | None = Field(None, alias="messageRegex")
    containers: tuple[PodContainerPattern, ...] = ()

    _res: tuple[re.Pattern[str] | None, ...] = PrivateAttr(())

    _check = field_validator("reason_regex", "message_regex")(_checked)

    def model_post_init(self, context: Any, /) -> None:
        self._res = (_compile(self.reason_regex), _compile(self.message_regex))

    @property
    def compiled(self) -> tuple[re.Pattern[str] | None, ...]:
        """The reason and message regexes, compiled."""
        return self._res


class RulePattern(_Model):
    runtime_container_patterns: tuple[ContainerPattern, ...] = Field((), alias="runtimeContainerPatterns")
    controller_pod_patterns: tuple[PodPattern, ...] = Field((), alias="controllerPodPatterns")


class FailureRule(_Model):
    """One exit code and what it means, in OpenPAI's exit-spec fields."""

    code: int = Field(ge=MIN_CODE, le=MAX_CODE)
    phrase: str = Field(min_length=1, pattern=r"^\S+$")
    issuer: Issuer | None = None
    causer: Causer | None = None
    type: FailureType | None = None
    stage: Stage | None = None
    behavior: Behavior | None = None
    reaction: Reaction | None = None
    reason: str | None = None
    repro: tuple[str, ...] = ()
    solution: tuple[str, ...] = ()
    pattern: RulePattern | None = None


class RuleSet(_Model):
    """An ordered list of rules (first match wins) with the version of the file they came from."""

    version: str = "1"
    rules: tuple[FailureRule, ...]

    _by_code: dict[int, FailureRule] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        problems = _duplicate_problems(self.rules)
        if problems:
            raise RuleError(problems)
        self._by_code = {rule.code: rule for rule in self.rules}

    def by_code(self, code: int) -> FailureRule | None:
        return self._by_code.get(code)


def _duplicate_problems(
    rules: tuple[FailureRule, ...], indexes: list[int] | None = None
) -> list[RuleProblem]:
    problems: list[RuleProblem] = []
    codes: dict[int, int] = {}
    phrases: dict[str, int] = {}
    for position, rule in enumerate(rules):
        index = position if indexes is None else indexes[position]
        if rule.code in codes:
            problems.append(
                RuleProblem(
                    index=index,
                    code=rule.code,
                    field="code",
                    message="the code is used twice",
                    hint=f"rule #{codes[rule.code]} already has it; codes must be unique",
                )
            )
        if rule.phrase in phrases:
            problems.append(
                RuleProblem(
                    index=index,
                    code=rule.code,
                    field="phrase",
                    message=f"the phrase {rule.phrase!r} is used twice",
                    hint=f"rule #{phrases[rule.phrase]} already has it; phrases must be unique",
                )
            )
        codes.setdefault(rule.code, index)
        phrases.setdefault(rule.phrase, index)
    return problems


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


_HINTS = {
    "missing": "add it",
    "extra_forbidden": "remove it or correct its spelling",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "bool_parsing": "write true or false",
    "string_type": "write text, quoted if it starts with a special character",
    "greater_than_equal": f"codes range from {MIN_CODE} to {MAX_CODE}",
    "less_than_equal": f"codes range from {MIN_CODE} to {MAX_CODE}",
    "string_pattern_mismatch": "write one word without spaces, e.g. CudaOutOfMemory",
    "string_too_short": "write one word, e.g. CudaOutOfMemory",
    "model_type": "write a mapping of field: value",
}


def _known_fields() -> list[str]:
    models: list[type[BaseModel]] = [
        FailureRule,
        RulePattern,
        ContainerPattern,
        PodPattern,
        PodContainerPattern,
        GpuInfoPattern,
    ]
    return sorted({info.alias or name for model in models for name, info in model.model_fields.items()})


def _hint(error_type: str, loc: tuple[int | str, ...]) -> str:
    if error_type == "extra_forbidden" and loc and isinstance(loc[-1], str):
        close = difflib.get_close_matches(loc[-1], _known_fields(), n=1)
        if close:
            return f"did you mean '{close[0]}'? Otherwise remove it"
    return _HINTS.get(error_type, "")


def _problems_of(index: int, raw: object, exc: ValidationError) -> list[RuleProblem]:
    code = raw.get("code") if isinstance(raw, dict) else None
    problems = []
    for err in exc.errors(include_url=False):
        message = str(err["msg"]).removeprefix("Value error, ")
        problems.append(
            RuleProblem(
                index=index,
                code=code if isinstance(code, int) else None,
                field=_field_path(tuple(err["loc"])),
                message=message,
                hint=_hint(err["type"], tuple(err["loc"])),
            )
        )
    return problems


def _from_runtime_format(raw: dict[str, Any]) -> dict[str, Any]:
    """An entry of the runtime's failure-pattern file as an exit-spec rule of the same meaning."""
    converted = {k: v for k, v in raw.items() if k not in ("containerExitCode", "patterns")}
    code = raw["containerExitCode"]
    converted["code"] = code
    converted.setdefault("phrase", f"RuntimeFailurePattern{code}")
    converted["pattern"] = {"runtimeContainerPatterns": raw.get("patterns") or []}
    return converted


def _validate_entry(index: int, raw: object) -> FailureRule | list[RuleProblem]:
    runtime_format = isinstance(raw, dict) and "containerExitCode" in raw and "code" not in raw
    entry = _from_runtime_format(raw) if runtime_format and isinstance(raw, dict) else raw
    try:
        return FailureRule.model_validate(entry)
    except ValidationError as exc:
        problems = _problems_of(index, entry, exc)
        if not runtime_format:
            return problems
        # Name fields as the author wrote them, not as they were translated.
        renames = (("pattern.runtimeContainerPatterns", "patterns"), ("code", "containerExitCode"))
        fixed = []
        for problem in problems:
            field = problem.field
            for ours, theirs in renames:
                if field.startswith(ours):
                    field = theirs + field[len(ours) :]
                    break
            fixed.append(problem.model_copy(update={"field": field}))
        return fixed


def load_rules(text: str) -> RuleSet:
    """Read a rule file; raise RuleError listing every problem (rule index, code, field) if bad."""
    try:
        document = safe_load_bounded(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        too_large = isinstance(exc, YamlTooLargeError)
        raise RuleError(
            [
                RuleProblem(
                    index=None,
                    code=None,
                    field="",
                    message=str(exc) if too_large else f"not valid YAML{where}",
                    hint="write the rules as a flat list, without deep nesting or repeated aliases"
                    if too_large
                    else "check the indentation and quoting near that place",
                )
            ]
        ) from None
    version: object = "1"
    if isinstance(document, dict):
        version = document.get("version", "1")
        entries = document.get("spec")
    else:
        entries = document
    if not isinstance(entries, list):
        raise RuleError(
            [
                RuleProblem(
                    index=None,
                    code=None,
                    field="spec",
                    message="no list of rules found",
                    hint="write the rules as a list under 'spec:', or as a top-level list",
                )
            ]
        )
    rules: list[FailureRule] = []
    indexes: list[int] = []
    problems: list[RuleProblem] = []
    for index, raw in enumerate(entries):
        result = _validate_entry(index, raw)
        if isinstance(result, FailureRule):
            rules.append(result)
            indexes.append(index)
        else:
            problems.extend(result)
    problems.extend(_duplicate_problems(tuple(rules), indexes))
    if problems:
        raise RuleError(sorted(problems, key=lambda p: -1 if p.index is None else p.index))
    return RuleSet(version=str(version), rules=tuple(rules))


def dump_rules(rules: RuleSet) -> str:
    """Write a rule set in the exit-spec layout; `load_rules` reads the result back unchanged."""
    document = {
        "version": rules.version,
        "spec": [rule.model_dump(mode="json", by_alias=True, exclude_defaults=True) for rule in rules.rules],
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
