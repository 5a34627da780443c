"""OpenPAI's own exit spec loads, and each of its 62 entries is recognised from its documented pattern.

Samples are written to match each entry's pattern as the spec writes it. Where the spec's regex
differs from the real message it aims at (unescaped brackets), the sample follows the regex: the
test checks the matching engine, not the spec's regexes.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from libs.failures import PodStatus, RuleSet, analyze, check_rules, dump_rules, load_rules
from libs.failures.analysis import ContainerStatus
from tests.support.anchors import skip_module_without

SPEC_PATH = skip_module_without("openpai", "exit-spec", "k8s-job-exit-spec.yaml")
SPEC_TEXT = SPEC_PATH.read_text(encoding="utf-8")
SPEC_ENTRIES: list[dict[str, Any]] = yaml.safe_load(SPEC_TEXT)["spec"]


def _container(
    exit_code: int, user_log: str = "", platform_log: str = "", ecc: bool = False
) -> dict[str, Any]:
    return {
        "stage": "container",
        "exit_code": exit_code,
        "user_log": f"starting\n{user_log}\n" if user_log else "",
        "platform_log": platform_log,
        "gpu_double_ecc_error": ecc,
    }


def _pod(reason: str = "", message: str = "", *containers: ContainerStatus) -> dict[str, Any]:
    return {
        "stage": "platform",
        "exit_code": None,
        "pod": PodStatus(reason=reason, message=message, containers=containers),
    }


def _box(reason: str, code: int | None, message: str = "", name: str = "main") -> ContainerStatus:
    return ContainerStatus(name=name, reason=reason, exit_code=code, message=message)


def _direct(code: int) -> dict[str, Any]:
    return {"stage": "platform", "exit_code": code}


SAMPLES: dict[int, dict[str, Any]] = {
    -1000: _pod("Evicted", "The node was low on resource: memory."),
    -1001: _pod("NodeLost"),
    -1002: _pod("OutOfnvidia.com/gpu"),
    -1003: _pod("Preempting"),
    -1004: _pod("DeadlineExceeded"),
    -1005: _pod("Forbidden"),
    -1006: _pod("UnexpectedAdmissionError"),
    -1300: _pod("", "", _box("OOMKilled", 137, name="init")),
    -1200: _pod("", "", _box("OOMKilled", 137, name="app")),
    -1201: _pod("", "", _box("ContainerCannotRun", 125)),
    -1202: _pod("", "", _box("ContainerCannotRun", 126)),
    -1203: _pod("", "", _box("ContainerCannotRun", 127)),
    -1204: _pod("", "", _box("ContainerCannotRun", 128, "oci runtime error")),
    -1205: _pod(
        "", "", _box("ContainerCannotRun", 128, "nvidia-container-cli: device error: unknown device id: 3")
    ),
    128: _container(1, ecc=True),
    **{code: _container(code) for code in (130, 131, 132, 134, 135, 136, 137, 139, 141, 143)},
    220: _container(127, "bash: trainer: command not found"),
    221: _container(1, "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating"),
    222: _container(1, "Signal code: Address not mapped (1)"),
    223: _container(1, "CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered"),
    224: _container(1, "CUDA driver version is insufficient for CUDA runtime version"),
    225: _container(1, "RuntimeError: dropout supported only in cudnn v5.1 and above"),
    226: _container(1, "THCudaCheck FAIL: cuda runtime error 2 : out of memory"),
    228: _container(1, "trainer: unknown option --lr"),
    229: _container(1, "perhaps your file is in a different file format"),
    230: _container(1, "ValueError: Restore called with invalid save path: /ckpt"),
    231: _container(1, '  File "train.py", line 3\nSyntaxError: invalid syntax'),
    232: _container(1, "ImportError: No module named foo"),
    233: _container(1, "IndexError: list index out of range"),
    234: _container(1, "Segmentation fault"),
    235: _container(1, "Aborted (core dumped)"),
    249: _container(10, platform_log="SSH barrier reaches max retry count"),
}
# OpenPAI's spec puts -1205 after -1204, whose pattern accepts every message with exit code 128; by
# the spec's own "first match wins" -1205 can never be chosen. The checker reports exactly this.
SHADOWED = {-1205: -1204}


@pytest.fixture(scope="module")
def spec_rules() -> RuleSet:
    return load_rules(SPEC_TEXT)


def test_the_spec_loads_with_all_62_entries_in_file_order(spec_rules: RuleSet) -> None:
    assert [rule.code for rule in spec_rules.rules] == [entry["code"] for entry in SPEC_ENTRIES]
    assert len(spec_rules.rules) == 62


@pytest.mark.parametrize("entry", SPEC_ENTRIES, ids=lambda e: f"{e['code']}-{e['phrase']}")
def test_each_entry_is_recognised_from_its_documented_pattern(
    spec_rules: RuleSet, entry: dict[str, Any]
) -> None:
    code = entry["code"]
    has_pattern = bool(entry.get("pattern"))
    sample = SAMPLES[code] if has_pattern else _direct(code)
    verdict = analyze(spec_rules, **sample)
    assert verdict.rule_code == SHADOWED.get(code, code)
    if code not in SHADOWED:
        assert verdict.phrase == entry["phrase"]
        assert verdict.category == entry["type"]
        expected = {"TRANSIENT": "transient", "TRANSIENT_CONFLICT": "transient", "PERMANENT": "permanent"}
        if entry["type"] != "USER_SUCCESS":
            assert verdict.type == expected.get(entry["behavior"], "unknown")


def test_every_patterned_entry_has_a_sample_and_no_sample_is_stale() -> None:
    patterned = {entry["code"] for entry in SPEC_ENTRIES if entry.get("pattern")}
    assert set(SAMPLES) == patterned


@pytest.mark.parametrize("entry", SPEC_ENTRIES, ids=lambda e: f"{e['code']}-{e['phrase']}")
def test_the_orchestrator_reads_any_spec_code_back_as_its_entry(
    spec_rules: RuleSet, entry: dict[str, Any]
) -> None:
    verdict = analyze(spec_rules, stage="platform", exit_code=entry["code"])
    assert (verdict.rule_code, verdict.code) == (entry["code"], entry["code"])


def test_the_spec_survives_a_dump_and_reload(spec_rules: RuleSet) -> None:
    assert load_rules(dump_rules(spec_rules)) == spec_rules


def test_the_checker_names_the_one_shadowed_entry_of_the_spec(spec_rules: RuleSet) -> None:
    warnings = check_rules(spec_rules)
    assert [(w.code, w.field) for w in warnings] == [(-1205, "pattern.controllerPodPatterns[0]")]
    assert "-1204" in warnings[0].message


def test_undefined_codes_fall_back_to_the_shadow_entries_keeping_the_raw_code(spec_rules: RuleSet) -> None:
    positive = analyze(spec_rules, stage="platform", exit_code=3)
    negative = analyze(spec_rules, stage="platform", exit_code=-42)
    assert (positive.rule_code, positive.code, positive.type) == (256, 3, "unknown")
    assert (negative.rule_code, negative.code, negative.type) == (-8000, -42, "unknown")


def test_an_unrecognised_command_failure_in_the_runtime_is_255(spec_rules: RuleSet) -> None:
    verdict = analyze(spec_rules, exit_code=1, user_log="nothing useful here")
    assert (verdict.code, verdict.phrase, verdict.type) == (255, "PAIRuntimeUnknownFailed", "unknown")
