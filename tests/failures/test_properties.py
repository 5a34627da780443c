"""Whatever a task prints and however it exits, analysis returns a verdict and never raises."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.failures import ContainerStatus, PodStatus, analyze, default_rules, load_rules, retry_decision

SPEC = Path(__file__).resolve().parents[2] / ".." / "shared" / "anchors" / "openpai" / "exit-spec"
RULE_SETS = [default_rules(), load_rules((SPEC / "k8s-job-exit-spec.yaml").read_text(encoding="utf-8"))]

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


@settings(max_examples=300, deadline=None)
@given(
    rules_index=st.sampled_from([0, 1]),
    exit_code=exit_codes,
    user_log=logs,
    platform_log=logs,
    stage=st.sampled_from(["container", "platform"]),
    pod=pods,
    ecc=st.booleans(),
)
def test_analyze_never_raises_and_always_decides(
    rules_index: int,
    exit_code: int | None,
    user_log: str,
    platform_log: str,
    stage: str,
    pod: PodStatus | None,
    ecc: bool,
) -> None:
    verdict = analyze(
        RULE_SETS[rules_index],
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
