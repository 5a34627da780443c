"""The alerting configuration as an operator writes it: each refused field named with its path
and whole message, the defaults of what is left out, and the file read back as written."""

from __future__ import annotations

import pytest

from libs.alerting.config import ConfigError, Rule, dump_config, load_config
from libs.alerting.expressions import Condition, Matcher

CONDITION_FORM = 'write metric{label="value"} OP number, e.g. task_gpu_percent{job_id!=""} < 10'


def refusal(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    return caught.value.problems


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rules: [{alert: A, expr: 'm >'}]", f"rules[0].expr: cannot read condition 'm >'; {CONDITION_FORM}"),
        (
            "rules: [{alert: A, expr: 'm > 1', for: [1]}]",
            "rules[0].for: write a duration such as 30s, 5m or 1h",
        ),
        (
            "rules: [{alert: A, expr: 'm > 1'}, {alert: B, expr: 'm > 1', for: 5x}]",
            "rules[1].for: '5x' is not a duration; write e.g. 30s, 5m, 1h30m or 2d",
        ),
        (
            "route: {receiver: default, group_wait: soon}",
            "route.group_wait: 'soon' is not a duration; write e.g. 30s, 5m, 1h30m or 2d",
        ),
        (
            "route: {receiver: default, repeat_interval: {a: 1}}",
            "route.repeat_interval: write a duration such as 30s, 5m or 1h",
        ),
        (
            "route: {receiver: default, routes: [{receiver: default}, {receiver: nobody}]}",
            "file: route.routes[1].receiver: no receiver named 'nobody'; define it under receivers "
            "(known: default)",
        ),
        (
            "route: {receiver: default, routes: [{routes: [{receiver: x}]}]}",
            "file: route.routes[0].routes[0].receiver: no receiver named 'x'; define it under receivers "
            "(known: default)",
        ),
        (
            "route: {receiver: nobody}\nreceivers: [{name: b}, {name: a}]",
            "file: route.receiver: no receiver named 'nobody'; define it under receivers (known: a, b)",
        ),
        ("route: {}", "file: route.receiver: the top route needs a receiver"),
        (
            "receivers: []\nroute: {receiver: x}",
            "file: route.receiver: no receiver named 'x'; define it under receivers (known: none)",
        ),
        (
            "receivers: [{name: b}, {name: a}, {name: a}, {name: b}, {name: c}]\nroute: {receiver: a}",
            "file: receiver names must be unique; repeated: a, b",
        ),
        (
            "receivers: [{name: default, actions: [{action: tag_job}]}]",
            "receivers[0].actions[0]: action tag_job needs a 'tag' value, e.g. tag: low-gpu-utilisation",
        ),
        (
            "receivers: [{name: default, actions: [{action: tag_job, tag: ''}]}]",
            "receivers[0].actions[0]: action tag_job needs a 'tag' value, e.g. tag: low-gpu-utilisation",
        ),
        (
            "settings: {evaluation_interval: never}",
            "settings.evaluation_interval: 'never' is not a duration; write e.g. 30s, 5m, 1h30m or 2d",
        ),
        ("settings: {sample_ttl: -1}", "settings.sample_ttl: a duration cannot be negative"),
        (
            "settings: {status_change_keep: ''}",
            "settings.status_change_keep: a duration cannot be empty; write e.g. 30s, 5m or 1h",
        ),
        (
            "route: {receiver: default, continue: maybe}",
            "route.continue: Input should be a valid boolean, unable to interpret input",
        ),
        ("bogus: 1", "bogus: Extra inputs are not permitted"),
    ],
)
def test_a_refused_field_is_named_with_its_path_and_the_fix(text: str, problem: str) -> None:
    assert refusal(text) == (problem,)


def test_every_problem_of_the_file_is_told_at_once() -> None:
    problems = refusal("rules: [{alert: A, expr: 'x', for: 1y}]\nsettings: {sample_ttl: y}")
    assert [problem.split(":")[0] for problem in problems] == [
        "settings.sample_ttl",
        "rules[0].expr",
        "rules[0].for",
    ]
    error = ConfigError(["a: one", "b: two"])
    assert str(error) == "the alerting configuration is invalid:\n  - a: one\n  - b: two"


@pytest.mark.parametrize("text", ["[1, 2]", "just text", "42"])
def test_a_file_that_is_not_a_mapping_says_what_it_holds(text: str) -> None:
    assert refusal(text) == ("the file must be a mapping with rules, route, receivers and inhibit_rules",)


def test_a_file_that_is_not_yaml_says_so() -> None:
    (problem,) = refusal("a: [")
    assert problem.startswith("not valid YAML: while parsing a flow node")


