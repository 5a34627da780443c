"""Whatever a task prints and however it exits, analysis returns a verdict and never raises."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.failures import (
    ContainerStatus,
    PodStatus,
    RuleSet,
    analyze,
    default_rules,
    load_rules,
    retry_decision,
)
from tests.support.anchors import anchor, needs

SPEC_PARTS = ("openpai", "exit-spec", "k8s-job-exit-spec.yaml")
RULE_SETS: dict[str, Callable[[], RuleSet]] = {
    "packaged": default_rules,
    "openpai-spec": lambda: load_rules(anchor(*SPEC_PARTS).read_text(encoding="utf-8")),
}


@functools.cache
def _rules(name: str) -> RuleSet:
    return RULE_SETS[name]()


exit_codes = st.none() | st.integers() | st.sampled_from([0, 1, 125, 126, 127, 128, 137, 139, 143, 255, -210])
logs = st.text(max_size=2000) | st.lists(
    st.sampled_from(["ImportError: x", "CUDA out of memory", "Segmentation fault", "", "\r", "x" * 1500]),
    max_size=20,
).map("\n".join)
pods = st.none() | st.builds(
    PodStatus,
    reason=st.sampled_from(["", "NodeLost", "Evicted", "OOMKilled"]) | st.text(max_size=30),
    message=logs,
    containers=st.lists(
        st.builds(
            ContainerStatus,
            name=st.text(max_size=10),
            reason=st.text(max_size=20),
            message=st.text(max_size=200),
            exit_code=st.none() | st.integers(-300, 300),
        ),
        max_size=3,
    ).map(tuple),
)


@pytest.mark.parametrize("rules_name", ["packaged", pytest.param("openpai-spec", marks=needs(*SPEC_PARTS))])
@settings(max_examples=300, deadline=None)
@given(
    exit_code=exit_codes,
    user_log=logs,
    platform_log=logs,
    stage=st.sampled_from(["container", "platform"]),
    pod=pods,
    ecc=st.booleans(),
)
def test_analyze_never_raises_and_always_decides(
    rules_name: str,
    exit_code: int | None,
    user_log: str,
    platform_log: str,
    stage: str,
    pod: PodStatus | None,
    ecc: bool,
) -> None:
    verdict = analyze(
        _rules(rules_name),
        exit_code=exit_code,
        user_log=user_log,
        platform_log=platform_log,
        stage="container" if stage == "container" else "platform",
        pod=pod,
        gpu_double_ecc_error=ecc,
    )
    assert verdict.exit_code == exit_code
    assert retry_decision(verdict) in ("retry_free", "retry_counted", "no_retry")
    if verdict.matched_line is not None:
        assert "\n" not in verdict.matched_line
