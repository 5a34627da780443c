"""The platform's own rules classify the failures users meet most, with the line that proves it."""

from __future__ import annotations

import pytest

from libs.failures import (
    STOPPED_BY_USER_CODE,
    ContainerStatus,
    FailureVerdict,
    PodStatus,
    RuleSet,
    analyze,
    check_rules,
    default_rules,
    load_rules,
    retry_decision,
    retry_kind,
)

SYNTAX_ERROR_LOG = """\
Traceback (most recent call last):
  File "/code/train.py", line 12
    for epoch in range(10)
                          ^
SyntaxError: expected ':'
"""


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return default_rules()


def test_a_python_syntax_error_is_a_permanent_user_failure_showing_its_line(rules: RuleSet) -> None:
    verdict = analyze(rules, exit_code=1, user_log=SYNTAX_ERROR_LOG)
    assert verdict.phrase == "PythonSyntaxError"
    assert (verdict.type, verdict.category, verdict.causer) == ("permanent", "USER_FAILURE", "USER_CONTAINER")
    assert verdict.matched_line == "SyntaxError: expected ':'"
    assert retry_decision(verdict) == "no_retry"
    assert retry_kind(verdict) == "user"


def test_sigkill_is_retried_without_counting(rules: RuleSet) -> None:
    verdict = analyze(rules, exit_code=137, user_log="epoch 3/10\n")
    assert (verdict.code, verdict.type) == (137, "transient")
    assert retry_decision(verdict) == "retry_free"
    assert retry_kind(verdict) == "platform"


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "THCudaCheck FAIL file=THCGeneral.cpp line=50 error=2 : cuda runtime error (2) : out of memory",
    ],
    ids=["pytorch", "pytorch-2", "cublas", "legacy-thc"],
)
def test_gpu_out_of_memory_is_recognised_with_its_line(rules: RuleSet, line: str) -> None:
    log = f"step 100 loss 0.5\n{line}\nwandb: finishing run\n"
    verdict = analyze(rules, exit_code=1, user_log=log)
    assert (verdict.phrase, verdict.type) == ("GpuOutOfMemory", "permanent")
    assert verdict.matched_line == line


CONTAINER_CASES = {
    "module-not-found": (1, "ModuleNotFoundError: No module named 'apex'", "", "PythonImportError"),
    "import-error": (1, "ImportError: cannot import name 'x' from 'y'", "", "PythonImportError"),
    "host-oom-python": (1, "MemoryError", "", "HostOutOfMemory"),
    "host-oom-kernel": (
        137,
        "",
        "Memory cgroup out of memory: Killed process 42 (python)",
        "HostOutOfMemory",
    ),
    "sigterm": (143, "", "", "KilledBySigterm"),
    "segfault-signal": (139, "", "", "SegmentationFault"),
    "segfault-log": (1, "Segmentation fault (core dumped)", "", "SegmentationFault"),
    "command-not-found": (127, "sh: 1: trainer: not found", "", "CommandNotFound"),
    "gang-barrier": (1, "", "gang barrier timed out after 600 s", "JobGangAllocationTimeout"),
    "unknown": (3, "loss went up", "", "UnrecognisedFailure"),
    "success": (0, "CUDA out of memory", "", "Succeeded"),
}


@pytest.mark.parametrize(
    ("exit_code", "user_log", "platform_log", "phrase"), CONTAINER_CASES.values(), ids=CONTAINER_CASES.keys()
)
def test_the_runtime_recognises_common_failures(
    rules: RuleSet, exit_code: int, user_log: str, platform_log: str, phrase: str
) -> None:
    verdict = analyze(rules, exit_code=exit_code, user_log=user_log, platform_log=platform_log)
    assert verdict.phrase == phrase
    assert verdict.exit_code == exit_code


PLATFORM_CASES = {
    "node-lost": (None, PodStatus(reason="NodeLost"), "", "NodeLost", "retry_free"),
    "evicted": (None, PodStatus(reason="Evicted"), "", "TaskEvicted", "retry_free"),
    "oom-killed": (
        137,
        PodStatus(containers=(ContainerStatus(reason="OOMKilled", exit_code=137),)),
        "",
        "UserContainerDockerOOMKilled",
        "no_retry",
    ),
    "image-pull-k8s": (
        None,
        PodStatus(containers=(ContainerStatus(reason="ImagePullBackOff"),)),
        "",
        "ContainerImageNotExists",
        "no_retry",
    ),
    "image-pull-docker": (
        125,
        None,
        "docker: Error response from daemon: pull access denied for nope",
        "ContainerImageNotExists",
        "no_retry",
    ),
    "create-failed": (
        125,
        None,
        "docker: Error response from daemon: invalid mount config",
        "ContainerCreationFailed",
        "retry_counted",
    ),
    "gang-timeout": (
        None,
        PodStatus(reason="GangAllocationTimeout"),
        "",
        "JobGangAllocationTimeout",
        "retry_free",
    ),
    "stopped": (STOPPED_BY_USER_CODE, None, "", "StoppedByUser", "no_retry"),
    "runtime-code": (231, None, "", "PythonSyntaxError", "no_retry"),
    "no-exit-code": (None, PodStatus(reason="Failed"), "", "TaskFailedWithoutExitCode", "retry_counted"),
}


