"""`pai failure-rules` checks rule files and explains verdicts without a platform running."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pai.cli.main import app
from tests.support.anchors import anchor, needs

SPEC = anchor("openpai", "exit-spec")
SHIPPED = Path(__file__).resolve().parents[2] / "libs" / "failures" / "rules.yaml"


def test_check_says_ok_for_the_shipped_rules() -> None:
    result = CliRunner().invoke(app, ["failure-rules", "check", str(SHIPPED)])
    assert result.exit_code == 0, result.output
    rules = sum(1 for line in SHIPPED.read_text().splitlines() if line.startswith("- code: "))
    assert rules >= 30  # OpenPAI's codes this platform explains, its own 245-248 included
    assert result.stdout.startswith(f"OK: {rules} rules, version 1")


@needs("openpai", "exit-spec", "k8s-job-exit-spec.yaml")
def test_check_warns_about_the_shadowed_entry_of_openpais_spec() -> None:
    result = CliRunner().invoke(app, ["failure-rules", "check", str(SPEC / "k8s-job-exit-spec.yaml")])
    assert result.exit_code == 0
    assert "warning: rule #26 (code -1205)" in result.stdout
    assert "OK: 62 rules, version 1, 1 warning(s)" in result.stdout


def test_check_lists_problems_and_fails_on_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "rules.yaml"
    bad.write_text("- {code: 1, phrase: A, pattern: {runtimeContainerPatterns: [{userLogRegex: '(a*)*'}]}}\n")
    result = CliRunner().invoke(app, ["failure-rules", "check", str(bad)])
    assert result.exit_code == 1
    assert "rule #0 (code 1), field 'pattern.runtimeContainerPatterns[0].userLogRegex'" in result.stderr
    assert "Traceback" not in result.output


def test_check_reports_a_missing_file_without_a_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["failure-rules", "check", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read the rule file" in result.stderr


def test_explain_shows_the_matching_rule_and_line(tmp_path: Path) -> None:
    log = tmp_path / "user.log"
    log.write_text("Traceback (most recent call last):\nModuleNotFoundError: No module named 'apex'\n")
    result = CliRunner().invoke(app, ["failure-rules", "explain", "--exit-code", "1", "--log", str(log)])
    assert result.exit_code == 0, result.output
    assert "code:         232 PythonImportError" in result.stdout
    assert "retry:        no_retry, counted as user" in result.stdout
    assert "matched line: ModuleNotFoundError: No module named 'apex'" in result.stdout


def test_explain_on_the_platform_stage_uses_the_status_reason() -> None:
    args = ["failure-rules", "explain", "--stage", "platform", "--pod-reason", "NodeLost"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "NodeLost" in result.stdout
    assert "retry_free" in result.stdout
