"""Loading alerting configurations: the built-in file, durations, and errors that name the field."""

from __future__ import annotations

import pytest
import yaml

from libs.alerting.config import ConfigError, load_config
from libs.alerting.defaults import default_config
from libs.alerting.durations import parse_duration
from libs.alerting.expressions import ExpressionError, parse_condition
from tests.support.anchors import anchor, needs

ALERTING = ("openpai", "prometheus", "alerting")
ANCHORS = anchor(*ALERTING)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("2d", 172800.0), ("250ms", 0.25), (12, 12.0)],
    ids=["seconds", "minutes", "compound", "days", "milliseconds", "plain-number"],
)
def test_durations_read_like_prometheus(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5", "5 minutes", "m5", "-1s"])
def test_a_bad_duration_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_conditions_parse_metric_matchers_operator_and_threshold() -> None:
    condition = parse_condition('task_gpu_percent{job_id!="", role=~"w.*"} < 10')
    assert condition.metric == "task_gpu_percent"
    assert condition.holds({"job_id": "j1", "role": "worker"}, 3.0)
    assert not condition.holds({"job_id": "j1", "role": "ps"}, 3.0)
    assert not condition.holds({"job_id": "", "role": "worker"}, 3.0)
    assert not condition.holds({"job_id": "j1", "role": "worker"}, 10.0)


@pytest.mark.parametrize("bad", ["up", "up > ", "up{a=b} > 1", 'up{a="x" b="y"} > 1', 'up{a=~"("} > 1'])
def test_unreadable_conditions_explain_the_form(bad: str) -> None:
    with pytest.raises(ExpressionError):
        parse_condition(bad)


def test_the_built_in_configuration_loads_and_restates_openpai_alerts() -> None:
    config = default_config()
    names = {rule.alert for rule in config.rules}
    assert {"PaiJobPending", "NodeNotReady", "NvidiaSmiDoubleEccError", "PaiServiceDown"} <= names
    assert {"JobGpuUnderutilized", "JobStatusChanged", "NodeFilesystemUsage", "NodeMemoryUsage"} <= names


@needs(*ALERTING)
def test_built_in_rules_keep_openpai_durations_and_severities() -> None:
    upstream: dict[str, dict[str, object]] = {}
    for path in ANCHORS.glob("*.rules"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                upstream[rule["alert"]] = rule
    ours = {rule.alert: rule for rule in default_config().rules}
    for name in ("PaiJobPending", "NodeNotReady", "NvidiaSmiDoubleEccError", "NodeMemoryUsage"):
        theirs = upstream[name]
        assert ours[name].for_ == parse_duration(str(theirs["for"])), name
        assert ours[name].severity == theirs["labels"]["severity"], name  # type: ignore[index]


def test_every_problem_is_reported_with_its_path() -> None:
    text = """
rules:
  - alert: Broken
    expr: "cpu >"
    for: soon
route: {receiver: nobody}
receivers: [{name: ops, actions: [{action: tag_job}]}]
"""
    with pytest.raises(ConfigError) as caught:
        load_config(text)
    problems = "\n".join(caught.value.problems)
    assert "rules[0].expr" in problems
    assert "rules[0].for" in problems
    assert "receivers[0].actions[0]" in problems
    assert "tag" in problems


def test_a_route_to_an_unknown_receiver_is_refused() -> None:
    with pytest.raises(ConfigError, match="no receiver named 'nobody'"):
        load_config("route: {receiver: nobody}\nreceivers: [{name: ops}]\n")


def test_yaml_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ConfigError, match="mapping"):
        load_config("- a\n- b\n")
