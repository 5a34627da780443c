"""The runtime explains a failed exit with the container-level failure rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.runtime.helpers import log_dir, role, run_runtime, spec_for, write_spec


def result_of(tmp_path: Path, entrypoint: str, **extra: Any) -> dict[str, Any]:
    spec = spec_for(tmp_path, "main", 0, [role("main")], entrypoint, **extra)
    code, err = run_runtime(write_spec(tmp_path, spec))
    result: dict[str, Any] = json.loads((log_dir(spec) / "runtime-result.json").read_text())
    assert result["exitCode"] == code, err
    return result


def test_a_python_syntax_error_is_a_permanent_failure_with_the_line_that_says_so(tmp_path: Path) -> None:
    result = result_of(tmp_path, "python3 -c 'def broken(:'")
    failure = result["failure"]
    assert isinstance(failure, dict)
    assert failure["phrase"] == "PythonSyntaxError"
    assert failure["type"] == "permanent"
    assert "SyntaxError" in str(failure["matched_line"])


def test_success_has_no_failure(tmp_path: Path) -> None:
    assert result_of(tmp_path, "true")["failure"] is None


def test_the_operators_rule_file_in_the_spec_decides(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "- code: 42\n  phrase: DatasetMissing\n  issuer: USER_CONTAINER\n  causer: USER_CONTAINER\n"
        "  type: USER_FAILURE\n"
        "  stage: RUNNING\n  behavior: PERMANENT\n  reaction: NEVER_RETRY\n  reason: the dataset is gone\n"
        "  pattern:\n    runtimeContainerPatterns:\n    - exitCode: 3\n"
    )
    failure = result_of(tmp_path, "exit 3", failure_rules_file=str(rules))["failure"]
    assert isinstance(failure, dict)
    assert failure["phrase"] == "DatasetMissing"