@pytest.mark.parametrize(
    ("exit_code", "pod", "platform_log", "phrase", "decision"),
    PLATFORM_CASES.values(),
    ids=PLATFORM_CASES.keys(),
)
def test_the_orchestrator_recognises_platform_failures(
    rules: RuleSet,
    exit_code: int | None,
    pod: PodStatus | None,
    platform_log: str,
    phrase: str,
    decision: str,
) -> None:
    verdict = analyze(rules, stage="platform", exit_code=exit_code, pod=pod, platform_log=platform_log)
    assert verdict.phrase == phrase
    assert retry_decision(verdict) == decision


def test_a_gang_timeout_is_a_resource_retry_with_back_off(rules: RuleSet) -> None:
    verdict = analyze(rules, stage="platform", exit_code=None, pod=PodStatus(reason="GangAllocationTimeout"))
    assert (verdict.conflict, retry_kind(verdict)) == (True, "resource")


def test_the_shipped_rules_pass_the_checker_and_give_users_a_reason_and_solution(rules: RuleSet) -> None:
    assert check_rules(rules) == []
    for rule in rules.rules:
        assert rule.reason, rule.code
        assert rule.solution or rule.type == "USER_SUCCESS", rule.code


def test_unknown_codes_without_fallback_rules_get_a_builtin_unknown_verdict() -> None:
    bare = load_rules("- {code: 1, phrase: One, behavior: PERMANENT}\n")
    container = analyze(bare, exit_code=9)
    platform = analyze(bare, stage="platform", exit_code=-5)
    assert (container.rule_code, container.type, container.code) == (None, "unknown", 255)
    assert (platform.rule_code, platform.type, platform.code) == (None, "unknown", -5)
    assert analyze(bare, exit_code=0).succeeded


def test_only_the_tail_of_a_log_is_read(rules: RuleSet) -> None:
    early = "ImportError: No module named x\n" + ("progress line\n" * 6000)
    assert analyze(rules, exit_code=1, user_log=early, tail_kib=64).phrase == "UnrecognisedFailure"
    assert analyze(rules, exit_code=1, user_log=early, tail_kib=128).phrase == "PythonImportError"


def test_only_the_head_of_a_very_long_line_is_read(rules: RuleSet) -> None:
    hidden = "x" * 2000 + " ImportError: No module named x"
    assert analyze(rules, exit_code=1, user_log=hidden).phrase == "UnrecognisedFailure"


def test_the_last_matching_line_is_reported(rules: RuleSet) -> None:
    log = "ImportError: first\nretrying\nImportError: second\n"
    verdict: FailureVerdict = analyze(rules, exit_code=1, user_log=log)
    assert verdict.matched_line == "ImportError: second"


def test_a_wrong_stage_is_refused(rules: RuleSet) -> None:
    with pytest.raises(ValueError, match="stage"):
        analyze(rules, exit_code=1, stage="node")  # type: ignore[arg-type]


RUNTIME_CODES = {
    246: ("RuntimeSpecInvalid", "no_retry", "user"),
    247: ("RuntimePluginFailed", "retry_counted", "user"),
    248: ("RuntimeSecretMissing", "no_retry", "user"),
    251: ("JobGangAllocationTimeout", "retry_free", "resource"),
    253: ("ContainerPortConflict", "retry_free", "platform"),
    255: ("UnrecognisedFailure", "retry_counted", "user"),
}


@pytest.mark.parametrize(("code", "expected"), RUNTIME_CODES.items(), ids=[str(c) for c in RUNTIME_CODES])
def test_codes_the_runtime_exits_with_keep_their_meaning_on_the_platform(
    rules: RuleSet, code: int, expected: tuple[str, str, str]
) -> None:
    verdict = analyze(rules, stage="platform", exit_code=code)
    assert (verdict.phrase, retry_decision(verdict), retry_kind(verdict)) == expected


def test_an_unknown_failure_of_the_platform_is_still_counted_as_the_users_retry() -> None:
    spec_like = load_rules("- {code: 128, phrase: Ecc, type: PLATFORM_FAILURE, behavior: UNKNOWN}\n")
    verdict = analyze(spec_like, stage="platform", exit_code=128)
    assert (retry_decision(verdict), retry_kind(verdict)) == ("retry_counted", "user")
