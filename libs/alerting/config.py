"""The alerting configuration: rules, routes, receivers and inhibitions, read from YAML.

One file holds what Prometheus and Alertmanager split in two (rules, then routing), because
operators change both together and the platform stores it as one value in KV. Field names
follow Alertmanager's (group_by, group_wait, repeat_interval, inhibit_rules, ...) so its users
read it without a manual. Loading reports every problem at once, each with its YAML path.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from libs.alerting.durations import parse_duration
from libs.alerting.expressions import Condition, ExpressionError, parse_condition
from libs.protocol.yamlsource import YamlTooLargeError, safe_load_bounded


class ConfigError(ValueError):
    """A refused configuration; `.problems` names each field and the fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("the alerting configuration is invalid:\n" + "\n".join(f"  - {p}" for p in problems))


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


Duration = float


def _duration(value: Any) -> float:
    if isinstance(value, str | int | float):
        return parse_duration(value)
    raise ValueError("write a duration such as 30s, 5m or 1h")


class Rule(_Model):
    alert: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    expr: str
    for_: Duration = Field(0.0, alias="for")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    _parse_for = field_validator("for_", mode="before")(_duration)

    @field_validator("expr")
    @classmethod
    def _check_expr(cls, value: str) -> str:
        try:
            parse_condition(value)
        except ExpressionError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def condition(self) -> Condition:
        return parse_condition(self.expr)

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "warn")


class Route(_Model):
    receiver: str | None = None
    match: dict[str, str] = Field(default_factory=dict)
    match_re: dict[str, str] = Field(default_factory=dict)
    group_by: tuple[str, ...] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    continue_: bool = Field(False, alias="continue")
    routes: tuple[Route, ...] = ()

    _parse_durations = field_validator("group_wait", "group_interval", "repeat_interval", mode="before")(
        lambda v: None if v is None else _duration(v)
    )


class EmailConfig(_Model):
    to: str
    sender: str = Field("pai-alerts@localhost", alias="from")
    smarthost: str = "127.0.0.1:25"
    subject: str | None = None
    text: str | None = None
    send_resolved: bool = False


class WebhookConfig(_Model):
    url: str = Field(pattern=r"^https?://")
    send_resolved: bool = True
    max_alerts: int = Field(0, ge=0)


class ActionConfig(_Model):
    action: Literal["stop_job", "tag_job", "cordon_node"]
    tag: str | None = None

    @model_validator(mode="after")
    def _tag_needs_value(self) -> ActionConfig:
        if self.action == "tag_job" and not self.tag:
            raise ValueError("action tag_job needs a 'tag' value, e.g. tag: low-gpu-utilisation")
        return self


class Receiver(_Model):
    name: str
    email_configs: tuple[EmailConfig, ...] = ()
    webhook_configs: tuple[WebhookConfig, ...] = ()
    actions: tuple[ActionConfig, ...] = ()


class InhibitRule(_Model):
    source_match: dict[str, str] = Field(default_factory=dict)
    target_match: dict[str, str] = Field(default_factory=dict)
    equal: tuple[str, ...] = ()


class Settings(_Model):
    evaluation_interval: Duration = 15.0
    # How long a job status change stays firing (so the list shows it) before it resolves.
    status_change_keep: Duration = 3600.0
    # Samples not refreshed within this time are dropped (a finished task, a silent node).
    sample_ttl: Duration = 120.0

    _parse = field_validator("evaluation_interval", "status_change_keep", "sample_ttl", mode="before")(
        _duration
    )


class AlertConfig(_Model):
    settings: Settings = Field(default_factory=Settings)
    rules: tuple[Rule, ...] = ()
    route: Route = Field(default_factory=lambda: Route(receiver="default"))
    receivers: tuple[Receiver, ...] = (Receiver(name="default"),)
    inhibit_rules: tuple[InhibitRule, ...] = ()

    @model_validator(mode="after")
    def _check_references(self) -> AlertConfig:
        names = [r.name for r in self.receivers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"receiver names must be unique; repeated: {', '.join(duplicates)}")
        if self.route.receiver is None:
            raise ValueError("route.receiver: the top route needs a receiver")
        _check_route(self.route, set(names), "route")
        return self


def _check_route(route: Route, receivers: set[str], path: str) -> None:
    if route.receiver is not None and route.receiver not in receivers:
        raise ValueError(
            f"{path}.receiver: no receiver named {route.receiver!r}; define it under receivers "
            f"(known: {', '.join(sorted(receivers)) or 'none'})"
        )
    for index, child in enumerate(route.routes):
        _check_route(child, receivers, f"{path}.routes[{index}]")


def _where(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = "for" if part == "for_" else "continue" if part == "continue_" else part
            path += f".{name}" if path else name
    return path or "file"


def load_config(text: str) -> AlertConfig:
    """Parse and validate a YAML configuration; ConfigError lists every problem with its path."""
    try:
        data = safe_load_bounded(text)  # deep nesting or an alias bomb is refused, not composed
    except YamlTooLargeError as exc:
        raise ConfigError([f"file: {exc}; write the configuration without deep nesting"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(["the file must be a mapping with rules, route, receivers and inhibit_rules"])
    try:
        return AlertConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{_where(tuple(error['loc']))}: {message}")
        raise ConfigError(problems) from None


def dump_config(config: AlertConfig) -> dict[str, Any]:
    return config.model_dump(by_alias=True, mode="json")