def test_an_empty_file_is_the_default_configuration() -> None:
    assert dump_config(load_config("")) == {
        "settings": {"evaluation_interval": 15.0, "status_change_keep": 3600.0, "sample_ttl": 120.0},
        "rules": [],
        "route": {
            "receiver": "default",
            "match": {},
            "match_re": {},
            "group_by": None,
            "group_wait": None,
            "group_interval": None,
            "repeat_interval": None,
            "continue": False,
            "routes": [],
        },
        "receivers": [{"name": "default", "email_configs": [], "webhook_configs": [], "actions": []}],
        "inhibit_rules": [],
    }
    assert load_config("# nothing but a comment\n") == load_config("")


def test_a_whole_configuration_is_read_as_written() -> None:
    config = load_config(
        """
settings: {evaluation_interval: 1m, status_change_keep: 2h, sample_ttl: 30}
rules:
  - alert: GpuIdle
    expr: 'task_gpu_percent{job_id!=""} < 10'
    for: 1h30m
    labels: {severity: critical}
    annotations: {summary: idle}
  - alert: NodeDown
    expr: node_up == 0
route:
  receiver: ops
  group_by: [alertname]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - {receiver: mail, match: {severity: critical}, match_re: {job_id: 'j.*'}, continue: true}
receivers:
  - name: ops
    webhook_configs: [{url: 'https://hooks.example/x', send_resolved: false, max_alerts: 5}]
    actions: [{action: tag_job, tag: idle}, {action: stop_job}]
  - name: mail
    email_configs: [{to: ops@example.com, from: pai@example.com, smarthost: 'mail:25', send_resolved: true}]
inhibit_rules:
  - {source_match: {severity: critical}, target_match: {severity: warn}, equal: [job_id]}
"""
    )
    assert (
        config.settings.evaluation_interval,
        config.settings.status_change_keep,
        config.settings.sample_ttl,
    ) == (
        60.0,
        7200.0,
        30.0,
    )
    idle, down = config.rules
    assert (idle.alert, idle.for_, idle.severity, idle.annotations) == (
        "GpuIdle",
        5400.0,
        "critical",
        {"summary": "idle"},
    )
    assert idle.condition == Condition("task_gpu_percent", (Matcher("job_id", "!=", ""),), "<", 10.0)
    assert (down.for_, down.severity, down.labels) == (0.0, "warn", {})
    route = config.route
    assert (
        route.receiver,
        route.group_by,
        route.group_wait,
        route.group_interval,
        route.repeat_interval,
    ) == (
        "ops",
        ("alertname",),
        30.0,
        300.0,
        14400.0,
    )
    (child,) = route.routes
    assert (child.receiver, child.match, child.match_re, child.continue_) == (
        "mail",
        {"severity": "critical"},
        {"job_id": "j.*"},
        True,
    )
    ops, mail = config.receivers
    (hook,) = ops.webhook_configs
    assert (hook.url, hook.send_resolved, hook.max_alerts) == ("https://hooks.example/x", False, 5)
    assert [(a.action, a.tag) for a in ops.actions] == [("tag_job", "idle"), ("stop_job", None)]
    (email,) = mail.email_configs
    assert (email.to, email.sender, email.smarthost, email.subject, email.send_resolved) == (
        "ops@example.com",
        "pai@example.com",
        "mail:25",
        None,
        True,
    )
    (inhibit,) = config.inhibit_rules
    assert (inhibit.source_match, inhibit.target_match, inhibit.equal) == (
        {"severity": "critical"},
        {"severity": "warn"},
        ("job_id",),
    )
    assert dump_config(config)["rules"][0]["for"] == 5400.0
    assert dump_config(config)["route"]["routes"][0]["continue"] is True


def test_defaults_of_receivers_left_short() -> None:
    config = load_config(
        "receivers: [{name: default, email_configs: [{to: a@b}], webhook_configs: [{url: 'http://h'}]}]"
    )
    (email,) = config.receivers[0].email_configs
    assert (email.sender, email.smarthost, email.send_resolved, email.text) == (
        "pai-alerts@localhost",
        "127.0.0.1:25",
        False,
        None,
    )
    (hook,) = config.receivers[0].webhook_configs
    assert (hook.send_resolved, hook.max_alerts) == (True, 0)


def test_a_rules_severity_is_warn_unless_it_says() -> None:
    assert Rule(alert="A", expr="m > 1").severity == "warn"
    assert Rule(alert="A", expr="m > 1", labels={"severity": "info"}).severity == "info"
